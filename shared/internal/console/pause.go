package console

// Pause and resume from the console: the execution page's Pause and
// Resume forms (operator, CSRF-checked, a reason required), the pause
// state the page shows (the reason, a request not yet honoured, the
// status it resumes to), and the bulk pause and resume forms on the
// executions page (the bulk re-drive's form, dry run and progress page,
// bulk.go, with another action).

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"

	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/store"
)

// pausable reports whether a pause takes an execution in status s (or
// whether it already is paused or asked to be: the form is then not
// offered).
func pausable(e *store.Execution) bool {
	return slices.Contains(bulkPause.Statuses, e.Status) && e.PauseRequestedAt.IsZero()
}

// resumable reports whether a resume applies: PAUSED, or a pause request
// not yet honoured (withdrawn by the resume).
func resumable(e *store.Execution) bool {
	return e.Status == store.Paused || (!e.PauseRequestedAt.IsZero() && (e.Status == store.Running || e.Status == store.WaitingChildren ||
		e.Status == store.Queued || e.Status == store.WaitRetry)) // the last two where they need a map's children
}

// pause handles POST /console/executions/{id}/pause.
func (c *Console) pause(w http.ResponseWriter, r *http.Request) {
	key, reason, ok := c.actionKey(w, r)
	if !ok {
		return
	}
	e, changed, err := c.b.Pause(r.Context(), key, engine.PauseOptions{Reason: reason})
	switch {
	case errors.Is(err, engine.ErrNotPausable):
		c.logAction(r, slog.LevelInfo, "console_pause_refused", slog.String("tenant", key.TenantID),
			slog.String("execution_id", key.ExecutionID), slog.String("status", string(e.Status)))
		c.errorPage(w, r, http.StatusConflict, "Cannot pause",
			fmt.Sprintf("The execution is %s: only %s executions can be paused.", e.Status, statusNames(bulkPause.Statuses)))
		return
	case errors.Is(err, store.ErrConflict):
		c.errorPage(w, r, http.StatusConflict, "Changed meanwhile", "The execution changed while it was being paused. Reload it and try again.")
		return
	case err != nil:
		c.backendError(w, r, "Pausing", err)
		return
	}
	done := "already-paused"
	switch {
	case changed && e.Status == store.Paused:
		done = "paused"
	case changed:
		done = "pause-requested"
	}
	c.logAction(r, slog.LevelInfo, "console_pause", slog.String("tenant", key.TenantID), slog.String("execution_id", key.ExecutionID),
		slog.Bool("changed", changed), slog.String("status", string(e.Status)))
	http.Redirect(w, r, executionURL(key.ExecutionID)+"?done="+done, http.StatusSeeOther)
}

// resume handles POST /console/executions/{id}/resume.
func (c *Console) resume(w http.ResponseWriter, r *http.Request) {
	key, reason, ok := c.actionKey(w, r)
	if !ok {
		return
	}
	e, err := c.b.Resume(r.Context(), key, engine.PauseOptions{Reason: reason})
	switch {
	case errors.Is(err, engine.ErrNotPaused):
		c.logAction(r, slog.LevelInfo, "console_resume_refused", slog.String("tenant", key.TenantID),
			slog.String("execution_id", key.ExecutionID), slog.String("status", string(e.Status)))
		c.errorPage(w, r, http.StatusConflict, "Not paused", fmt.Sprintf("The execution is %s and has no pause request: there is nothing to resume.", e.Status))
		return
	case errors.Is(err, store.ErrConflict):
		c.errorPage(w, r, http.StatusConflict, "Changed meanwhile", "The execution changed while it was being resumed. Reload it and try again.")
		return
	case err != nil:
		c.backendError(w, r, "Resuming", err)
		return
	}
	done := "resumed"
	if e.Status != store.Queued && e.Status != store.WaitRetry && e.Status != store.WaitingExternal {
		done = "pause-withdrawn"
	}
	c.logAction(r, slog.LevelInfo, "console_resume", slog.String("tenant", key.TenantID), slog.String("execution_id", key.ExecutionID),
		slog.String("status", string(e.Status)))
	http.Redirect(w, r, executionURL(key.ExecutionID)+"?done="+done, http.StatusSeeOther)
}

// pauseFlash is the note after a pause or a resume ("" for another code).
func pauseFlash(code string) string {
	switch code {
	case "paused":
		return "The execution is paused: nothing claims it until it is resumed."
	case "pause-requested":
		return "Pause requested: the running step finishes, and its commit parks the execution PAUSED."
	case "already-paused":
		return "The execution was already paused (or its pause requested)."
	case "resumed":
		return "The execution is resumed: it goes on where it was paused."
	case "pause-withdrawn":
		return "The pause request is withdrawn: the execution goes on."
	}
	return ""
}

// pauseState writes what the execution page shows of a pause: PAUSED
// (its reason, since when, the status a resume returns it to), or a
// request not yet honoured.
func (x *execData) pauseState(d *doc) {
	e := &x.E
	switch {
	case e.Status == store.Paused:
		d.raw(`
<p id="pause-state"><span class="badge s-`).text(statusClass(e.Status)).raw(`">PAUSED</span> since `).when(e.PauseRequestedAt).
			raw(`; a resume returns it to `).text(string(e.PausedFrom)).raw(`. Reason: <span id="pause-reason">`).text(e.PauseReason).raw(`</span></p>`)
	case !e.PauseRequestedAt.IsZero():
		d.raw(`
<p id="pause-state">Pause requested `).when(e.PauseRequestedAt).raw(`: the running step finishes, then the execution is parked PAUSED. Reason: <span id="pause-reason">`).
			text(e.PauseReason).raw(`</span></p>`)
	}
}

// pauseForms writes the Pause and Resume forms (an operator's).
func (x *execData) pauseForms(d *doc) {
	if x.CanPause {
		d.raw(`
<form method="post" action="`).text(x.ActionURL).raw(`/pause" class="action" id="pause-form">
  <input type="hidden" name="csrf" value="`).text(x.CSRF).raw(`">
  <label for="pause-reason-input">Reason for pausing</label>
  <input id="pause-reason-input" name="reason" required maxlength="`).num(int64(x.ReasonMax)).raw(`" size="40">
  <button type="submit" id="pause-button">Pause execution</button>`).
			rawIf(x.E.Status == store.Running || x.E.Status == store.WaitingChildren, `<p class="muted">A request: the running step (or the children) go on, and the execution is parked PAUSED where it would have gone on.</p>`).raw(`
</form>`)
	}
	if x.CanResume {
		label := "Resume execution"
		if x.E.Status != store.Paused {
			label = "Withdraw the pause request"
		}
		d.raw(`
<form method="post" action="`).text(x.ActionURL).raw(`/resume" class="action" id="resume-form">
  <input type="hidden" name="csrf" value="`).text(x.CSRF).raw(`">
  <label for="resume-reason-input">Reason for resuming</label>
  <input id="resume-reason-input" name="reason" required maxlength="`).num(int64(x.ReasonMax)).raw(`" size="40">
  <button type="submit" id="resume-button">`).text(label).raw(`</button>
</form>`)
	}
}

// bulkPauseForms writes the executions page's bulk pause and resume
// forms (an operator's).
func (l *listData) bulkPauseForms(d *doc) {
	if !l.Operator {
		return
	}
	for i := range l.Bulk {
		l.Bulk[i].write(d, &l.base)
	}
}
