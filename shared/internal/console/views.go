package console

import (
	"github.com/qasync/qasync/shared/store"
)

// The pages' content, each written inside the layout (html.go says why
// by hand and how every value is escaped).

// content writes the executions page.
func (l *listData) content(d *doc) {
	d.raw(`<h1>Executions</h1>
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
  </fieldset>`)
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
<p class="muted">Executions that failed for good (retries exhausted, or a non-retryable error), newest first. Re-drive one from its page.</p>
<form class="filters" method="get" action="` + Prefix + `/dead-letters" id="dl-filters">`)
	d.pipelineField(l.Pipeline, l.Pipelines)
	d.limitField(l.Limit, l.Limits)
	d.raw(`
  <div class="buttons"><button type="submit">Apply</button></div>
</form>
<table class="list" id="dead-letters">
  `)
	d.caption(l.Page, len(l.Rows))
	d.raw(`
  <thead><tr><th scope="col">Recorded</th><th scope="col">Execution</th><th scope="col">Pipeline</th><th scope="col">Step</th>
    <th scope="col">Attempt</th><th scope="col">Reason</th><th scope="col">Error</th><th scope="col">Failed</th></tr></thead>
  <tbody>`)
	for _, r := range l.Rows {
		d.raw(`
    <tr>
      <td>`).when(r.RecordedAt).raw(`</td>
      <td class="id">`)
		if r.URL != "" {
			d.raw(`<a href="`).text(r.URL).raw(`">`).text(r.ExecutionID).raw(`</a>`)
		} else {
			d.text(r.ExecutionID)
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
    <tr><td colspan="8" class="empty">No dead letters.</td></tr>`)
	}
	d.raw(`
  </tbody>
</table>
`)
	d.pager(l.FirstURL, l.NextURL)
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
	if x.HasResult {
		d.raw(`
<p><a href="`).text(x.ResultURL).raw(`" id="result-link" rel="nofollow">Open the result</a> <span class="muted">(the payload bytes, as the HTTP API serves them)</span></p>`)
	}
	d.raw(`
</div>`)
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
	switch {
	case !x.ActionsEnabled:
		d.raw(`
<p class="muted">Cancel and re-drive are disabled: this server has no operator token (admin.token).</p>`)
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
