// qasync console: the only script. The pages work without it; it adds
// local times on hover and an opt-in auto-refresh of a running execution.
"use strict";
(function () {
  // Every <time datetime> shows UTC; its tooltip gives the local time.
  for (const el of document.querySelectorAll("time[datetime]")) {
    const d = new Date(el.getAttribute("datetime"));
    if (!isNaN(d)) {
      el.title = d.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "medium" }) + " (local)";
    }
  }
  // Auto-refresh of an execution that has not ended, remembered for the tab.
  const box = document.getElementById("auto-refresh");
  if (box) {
    const key = "qasync-console-refresh";
    box.checked = sessionStorage.getItem(key) === "1";
    let timer = null;
    const arm = () => {
      clearTimeout(timer);
      if (box.checked) {
        timer = setTimeout(() => location.reload(), 3000);
      }
    };
    box.addEventListener("change", () => {
      sessionStorage.setItem(key, box.checked ? "1" : "0");
      arm();
    });
    arm();
  }
  // A form is sent once: a double click does not cancel or re-drive twice.
  for (const form of document.querySelectorAll("form[method=post]")) {
    form.addEventListener("submit", () => {
      for (const b of form.querySelectorAll("button[type=submit]")) {
        b.disabled = true;
      }
    });
  }
})();
