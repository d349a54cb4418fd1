package console

import (
	"slices"
	"strconv"
	"strings"

	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/store"
)

// The pages' content, each written inside the layout (html.go says why
// by hand and how every value is escaped).

// content writes the executions page.
func (l *listData) content(d *doc) {
	d.raw(`<h1>Executions</h1>
<form class="search" method="get" action="` + Prefix + `/search" role="search" id="search-form">
  <label for="search">Find an execution</label>
  <input id="search" name="q" type="search" placeholder="execution id or idempotency key" maxlength="255" size="44" required autocomplete="off">
  <button type="submit" id="search-button">Find</button>
</form>
<form class="filters" method="get" action="` + Prefix + `" id="filters">`)
	d.pipelineField(l.Pipeline, l.Pipelines)
	d.raw(`
  <fieldset>
    <legend>Status</legend>`)
	for _, s := range l.Statuses {
		d.raw(`
    <label class="check"><input type="checkbox" name="status" value="`).text(string(s.Name)).raw(`"`).rawIf(s.Checked, ` checked`).
			raw(`> <span class="badge s-`).text(statusClass(s.Name)).raw(`">`).text(string(s.Name)).raw(`</span></label>`)
	}
	d.raw(`
  </fieldset>
  <div class="field">
    <label for="created-after">Created after (UTC)</label>
    <input id="created-after" name="createdAfter" type="datetime-local" step="1" value="`).text(l.CreatedAfter).raw(`">
  </div>
  <div class="field">
    <label for="created-before">Created before (UTC)</label>
    <input id="created-before" name="createdBefore" type="datetime-local" step="1" value="`).text(l.CreatedBefore).raw(`">
  </div>`)
	d.limitField(l.Limit, l.Limits)
	d.raw(`
  <div class="buttons">
    <button type="submit" id="apply-filters">Apply</button>`).
		rawIf(l.Filtered, ` <a href="`+Prefix+`" id="clear-filters">Clear filters</a>`).raw(`
  </div>
</form>

<table class="list" id="executions">
  `)
	d.caption(l.Page, len(l.Rows))
	d.raw(`
  <thead>
    <tr><th scope="col">Execution</th><th scope="col">Pipeline</th><th scope="col">Status</th><th scope="col">Step</th>
      <th scope="col">Attempt</th><th scope="col">Created</th><th scope="col">Updated</th><th scope="col">Duration</th><th scope="col">Error</th><th scope="col">Fan-out</th></tr>
  </thead>
  <tbody>`)
	for _, r := range l.Rows {
		d.raw(`
    <tr data-status="`).text(string(r.Status)).raw(`">
      <td class="id"><a href="`).text(r.URL).raw(`">`).text(r.ID).raw(`</a></td>
      <td>`).text(r.Pipeline).raw(`</td>
      <td><span class="badge s-`).text(statusClass(r.Status)).raw(`">`).text(string(r.Status)).raw(`</span></td>
      <td>`).num(int64(r.StepIndex)).raw(` · `).text(r.StepName).raw(`</td>
      <td class="num">`).num(int64(r.Attempt)).raw(`</td>
      <td>`).when(r.Created).raw(`</td>
      <td>`).when(r.Updated).raw(`</td>
      <td class="num">`).dur(r.Age).rawIf(!r.Terminal, ` <span class="muted">so far</span>`).raw(`</td>
      <td>`)
		if r.ErrorCode != "" {
			d.raw(`<code>`).text(r.ErrorCode).raw(`</code>`)
		}
		d.raw(`</td>
      <td class="fanout">`)
		r.fanOut(d)
		d.raw(`</td>
    </tr>`)
	}
	if len(l.Rows) == 0 {
		d.raw(`
    <tr><td colspan="10" class="empty">No executions`).rawIf(l.Filtered, ` match these filters`).raw(`.</td></tr>`)
	}
	d.raw(`
  </tbody>
</table>
`)
	d.pager(l.FirstURL, l.NextURL)
	l.bulkPauseForms(d)
}

// fanOut writes a row's fan-out cell: a map parent's number of children
// (the list carries only that: its page has the counts, which the link
// opens), and a child's link to its parent.
func (r *execRow) fanOut(d *doc) {
	if r.Children > 0 {
		d.raw(`<a class="children" href="`).text(r.URL).raw(`#children" title="the counts are on the execution's page">`).
			num(int64(r.Children)).raw(` children</a>`).rawIf(r.ChildrenDone, ` <span class="muted">all ended</span>`)
	}
	if r.ParentID != "" {
		if r.Children > 0 {
			d.raw(`<br>`)
		}
		// The parent's id is as long as a child's: the cell names it in
		// a tooltip, to keep the row narrow.
		d.raw(`<span class="child">child #`).num(int64(r.Index)).raw(` of `)
		if r.ParentURL != "" {
			d.raw(`<a href="`).text(r.ParentURL).raw(`" title="`).text(r.ParentID).raw(`" rel="up">its parent</a>`)
		} else {
			d.raw(`<span title="`).text(r.ParentID).raw(`">its parent</span>`)
		}
		d.raw(`</span>`)
	}
}

// parentID writes a parent's id: linked to its page when url is set,
// with the element id htmlID when that is set.
func (d *doc) parentID(id, url string, htmlID markup) {
	if url == "" {
		d.raw(`<span class="id">`).text(id).raw(`</span>`)
		return
	}
	d.raw(`<a class="id" href="`).text(url).raw(`"`)
	if htmlID != "" {
		d.raw(` id="`).raw(htmlID).raw(`"`)
	}
	d.raw(` rel="up">`).text(id).raw(`</a>`)
}

// content writes the dead-letters page.
func (l *dlData) content(d *doc) {
	d.raw(`<h1>Dead letters</h1>
<p class="muted">Executions that failed for good (retries exhausted, or a non-retryable error), newest first, each with its status now. Re-drive one from its page, or many with the form below.</p>
<form class="filters" method="get" action="` + Prefix + `/dead-letters" id="dl-filters">`)
	d.pipelineField(l.Pipeline, l.Pipelines)
	d.raw(`
  <label class="check"><input type="checkbox" name="outstanding" value="1" id="outstanding-only"`).rawIf(l.OutstandingOnly, ` checked`).
		raw(`> Outstanding only <span class="muted">(still failed: not re-driven since)</span></label>`)
	d.limitField(l.Limit, l.Limits)
	d.raw(`
  <div class="buttons"><button type="submit" id="apply-dl-filters">Apply</button>`).
		rawIf(l.Pipeline != "" || l.OutstandingOnly, ` <a href="`+Prefix+`/dead-letters" id="clear-filters">Clear filters</a>`).raw(`</div>
</form>`)
	l.counts(d)
	d.raw(`
<table class="list" id="dead-letters">
  `)
	d.caption(l.Page, len(l.Rows))
	d.raw(`
  <thead><tr><th scope="col">Recorded</th><th scope="col">Execution</th><th scope="col">Now</th><th scope="col">Pipeline</th><th scope="col">Step</th>
    <th scope="col">Attempt</th><th scope="col">Reason</th><th scope="col">Error</th><th scope="col">Failed</th></tr></thead>
  <tbody>`)
	for _, r := range l.Rows {
		d.raw(`
    <tr`).rawIf(r.Outstanding, ` class="outstanding"`).raw(` data-outstanding="`).rawIf(r.Outstanding, `true`).rawIf(!r.Outstanding, `false`).raw(`">
      <td>`).when(r.RecordedAt).raw(`</td>
      <td class="id">`)
		if r.URL != "" {
			d.raw(`<a href="`).text(r.URL).raw(`">`).text(r.ExecutionID).raw(`</a>`)
		} else {
			d.text(r.ExecutionID)
		}
		d.raw(`</td>
      <td class="now">`)
		switch {
		case r.Gone:
			d.raw(`<span class="muted" title="the execution's row expired">gone</span>`)
		default:
			if r.URL != "" {
				d.raw(`<a href="`).text(r.URL).raw(`">`)
			}
			d.raw(`<span class="badge s-`).text(statusClass(r.Now)).raw(`">`).text(string(r.Now)).raw(`</span>`)
			if r.URL != "" {
				d.raw(`</a>`)
			}
			if r.Redrives > 0 {
				d.raw(` <span class="muted">re-driven `).num(int64(r.Redrives)).raw(`×</span>`)
			}
			d.rawIf(r.Outstanding, ` <span class="outstanding-mark">outstanding</span>`)
		}
		d.raw(`</td>
      <td>`).text(r.Pipeline).raw(`</td>
      <td>`).num(int64(r.StepIndex)).raw(` · `).text(r.StepName).raw(`</td>
      <td class="num">`).num(int64(r.Attempt)).raw(`</td>
      <td>`).text(r.Reason).raw(`</td>
      <td class="error">`)
		if r.ErrorCode != "" {
			d.raw(`<code>`).text(r.ErrorCode).raw(`</code> `)
		}
		d.text(r.ErrorMessage).raw(`</td>
      <td>`).when(r.FailedAt).raw(`</td>
    </tr>`)
	}
	if len(l.Rows) == 0 {
		d.raw(`
    <tr><td colspan="9" class="empty">No dead letters`).rawIf(l.OutstandingOnly, ` outstanding`).raw(`.</td></tr>`)
	}
	d.raw(`
  </tbody>
</table>
`)
	d.pager(l.FirstURL, l.NextURL)
	l.bulk(d)
}

// counts writes the counts by error code (the first page only).
func (l *dlData) counts(d *doc) {
	if l.Page != 1 {
		return
	}
	d.raw(`
<section class="dl-counts" aria-labelledby="counts-h">
<h2 id="counts-h">By error code</h2>`)
	if l.CountsNotice != "" {
		d.raw(`
<p class="notice" id="counts-notice">`).text(l.CountsNotice).raw(`</p>
</section>`)
		return
	}
	d.raw(`
<table class="list counts" id="dl-counts">
  <caption>`)
	if l.Complete {
		d.raw(`All `).num(int64(l.Scanned)).raw(` records`)
	} else {
		d.raw(`Of the newest `).num(int64(l.Scanned)).raw(` records <span class="muted">(older ones are not counted)</span>`)
	}
	d.raw(`</caption>
  <thead><tr><th scope="col">Error code</th><th scope="col">Records</th><th scope="col">Outstanding</th></tr></thead>
  <tbody>`)
	for _, c := range l.Counts {
		d.raw(`
    <tr data-code="`).text(c.Code).raw(`"><td>`)
		if c.Code == "" {
			d.raw(`<span class="muted">none</span>`)
		} else {
			d.raw(`<code>`).text(c.Code).raw(`</code>`)
		}
		d.raw(`</td><td class="num">`).num(int64(c.Records)).raw(`</td><td class="num">`).num(int64(c.Outstanding)).raw(`</td></tr>`)
	}
	if len(l.Counts) == 0 {
		d.raw(`
    <tr><td colspan="3" class="empty">No dead letters.</td></tr>`)
	}
	d.raw(`
  </tbody>
</table>
</section>`)
}

// bulk writes the bulk re-drive form (an operator's), or how to get it.
func (l *dlData) bulk(d *doc) { l.Bulk.write(d, &l.base) }

// write writes a bulk form (re-drive, pause or resume: its kind's
// statuses, ids and words), or, to one who is not an operator, how to
// get it.
func (b *bulkForm) write(d *doc, x *base) {
	k := b.Kind
	d.raw(`
<section class="actions" id="`).text(k.ID).raw(`" aria-labelledby="`).text(k.ID).raw(`-h">
<h2 id="`).text(k.ID).raw(`-h">`).text(k.Verb).raw(` in bulk</h2>`)
	switch {
	case !x.ActionsEnabled:
		d.raw(`
<p class="muted">Bulk `).text(k.Noun).raw(` is disabled: this server has no operator token (admin.token).</p>
</section>`)
		return
	case !x.Operator:
		d.raw(`
<p class="muted" id="`).text(k.ID).raw(`-hint">Sign in with the operator token (top right) to `).text(k.Noun).raw(` the executions a filter matches.</p>
</section>`)
		return
	}
	id := func(s string) string { return k.ID + "-" + s }
	d.raw(`
<p class="muted">`).text(k.Verb).raw(`s every execution of this tenant that matches, at most the given number a second, each with the reason in its audit note. A dry run counts them first; the `).text(k.Noun).raw(` starts from its page.</p>
<form method="post" action="`).text(Prefix + k.Path).raw(`" class="filters action" id="`).text(id("form")).raw(`">
  <input type="hidden" name="csrf" value="`).text(x.CSRF).raw(`">
  <div class="field">
    <label for="`).text(id("pipeline")).raw(`">Pipeline</label>
    <input id="`).text(id("pipeline")).raw(`" name="pipeline" value="`).text(b.Pipeline).raw(`" list="pipeline-ids" placeholder="all pipelines" autocomplete="off">
  </div>`)
	if k.Action == engine.BulkRedrive {
		d.raw(`
  <div class="field">
    <label for="bulk-code">Error code</label>
    <input id="bulk-code" name="errorCode" list="error-codes" placeholder="any" maxlength="`).num(maxErrorCodeLen).raw(`" autocomplete="off">
    <datalist id="error-codes">`)
		for _, code := range b.Codes {
			d.raw(`<option value="`).text(code).raw(`">`)
		}
		d.raw(`</datalist>
  </div>`)
	}
	d.raw(`
  <fieldset>
    <legend>Status</legend>`)
	for _, s := range k.Statuses {
		d.raw(`
    <label class="check"><input type="checkbox" name="status" value="`).text(string(s)).raw(`"`).rawIf(slices.Contains(b.Statuses, s), ` checked`).
			raw(`> <span class="badge s-`).text(statusClass(s)).raw(`">`).text(string(s)).raw(`</span></label>`)
	}
	d.raw(`
  </fieldset>
  <div class="field">
    <label for="`).text(id("after")).raw(`">Created after (UTC)</label>
    <input id="`).text(id("after")).raw(`" name="createdAfter" type="datetime-local" step="1">
  </div>
  <div class="field">
    <label for="`).text(id("before")).raw(`">Created before (UTC)</label>
    <input id="`).text(id("before")).raw(`" name="createdBefore" type="datetime-local" step="1">
  </div>
  <div class="field">
    <label for="`).text(id("rate")).raw(`">Per second</label>
    <input id="`).text(id("rate")).raw(`" name="rate" type="number" min="1" max="`).num(int64(b.RateMax)).raw(`" value="`).num(int64(b.Rate)).raw(`" required>
  </div>
  <div class="field wide">
    <label for="`).text(id("reason")).raw(`">Reason</label>
    <input id="`).text(id("reason")).raw(`" name="reason" required maxlength="`).num(int64(b.ReasonMax)).raw(`" size="40">
  </div>
  <div class="buttons"><button type="submit" id="`).text(id("dry-run")).raw(`">Count them (dry run)</button></div>
</form>
</section>`)
}

// content writes a bulk job's page: its filter, then its dry run's
// count and start form, or its progress.
func (x *bulkData) content(d *doc) {
	j, k := &x.Job, &x.Kind
	d.raw(`
<p class="crumbs"><a href="`).text(k.Back).raw(`">`).text(k.BackName).raw(`</a> › `)
	if j.DryRun {
		d.raw(`Dry run`)
	} else {
		d.raw(`Bulk `).text(k.Noun)
	}
	d.raw(`</p>
<h1>`)
	if j.DryRun {
		d.raw(`Dry run `)
	} else {
		d.raw(`Bulk `).text(k.Noun).raw(` `)
	}
	d.raw(`<span class="id">`).text(j.ID).raw(`</span></h1>
<div class="summary">
<dl id="bulk-summary">
  <dt>Pipeline</dt><dd>`)
	if j.Filter.PipelineID != "" {
		d.text(j.Filter.PipelineID)
	} else {
		d.raw(`<span class="muted">all</span>`)
	}
	d.raw(`</dd>
  <dt>Status</dt><dd>`)
	for i, s := range j.Filter.Statuses {
		d.rawIf(i > 0, ` `).raw(`<span class="badge s-`).text(statusClass(s)).raw(`">`).text(string(s)).raw(`</span>`)
	}
	d.raw(`</dd>
  <dt>Error code</dt><dd>`)
	if j.Filter.ErrorCode != "" {
		d.raw(`<code>`).text(j.Filter.ErrorCode).raw(`</code>`)
	} else {
		d.raw(`<span class="muted">any</span>`)
	}
	d.raw(`</dd>
  <dt>Created</dt><dd>`)
	switch {
	case !j.Filter.CreatedAfter.IsZero():
		d.raw(`after `).when(j.Filter.CreatedAfter).raw(`, before `).when(j.Filter.CreatedBefore)
	default:
		d.raw(`before `).when(j.Filter.CreatedBefore)
	}
	d.raw(`</dd>
  <dt>Reason</dt><dd id="bulk-reason">`).text(j.Reason).raw(`</dd>
  <dt>Rate</dt><dd>`).num(int64(j.RatePerSecond)).raw(` a second</dd>
  <dt>Started</dt><dd>`).when(j.CreatedAt).raw(`</dd>
</dl>
</div>`)
	if j.DryRun {
		d.raw(`
<section aria-labelledby="count-h">
<h2 id="count-h">Count</h2>
<p id="bulk-matched">`)
		if j.Done {
			d.num(int64(j.Matched)).raw(` executions match.`)
		} else {
			d.raw(`Still counting: `).num(int64(j.Matched)).raw(` so far. <label class="check refresh"><input type="checkbox" id="auto-refresh"> refresh every 3 s</label>`)
		}
		d.raw(`</p>`)
		switch {
		case x.StartURL != "":
			d.raw(`
<form method="post" action="`).text(x.StartURL).raw(`" class="action" id="bulk-start-form">
  <input type="hidden" name="csrf" value="`).text(x.CSRF).raw(`">
  <button type="submit" class="danger" id="bulk-start">`).text(k.Verb).raw(` these `).num(int64(j.Matched)).raw(` executions</button>
  <p class="muted">The `).text(k.Noun).raw(` takes exactly this filter, reason and rate, and only executions created before the dry run started.</p>
</form>`)
		case j.Done:
			d.raw(`
<p class="muted" id="bulk-nothing">Nothing to `).text(k.Noun).raw(`. <a href="`).text(k.Back + "#" + k.ID).raw(`">Change the filter</a>.</p>`)
		}
		d.raw(`
</section>`)
		return
	}
	d.raw(`
<section aria-labelledby="progress-h">
<h2 id="progress-h">Progress</h2>
<p><progress id="bulk-progress" max="`).num(int64(j.Matched)).raw(`" value="`).num(int64(x.Handled)).raw(`"></progress> `).
		num(int64(x.Handled)).raw(` of `).num(int64(j.Matched)).raw(` handled`)
	if j.Done {
		d.raw(` <span class="badge s-succeeded" id="bulk-done">done</span>`)
	} else {
		d.raw(` <span class="muted" id="bulk-running">(the sweeper `).text(k.Doing).raw(` them)</span> <label class="check refresh"><input type="checkbox" id="auto-refresh"> refresh every 3 s</label>`)
	}
	d.raw(`</p>
<table class="list counts" id="bulk-counts">
  <thead><tr><th scope="col">Matched</th><th scope="col">`).text(k.Done).raw(`</th><th scope="col">Skipped</th><th scope="col">Failed</th></tr></thead>
  <tbody><tr>
    <td class="num" data-count="matched">`).num(int64(j.Matched)).raw(`</td>
    <td class="num" data-count="redriven">`).num(int64(j.Redriven)).raw(`</td>
    <td class="num" data-count="skipped">`).num(int64(j.Skipped)).raw(`</td>
    <td class="num`).rawIf(j.Failed > 0, ` error`).raw(`" data-count="failed">`).num(int64(j.Failed)).raw(`</td>
  </tr></tbody>
</table>
<p class="muted">Skipped: no longer matching, or no longer one the `).text(k.Noun).raw(` takes, when its turn came.`)
	if k.Action == engine.BulkRedrive {
		d.raw(` <a href="` + Prefix + `/dead-letters?outstanding=1">The outstanding dead letters</a>.`)
	}
	d.raw(`</p>
</section>`)
}

// content writes the error page.
func (e *errorData) content(d *doc) {
	d.raw(`<h1>`).text(e.Title).raw(`</h1>
<p class="problem" role="alert" id="problem">`).text(e.Message).raw(`</p>
<p class="muted">HTTP status `).num(int64(e.Status)).raw(`.</p>
<p><a href="`).text(e.Back).raw(`" id="back">Back</a></p>`)
}

// content writes an execution's page: its summary, the actions the
// operator may take, and the timeline of one page of its history.
func (x *execData) content(d *doc) {
	e := &x.E
	d.raw(`
<p class="crumbs"><a href="` + Prefix + `">Executions</a> › `)
	if p := e.Parent; p != nil {
		d.parentID(p.ExecutionID, x.ParentURL, "")
		d.raw(` › `)
	}
	d.raw(`<span class="id">`).text(e.ExecutionID).raw(`</span></p>
<h1>Execution <span class="id">`).text(e.ExecutionID).raw(`</span></h1>
<div class="summary">
<dl id="summary">
  <dt>Status</dt><dd><span class="badge s-`).text(statusClass(e.Status)).raw(`" id="exec-status">`).text(string(e.Status)).raw(`</span>`).
		rawIf(!x.Terminal, ` <label class="check refresh"><input type="checkbox" id="auto-refresh"> refresh every 3 s</label>`).raw(`</dd>
  <dt>Pipeline</dt><dd>`).text(e.PipelineID)
	if e.PipelineVersion != "" {
		d.raw(` <span class="muted">version `).text(e.PipelineVersion).raw(`</span>`)
	}
	d.raw(`</dd>
  <dt>Current step</dt><dd>`).num(int64(e.StepIndex)).raw(` · `).text(e.StepName).raw(`, attempt `).num(int64(e.Attempt))
	if e.MaxAttempt > 0 {
		d.raw(` of `).num(int64(e.MaxAttempt))
	}
	d.raw(`</dd>
  <dt>Created</dt><dd>`).when(e.CreatedAt).raw(`</dd>
  <dt>Updated</dt><dd>`).when(e.UpdatedAt).raw(`</dd>
  <dt>`)
	if x.Terminal {
		d.raw(`Duration`)
	} else {
		d.raw(`Running for`)
	}
	d.raw(`</dt><dd>`).dur(x.Duration).raw(`</dd>`)
	if !x.Terminal && !e.NextDueAt.IsZero() {
		d.raw(`
  <dt>Next due</dt><dd>`).when(e.NextDueAt).raw(`</dd>`)
	}
	if e.LeaseOwner != "" {
		d.raw(`
  <dt>Worker</dt><dd><code>`).text(e.LeaseOwner).raw(`</code>`)
		if !e.LeaseExpiresAt.IsZero() {
			d.raw(` <span class="muted">lease until `).when(e.LeaseExpiresAt).raw(`</span>`)
		}
		d.raw(`</dd>`)
	}
	if p := e.Parent; p != nil {
		d.raw(`
  <dt>Parent</dt><dd id="parent">`)
		d.parentID(p.ExecutionID, x.ParentURL, "parent-link")
		d.raw(` <span class="muted">child #`).num(int64(p.Index)).raw(` of `).num(int64(p.Total)).raw(`, from its map step `).num(int64(p.StepIndex)).raw(`</span></dd>`)
	}
	d.raw(`
  <dt>Idempotency key</dt><dd>`)
	if e.IdempotencyKey != "" {
		d.raw(`<code id="idempotency-key">`).text(e.IdempotencyKey).raw(`</code>`)
	} else {
		d.raw(`<span class="muted" id="idempotency-key">none (submitted without one)</span>`)
	}
	d.raw(`</dd>`)
	if e.Priority != 0 {
		d.raw(`
  <dt>Priority</dt><dd><span id="priority">`).text(strconv.Itoa(e.Priority)).raw(`</span> <span class="muted">(1 most urgent, 5 least; ranks it in its concurrency key's wait line and the local queue)</span></dd>`)
	}
	if e.ConcurrencyKey != "" {
		d.raw(`
  <dt>Concurrency key</dt><dd><code id="concurrency-key">`).text(e.ConcurrencyKey).raw(`</code>`)
		switch {
		case e.Status == store.WaitingKey:
			d.raw(` <span class="muted" id="key-wait">waiting for a slot of its key since `).when(e.UpdatedAt).raw(`</span>`)
		case e.SlotHeld:
			d.raw(` <span class="muted" id="key-wait">holds a slot of its key</span>`)
		}
		d.raw(`</dd>`)
	}
	if e.RateLimit != "" {
		d.raw(`
  <dt>Rate limit</dt><dd><code id="rate-limit">`).text(e.RateLimit).raw(`</code>`)
		if e.RateKey != "" {
			d.raw(` key <code id="rate-key">`).text(e.RateKey).raw(`</code>`)
		}
		if until := engine.RateLimitedUntil(e); !until.IsZero() {
			d.raw(` <span class="muted" id="rate-wait">waiting for its turn: step `).text(e.StepName).raw(` starts `).when(until).raw(`</span>`)
		}
		d.raw(`</dd>`)
	}
	d.raw(`
  <dt>Version</dt><dd>`).num(e.Version).raw(`</dd>`)
	if f := e.Error; f != nil {
		d.raw(`
  <dt>Error</dt><dd class="error" id="exec-error"><code>`).text(f.Code).raw(`</code> `).text(f.Message)
		if f.TerminalReason != "" {
			d.raw(` <span class="muted">(`).text(f.TerminalReason).raw(`)</span>`)
		}
		d.raw(`</dd>`)
	}
	if a := e.Await; a != nil {
		d.raw(`
  <dt>Await</dt><dd><code>`).text(a.ID).raw(`</code> `).text(string(a.Status)).raw(` (step `).num(int64(a.StepIndex)).raw(`)`)
		if !a.TimeoutAt.IsZero() {
			d.raw(`, times out `).when(a.TimeoutAt)
		}
		if !a.CompletedAt.IsZero() {
			d.raw(`, completed `).when(a.CompletedAt)
		}
		d.rawIf(a.Late, `, a late completion arrived`).raw(`</dd>`)
	}
	if e.RedriveCount > 0 {
		d.raw(`
  <dt>Re-drives</dt><dd>`).num(int64(e.RedriveCount))
		if e.Note != "" {
			d.raw(`; last reason: `).text(e.Note)
		}
		d.raw(`</dd>`)
	}
	if e.CancelReason != "" {
		d.raw(`
  <dt>Cancel reason</dt><dd id="cancel-reason">`).text(e.CancelReason)
		if !e.CancelRequestedAt.IsZero() {
			d.raw(` <span class="muted">requested `).when(e.CancelRequestedAt).raw(`</span>`)
		}
		d.raw(`</dd>`)
	}
	d.raw(`
</dl>`)
	d.raw(`
</div>`)
	x.payloads(d)
	x.children(d)
	x.actions(d)
	d.raw(`

<section aria-labelledby="timeline-h">
<h2 id="timeline-h">Timeline</h2>`)
	if x.HistoryNotice != "" {
		d.raw(`
<p class="notice" id="history-notice">`).text(x.HistoryNotice).raw(`</p>`)
	} else {
		x.timeline(d)
	}
	d.raw(`
</section>`)
}

// payloads writes the execution's input and result section: to an
// operator, the links that show or download them, and the ones the page
// was asked to show; to anyone else, how to see them.
func (x *execData) payloads(d *doc) {
	d.raw(`

<section class="payloads" id="payloads" aria-labelledby="payloads-h">
<h2 id="payloads-h">Input and result</h2>`)
	switch {
	case !x.ActionsEnabled:
		d.raw(`
<p class="muted" id="payloads-hint">The input and result are shown only to a signed-in operator, and this server has no operator token (admin.token).</p>`)
	case !x.Operator:
		d.raw(`
<p class="muted" id="payloads-hint">Sign in with the operator token (top right) to see the input`).rawIf(x.HasResult, ` and the result`).raw(`. Every view is logged.</p>`)
	default:
		d.raw(`
<p class="payload-links">`)
		x.payloadLinks(d, whichInput, `Input`)
		if x.HasResult {
			d.raw(` · `)
			x.payloadLinks(d, whichResult, `Result`)
		}
		d.raw(` <span class="muted">Every view and download is logged.</span></p>`)
		for i := range x.Shown {
			x.Shown[i].content(d)
		}
	}
	d.raw(`
</section>`)
}

// payloadLinks writes the show and download links of one payload (which
// is whichInput or whichResult, label its name).
func (x *execData) payloadLinks(d *doc, which string, label markup) {
	show := []string{which}
	for _, v := range x.Shown {
		if v.Which != which {
			show = append(show, v.Which)
		}
	}
	if len(show) == 2 && show[0] == whichResult {
		show[0], show[1] = show[1], show[0]
	}
	d.raw(label).raw(`: <a href="`).text(x.ShowURL + strings.Join(show, ",") + "#payloads").raw(`" id="show-`).text(which).raw(`" rel="nofollow">show</a>, <a href="`).
		text(payloadURL(x.E.ExecutionID, which)).raw(`" id="download-`).text(which).raw(`" rel="nofollow" download>download</a>`)
}

// content writes a payload the page was asked to show.
func (v *payloadView) content(d *doc) {
	d.raw(`
<h3 id="payload-`).text(v.Which).raw(`-h">`)
	if v.Which == whichInput {
		d.raw(`Input`)
	} else {
		d.raw(`Result`)
	}
	d.raw(`</h3>`)
	if v.Notice != "" {
		d.raw(`
<p class="notice" id="`).text(v.Which).raw(`-notice">`).text(v.Notice).raw(`</p>`)
		return
	}
	d.raw(`
<p class="muted">`).num(int64(v.Bytes)).raw(` bytes, <code>`).text(v.ContentType).raw(`</code>`)
	switch {
	case !v.JSON:
		d.raw(`. It is not JSON, so the page does not show it: <a href="`).text(v.DownloadURL).raw(`" rel="nofollow" download>download it</a>.</p>`)
		return
	case v.Truncated:
		d.raw(`; the first `).num(payloadShowCap >> 10).raw(` KiB are shown: <a href="`).text(v.DownloadURL).raw(`" rel="nofollow" download>download the whole</a>.</p>`)
	default:
		d.raw(`.</p>`)
	}
	d.raw(`
<pre class="payload" id="`).text(v.Which).raw(`-view"><code>`).text(v.Text).raw(`</code></pre>`)
}

// children writes a map parent's counts: while it waits for its
// children (WAITING_CHILDREN) and after.
func (x *execData) children(d *doc) {
	ch := x.E.Children
	if ch == nil {
		return
	}
	d.raw(`

<section class="children" id="children" aria-labelledby="children-h">
<h2 id="children-h">Children</h2>
<p id="children-note">`)
	if x.E.Status == store.WaitingChildren {
		d.raw(`Waiting for its `).num(int64(ch.Total)).raw(` children`)
	} else {
		d.raw(`Its last map fanned out to `).num(int64(ch.Total)).raw(` children`)
	}
	d.raw(` <span class="muted">(map step `).num(int64(ch.StepIndex)).raw(`, at most `).num(int64(ch.MaxInFlight)).raw(` running at once)</span>.</p>`)
	c := x.Counts
	if c == nil {
		d.raw(`
<p class="notice" id="children-notice">`).text(x.CountsNotice).raw(`</p>
</section>`)
		return
	}
	ended := c.Succeeded + c.Failed
	d.raw(`
<p><progress id="children-progress" max="`).num(int64(c.Total)).raw(`" value="`).num(int64(ended)).raw(`"></progress> `).
		num(int64(ended)).raw(` of `).num(int64(c.Total)).raw(` ended</p>
<table class="list counts" id="child-counts">
  <thead><tr><th scope="col">Total</th><th scope="col">Succeeded</th><th scope="col">Failed</th><th scope="col">Running</th><th scope="col">Pending</th></tr></thead>
  <tbody><tr>
    <td class="num" data-count="total">`).num(int64(c.Total)).raw(`</td>
    <td class="num" data-count="succeeded">`).num(int64(c.Succeeded)).raw(`</td>
    <td class="num`).rawIf(c.Failed > 0, ` error`).raw(`" data-count="failed">`).num(int64(c.Failed)).raw(`</td>
    <td class="num" data-count="running">`).num(int64(c.Running)).raw(`</td>
    <td class="num" data-count="pending">`).num(int64(c.Pending)).raw(`</td>
  </tr></tbody>
</table>
</section>`)
}

// actions writes the cancel and re-drive forms an operator may use on
// the execution (or why they are not offered).
func (x *execData) actions(d *doc) {
	if !x.CanCancel && !x.CanRedrive {
		return
	}
	e := &x.E
	d.raw(`
<section class="actions" aria-labelledby="actions-h">
<h2 id="actions-h">Actions</h2>`)
	x.pauseState(d)
	switch {
	case !x.ActionsEnabled:
		d.raw(`
<p class="muted">Cancel, pause and re-drive are disabled: this server has no operator token (admin.token).</p>`)
	case !x.Operator:
		d.raw(`
<p class="muted" id="sign-in-hint">Sign in with the operator token (top right) to `)
		if x.CanCancel {
			d.raw(`cancel`)
		} else {
			d.raw(`re-drive`)
		}
		d.raw(` this execution.</p>`)
	default:
		x.pauseForms(d)
		if x.CanCancel {
			d.raw(`
<form method="post" action="`).text(x.ActionURL).raw(`/cancel" class="action" id="cancel-form">
  <input type="hidden" name="csrf" value="`).text(x.CSRF).raw(`">
  <label for="cancel-reason-input">Reason for cancelling</label>
  <input id="cancel-reason-input" name="reason" required maxlength="`).num(int64(x.ReasonMax)).raw(`" size="40">
  <button type="submit" class="danger" id="cancel-button">Cancel execution</button>`).
				rawIf(e.Status == store.Running, `<p class="muted">The running step is stopped at its next lease renewal; the execution then ends CANCELLED.</p>`).raw(`
</form>`)
		}
		if x.CanRedrive {
			d.raw(`
<form method="post" action="`).text(x.ActionURL).raw(`/redrive" class="action" id="redrive-form">
  <input type="hidden" name="csrf" value="`).text(x.CSRF).raw(`">
  <input type="hidden" name="version" value="`).num(e.Version).raw(`">
  <label for="redrive-reason-input">Reason for re-driving</label>
  <input id="redrive-reason-input" name="reason" required maxlength="`).num(int64(x.ReasonMax)).raw(`" size="40">`).
				rawIf(x.NeedsConfirm, `
  <label class="check"><input type="checkbox" name="confirmNoRemoteEffect" value="yes" required> The remote invocation completed, was cancelled or can make no more effects</label>`).raw(`
  <button type="submit" id="redrive-button">Re-drive step `).num(int64(e.StepIndex)).raw(`</button>
</form>`)
		}
	}
	d.raw(`
</section>`)
}

// timeline writes the steps, the chart and the events of the page of
// history the execution page shows.
func (x *execData) timeline(d *doc) {
	t := &x.Timeline
	if len(t.Steps) > 0 {
		d.raw(`
<table class="list" id="steps">
  <caption>Steps`).rawIf(x.paged(), `, from this page's events`).raw(`</caption>
  <thead><tr><th scope="col">Step</th><th scope="col">Attempts</th><th scope="col">Ran</th><th scope="col">Awaited</th><th scope="col">Failures</th><th scope="col">Outcome</th></tr></thead>
  <tbody>`)
		for _, s := range t.Steps {
			d.raw(`
    <tr><td>`).num(int64(s.Index)).raw(` · `).text(s.Name).raw(`</td><td class="num">`).num(int64(s.Attempts)).raw(`</td><td class="num">`).dur(s.Running).raw(`</td>
      <td class="num">`)
			if s.Waited != 0 {
				d.dur(s.Waited)
			}
			d.raw(`</td><td class="num">`).num(int64(s.Errors)).raw(`</td><td><span class="outcome o-`).text(s.Outcome).raw(`">`).text(s.Outcome).raw(`</span></td></tr>`)
		}
		d.raw(`
  </tbody>
</table>`)
	}
	if len(t.Spans) > 0 {
		d.raw(`
<figure class="chart" id="chart">
<figcaption>From `).when(t.Start).raw(` to `).when(t.End).raw(` (`).dur(t.End.Sub(t.Start)).raw(`)</figcaption>
<table class="gantt">
  <thead><tr><th scope="col">Span</th><th scope="col">Took</th><th scope="col" class="bar-col"><span class="visually-hidden">Position in time</span></th></tr></thead>
  <tbody>`)
		for _, s := range t.Spans {
			d.raw(`
  <tr class="k-`).text(s.Kind).raw(`">
    <th scope="row">`).text(s.Label()).raw(`</th>
    <td class="num">`).dur(s.Duration()).raw(` <span class="outcome o-`).text(s.Outcome).raw(`">`).text(s.Outcome).raw(`</span></td>
    <td class="bar-col"><svg viewBox="0 0 1000 12" preserveAspectRatio="none" role="img" aria-label="`).
				text(s.Label()).raw(`: `).text(s.Outcome).raw(`, `).dur(s.Duration()).raw(`">
      <rect class="track" x="0" y="0" width="1000" height="12"></rect>
      <rect class="bar b-`).text(s.Kind).raw(` o-`).text(s.Outcome).raw(`" x="`).num(int64(s.X)).raw(`" y="1" width="`).num(int64(s.W)).raw(`" height="10"></rect></svg></td>
  </tr>`)
		}
		d.raw(`
  </tbody>
</table>
</figure>`)
	}
	d.raw(`

<table class="list events" id="events">
  <caption>Events, in commit order`)
	if x.paged() && len(t.Events) > 0 {
		d.raw(`: page `).num(int64(x.Page)).raw(`, events `).num(int64(t.Events[0].Seq)).raw(` to `).num(int64(t.Events[len(t.Events)-1].Seq))
	}
	d.raw(`</caption>
  <thead><tr><th scope="col">#</th><th scope="col">Time</th><th scope="col">Since submit</th><th scope="col">Event</th><th scope="col">Step</th>
    <th scope="col">Attempt</th><th scope="col">Status after</th><th scope="col">Details</th></tr></thead>
  <tbody>`)
	for i := range t.Events {
		ev := &t.Events[i]
		d.raw(`
    <tr class="e-`).text(ev.Kind).raw(`" data-type="`).text(string(ev.Type)).raw(`">
      <td class="num">`).num(int64(ev.Seq)).raw(`</td>
      <td>`).when(ev.At).raw(`</td>
      <td class="num">`).text("+" + fmtDuration(ev.Offset)).raw(`</td>
      <td><span class="etype">`).text(string(ev.Type)).raw(`</span></td>
      <td>`)
		if ev.StepName != "" {
			d.num(int64(ev.StepIndex)).raw(` · `).text(ev.StepName)
		}
		d.raw(`</td>
      <td class="num">`)
		if ev.Attempt != 0 {
			d.num(int64(ev.Attempt))
		}
		d.raw(`</td>
      <td>`)
		if ev.Status != "" {
			d.raw(`<span class="badge s-`).text(statusClass(ev.Status)).raw(`">`).text(string(ev.Status)).raw(`</span>`)
		}
		d.raw(`</td>
      <td class="details">`)
		if ev.Took != 0 {
			d.raw(`<span class="took">took `).dur(ev.Took).raw(`</span> `)
		}
		if f := ev.Error; f != nil {
			d.raw(`<span class="error"><code>`).text(f.Code).raw(`</code> `).text(f.Message).raw(`</span> `)
		}
		if !ev.RetryAt.IsZero() {
			d.raw(`<span>retry at `).when(ev.RetryAt).raw(` (after `).dur(ev.RetryIn).raw(`)</span> `)
		}
		if ev.Worker != "" {
			d.raw(`<span class="muted">worker <code>`).text(ev.Worker).raw(`</code></span> `)
		}
		if ev.Reason != "" {
			d.raw(`<span class="reason">reason: `).text(ev.Reason).raw(`</span>`)
		}
		d.raw(`
      </td>
    </tr>`)
	}
	switch {
	case len(t.Events) == 0 && x.FirstURL != "":
		d.raw(`
    <tr><td colspan="8" class="empty">No more events.</td></tr>`)
	case len(t.Events) == 0:
		d.raw(`
    <tr><td colspan="8" class="empty">No events recorded.</td></tr>`)
	}
	d.raw(`
  </tbody>
</table>`)
	if x.paged() {
		d.raw("\n")
		d.pager(x.FirstURL, x.NextURL)
	}
}

// paged says the history is longer than one page: the page shows part of
// it, with links to the others.
func (x *execData) paged() bool { return x.FirstURL != "" || x.NextURL != "" }
