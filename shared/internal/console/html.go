package console

// The pages are written by plain Go functions over doc, not by
// html/template. text/template, under html/template, looks methods up by
// name with reflect at run time, which makes the Go linker keep every
// exported method of every type the binary holds in an interface: in
// the submit function the AWS SDK clients' hundreds of operations, 4.1
// MiB of its bundle. The HTML builders on the module proxy do not fit
// either: templ needs a code generator and, like gomponents, imports
// html/template. The pages are few and fixed, so the console writes
// them itself, with one rule that the types enforce: markup is written
// only from constants (doc.raw takes a markup, which a string variable
// does not convert to without an explicit conversion, and the console
// makes none), and every dynamic value goes through doc.text, which
// escapes it with html.EscapeString (right for element text and for
// double-quoted attribute values alike). Addresses are built with
// net/url's escaping before that (executionURL, pageLink). No dynamic
// value is ever written inside a <script> or a style.

import (
	"bytes"
	"html"
	"net/http"
	"strconv"
	"time"
)

// markup is HTML the console's code holds as a constant.
type markup string

// doc is a page being written.
type doc struct{ bytes.Buffer }

// raw writes constant markup.
func (d *doc) raw(m markup) *doc {
	d.WriteString(string(m))
	return d
}

// rawIf writes constant markup when cond holds.
func (d *doc) rawIf(cond bool, m markup) *doc {
	if cond {
		d.WriteString(string(m))
	}
	return d
}

// text writes s escaped: as element text, or inside a double-quoted
// attribute value.
func (d *doc) text(s string) *doc {
	d.WriteString(html.EscapeString(s))
	return d
}

// num writes an integer.
func (d *doc) num(n int64) *doc {
	d.WriteString(strconv.FormatInt(n, 10))
	return d
}

// dur writes a duration for people (fmtDuration).
func (d *doc) dur(x time.Duration) *doc { return d.text(fmtDuration(x)) }

// when writes a time as a <time> element in UTC ("-" for the zero time);
// the script adds the local time as its tooltip.
func (d *doc) when(t time.Time) *doc {
	if t.IsZero() {
		return d.raw("-")
	}
	return d.raw(`<time datetime="`).text(t.UTC().Format(time.RFC3339Nano)).raw(`">`).text(fmtTime(t)).raw(`</time>`)
}

// render writes a page: the layout of b around content, with status code.
func (c *Console) render(w http.ResponseWriter, status int, b *base, content func(*doc)) {
	var d doc
	writeLayout(&d, b, content)
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(d.Bytes())
}

// writeLayout writes what every page has around its content: the head,
// the top bar (sections, tenant, operator sign-in) and the footer.
func writeLayout(d *doc, b *base, content func(*doc)) {
	d.raw(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>`).text(b.Title).raw(` · qasync console</title>
<link rel="icon" href="`).text(asset("favicon.svg")).raw(`" type="image/svg+xml">
<link rel="stylesheet" href="`).text(asset("console.css")).raw(`">
<script src="`).text(asset("console.js")).raw(`" defer></script>
</head>
<body>
<a class="skip" href="#main">Skip to content</a>
<header class="top">
  <a class="brand" href="`+Prefix+`">qasync console</a>
  <nav aria-label="Sections">
    <a href="`+Prefix+`"`).rawIf(b.Nav == "executions", ` aria-current="page"`).raw(`>Executions</a>
    <a href="`+Prefix+`/dead-letters"`).rawIf(b.Nav == "dead-letters", ` aria-current="page"`).raw(`>Dead letters</a>
    <a href="`+Prefix+`/schedules"`).rawIf(b.Nav == "schedules", ` aria-current="page"`).raw(`>Schedules</a>
  </nav>
  <div class="who">`)
	switch {
	case b.TenantEditable:
		d.raw(`
    <form class="inline" method="post" action="` + Prefix + `/tenant" id="tenant-form">
      <input type="hidden" name="csrf" value="`).text(b.CSRF).raw(`">
      <label for="tenant">Tenant</label>
      <input id="tenant" name="tenant" value="`).text(b.Tenant).raw(`" maxlength="128" size="12" autocomplete="off">
      <button type="submit">Show</button>
    </form>`)
	case b.Tenant != "":
		d.raw(`
    <span class="tenant">Tenant <strong id="tenant-name">`).text(b.Tenant).raw(`</strong></span>`)
	}
	switch {
	case b.ActionsEnabled && b.Operator:
		d.raw(`
    <form class="inline" method="post" action="` + Prefix + `/logout">
      <input type="hidden" name="csrf" value="`).text(b.CSRF).raw(`">
      <input type="hidden" name="next" value="`).text(b.Here).raw(`">
      <span class="operator" id="operator-badge">Operator</span>
      <button type="submit" id="sign-out">Sign out</button>
    </form>`)
	case b.ActionsEnabled:
		d.raw(`
    <form class="inline" method="post" action="` + Prefix + `/login" id="login-form">
      <input type="hidden" name="csrf" value="`).text(b.CSRF).raw(`">
      <input type="hidden" name="next" value="`).text(b.Here).raw(`">
      <label for="token">Operator token</label>
      <input id="token" name="token" type="password" autocomplete="current-password" size="14" required>
      <button type="submit" id="sign-in">Sign in</button>
    </form>`)
	}
	d.raw(`
  </div>
</header>
<main id="main">`)
	if b.Flash != "" {
		d.raw(`
<p class="flash" role="status" id="flash">`).text(b.Flash).raw(`</p>`)
	}
	d.raw("\n")
	content(d)
	d.raw(`
</main>
<footer><p>Times are UTC (hover for local time). An execution's input and result are shown only to a signed-in operator, when asked for on its page; every view is logged.</p></footer>
</body>
</html>`)
}

// pager writes the paging links of a list: to the first page (when this
// is not it) and to the next (when there is one).
func (d *doc) pager(firstURL, nextURL string) {
	d.raw(`<nav class="pager" aria-label="Pages">`)
	if firstURL != "" {
		d.raw(`<a href="`).text(firstURL).raw(`" id="first-page">« First page</a>`)
	}
	if nextURL != "" {
		d.raw(`<a href="`).text(nextURL).raw(`" id="next-page" rel="next">Next page »</a>`)
	}
	d.raw(`
</nav>`)
}

// pipelineField writes a list filter's pipeline field, offering the
// registered pipelines.
func (d *doc) pipelineField(pipeline string, pipelines []string) {
	d.raw(`
  <div class="field">
    <label for="pipeline">Pipeline</label>
    <input id="pipeline" name="pipeline" value="`).text(pipeline).raw(`" list="pipeline-ids" placeholder="all pipelines" autocomplete="off">
    <datalist id="pipeline-ids">`)
	for _, p := range pipelines {
		d.raw(`<option value="`).text(p).raw(`">`)
	}
	d.raw(`</datalist>
  </div>`)
}

// limitField writes a list filter's page size field.
func (d *doc) limitField(limit int, limits []int) {
	d.raw(`
  <div class="field">
    <label for="limit">Per page</label>
    <select id="limit" name="limit">`)
	for _, n := range limits {
		d.raw(`
      <option value="`).num(int64(n)).raw(`"`).rawIf(n == limit, ` selected`).raw(`>`).num(int64(n)).raw(`</option>`)
	}
	d.raw(`
    </select>
  </div>`)
}

// caption writes a list's caption: its order, the page number past the
// first, and how many rows it shows.
func (d *doc) caption(page, rows int) {
	d.raw(`<caption>Newest first`)
	if page > 1 {
		d.raw(`, page `).num(int64(page))
	}
	d.raw(` · `).num(int64(rows)).raw(` shown</caption>`)
}
