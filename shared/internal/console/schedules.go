package console

// Schedules in the console: the schedules page lists the tenant's
// schedules (spec, time zone, overlap, next fire time, last run, counts,
// paused state); an operator creates one with its form (CSRF-checked like
// every operator form; a field the engine refuses is named next to that
// field, the form keeping what was typed) and pauses, resumes or deletes
// one with its row's buttons. The schedule operations are the engine's
// (engine.Runtime); a backend without them answers the page with "not
// available".

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/schedule"
	"github.com/qasync/qasync/shared/store"
)

// ScheduleBackend is what the schedules page needs beyond Backend: the
// engine's schedule operations (*engine.Runtime has them, so Engine's
// backend does). A Backend without them shows the page as not available.
type ScheduleBackend interface {
	// ListSchedules returns a tenant's schedules, by id.
	ListSchedules(ctx context.Context, tenant string) ([]engine.Schedule, error)
	// CreateSchedule creates a schedule (an error matching
	// engine.ErrInvalidSchedule, a *engine.ScheduleFieldError, names the
	// field at fault).
	CreateSchedule(ctx context.Context, tenant string, spec engine.ScheduleSpec) (engine.Schedule, error)
	// PauseSchedule pauses a schedule.
	PauseSchedule(ctx context.Context, tenant, id string) (engine.Schedule, error)
	// ResumeSchedule resumes a paused schedule.
	ResumeSchedule(ctx context.Context, tenant, id string) (engine.Schedule, error)
	// DeleteSchedule deletes a schedule.
	DeleteSchedule(ctx context.Context, tenant, id string) error
}

// schedulesURL is the schedules page.
const schedulesURL = Prefix + "/schedules"

// registerSchedules adds the schedules' routes.
func (c *Console) registerSchedules() {
	c.mux.HandleFunc("GET "+schedulesURL, c.schedulesPage)
	c.mux.HandleFunc("POST "+schedulesURL, c.createSchedule)
	c.mux.HandleFunc("POST "+schedulesURL+"/{sid}/{op}", c.scheduleAction)
}

// scheduleForm is the create form as typed, and the problem per field.
type scheduleForm struct {
	Pipeline, Spec, TimeZone, Overlap, Catchup, Input string
	Paused                                            bool
	// Problems by field name (the engine's ScheduleFieldError.Field).
	Problems map[string]string
}

// schedulesData is the schedules page.
type schedulesData struct {
	base
	Schedules []engine.Schedule
	Pipelines []string
	Form      scheduleForm
}

// scheduleBackend returns the backend's schedule operations, or writes
// the "not available" page.
func (c *Console) scheduleBackend(w http.ResponseWriter, r *http.Request) (ScheduleBackend, bool) {
	sb, ok := c.b.(ScheduleBackend)
	if !ok {
		c.backendError(w, r, "Schedules", ErrNotSupported)
	}
	return sb, ok
}

// scheduleFlash is the message of a schedule action's ?done= code.
func scheduleFlash(code string) string {
	switch code {
	case "created":
		return "The schedule is created."
	case "paused":
		return "The schedule is paused: it starts nothing until resumed."
	case "resumed":
		return "The schedule is resumed: it fires from its next fire time on (the paused time is not caught up)."
	case "deleted":
		return "The schedule is deleted; the executions it started are not touched."
	}
	return ""
}

// schedulesPage handles GET /console/schedules.
func (c *Console) schedulesPage(w http.ResponseWriter, r *http.Request) {
	tenant, ok := c.tenant(w, r)
	if !ok {
		return
	}
	c.renderSchedules(w, r, tenant, http.StatusOK, scheduleForm{Overlap: string(schedule.Skip), TimeZone: "UTC",
		Catchup: strconv.Itoa(engine.DefaultScheduleCatchup), Input: "{}"})
}

// renderSchedules writes the page with form (the create form's values
// and problems).
func (c *Console) renderSchedules(w http.ResponseWriter, r *http.Request, tenant string, status int, form scheduleForm) {
	sb, ok := c.scheduleBackend(w, r)
	if !ok {
		return
	}
	list, err := sb.ListSchedules(r.Context(), tenant)
	if err != nil {
		if errors.Is(err, engine.ErrSchedulesUnavailable) {
			err = ErrNotSupported
		}
		c.backendError(w, r, "Schedules", err)
		return
	}
	d := schedulesData{base: c.base(w, r, "Schedules", "schedules", tenant), Schedules: list, Pipelines: c.pipelines, Form: form}
	d.Flash = scheduleFlash(r.URL.Query().Get("done"))
	c.render(w, status, &d.base, d.content)
}

// createSchedule handles POST /console/schedules (operator).
func (c *Console) createSchedule(w http.ResponseWriter, r *http.Request) {
	if !c.operatorPost(w, r) {
		return
	}
	tenant, ok := c.tenant(w, r)
	if !ok {
		return
	}
	sb, ok := c.scheduleBackend(w, r)
	if !ok {
		return
	}
	f := r.PostForm
	form := scheduleForm{Pipeline: strings.TrimSpace(f.Get("pipeline")), Spec: strings.TrimSpace(f.Get("spec")),
		TimeZone: strings.TrimSpace(f.Get("timeZone")), Overlap: strings.TrimSpace(f.Get("overlap")),
		Catchup: strings.TrimSpace(f.Get("catchupLimit")), Input: strings.TrimSpace(f.Get("input")), Paused: f.Get("paused") != "",
		Problems: map[string]string{}}
	spec := engine.ScheduleSpec{PipelineID: form.Pipeline, Spec: form.Spec, TimeZone: form.TimeZone,
		Overlap: schedule.Overlap(strings.ToUpper(form.Overlap)), Paused: form.Paused}
	if form.Input != "" {
		spec.Input = []byte(form.Input)
	}
	if form.Catchup != "" {
		n, err := strconv.Atoi(form.Catchup)
		if err != nil {
			form.Problems["catchupLimit"] = "must be a whole number from 0 to " + strconv.Itoa(schedule.MaxCatchup)
			c.renderSchedules(w, r, tenant, http.StatusBadRequest, form)
			return
		}
		spec.CatchupLimit = &n
	}
	s, err := sb.CreateSchedule(r.Context(), tenant, spec)
	var fe *engine.ScheduleFieldError
	switch {
	case errors.As(err, &fe):
		form.Problems[fe.Field] = fe.Reason
		c.renderSchedules(w, r, tenant, http.StatusBadRequest, form)
		return
	case errors.Is(err, engine.ErrTooManySchedules):
		form.Problems["spec"] = "this tenant (or the deployment) holds its most schedules: delete one first"
		c.renderSchedules(w, r, tenant, http.StatusConflict, form)
		return
	case errors.Is(err, engine.ErrSchedulesUnavailable):
		c.backendError(w, r, "Schedules", ErrNotSupported)
		return
	case err != nil:
		c.backendError(w, r, "Schedules", err)
		return
	}
	c.logAction(r, slog.LevelInfo, "console_schedule_created", slog.String("tenant", tenant), slog.String("schedule_id", s.ID),
		slog.String("pipeline", s.PipelineID))
	http.Redirect(w, r, schedulesURL+"?done=created", http.StatusSeeOther)
}

// scheduleAction handles POST /console/schedules/{sid}/{pause|resume|delete}
// (operator).
func (c *Console) scheduleAction(w http.ResponseWriter, r *http.Request) {
	if !c.operatorPost(w, r) {
		return
	}
	tenant, ok := c.tenant(w, r)
	if !ok {
		return
	}
	sb, ok := c.scheduleBackend(w, r)
	if !ok {
		return
	}
	id, op := r.PathValue("sid"), r.PathValue("op")
	var err error
	switch op {
	case "pause":
		_, err = sb.PauseSchedule(r.Context(), tenant, id)
	case "resume":
		_, err = sb.ResumeSchedule(r.Context(), tenant, id)
	case "delete":
		err = sb.DeleteSchedule(r.Context(), tenant, id)
	default:
		c.errorPage(w, r, http.StatusNotFound, "Not found", "A schedule can be paused, resumed or deleted.")
		return
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		c.errorPage(w, r, http.StatusNotFound, "Schedule not found", "No schedule with this id exists for this tenant (or it was deleted).")
		return
	case errors.Is(err, engine.ErrSchedulesUnavailable):
		c.backendError(w, r, "Schedules", ErrNotSupported)
		return
	case err != nil:
		c.backendError(w, r, "Schedules", err)
		return
	}
	done := map[string]string{"pause": "paused", "resume": "resumed", "delete": "deleted"}[op]
	c.logAction(r, slog.LevelInfo, "console_schedule_"+done, slog.String("tenant", tenant), slog.String("schedule_id", id))
	http.Redirect(w, r, schedulesURL+"?done="+url.QueryEscape(done), http.StatusSeeOther)
}

// content writes the schedules page: the list, then the create form.
func (x *schedulesData) content(d *doc) {
	d.raw(`
<h1>Schedules</h1>
<p class="muted">A schedule starts executions of a pipeline at the fire times of its spec, in its time zone, driven by the sweeper (within about a sweep period of each fire time).</p>
<table id="schedules">
<caption>By id · `).num(int64(len(x.Schedules))).raw(` shown</caption>
<thead><tr><th>Id</th><th>Pipeline</th><th>Spec</th><th>Time zone</th><th>Overlap</th><th>Next fire</th><th>Last run</th><th>Fired</th><th>Skipped</th><th>State</th>`)
	d.rawIf(x.Operator, `<th>Actions</th>`)
	d.raw(`</tr></thead>
<tbody>`)
	for _, s := range x.Schedules {
		d.raw(`
<tr data-schedule="`).text(s.ID).raw(`"><td class="id">`).text(s.ID).raw(`</td><td>`).text(s.PipelineID).
			raw(`</td><td><code>`).text(s.Spec).raw(`</code></td><td>`).text(s.TimeZone).raw(`</td><td>`).text(string(s.Overlap)).
			raw(` <span class="muted">catch-up `).num(int64(s.CatchupLimit)).raw(`</span></td><td class="next-fire">`)
		if s.Paused {
			d.raw(`-`)
		} else {
			d.when(s.NextFireAt)
		}
		d.raw(`</td><td class="last-run">`)
		if s.LastExecutionID != "" {
			d.when(s.LastFireAt).raw(` <a href="`).text(executionURL(s.LastExecutionID)).raw(`">execution</a>`)
		} else {
			d.raw(`-`)
		}
		d.raw(`</td><td class="fired">`).num(int64(s.Fired)).raw(`</td><td class="skipped">`).num(int64(s.Skipped)).raw(`</td><td class="state">`)
		if s.Paused {
			d.raw(`<span class="badge">PAUSED</span>`)
		} else {
			d.raw(`<span class="badge">ACTIVE</span>`)
		}
		d.raw(`</td>`)
		if x.Operator {
			d.raw(`<td class="actions">`)
			op, label := "pause", "Pause"
			if s.Paused {
				op, label = "resume", "Resume"
			}
			x.actionButton(d, s.ID, op, label)
			x.actionButton(d, s.ID, "delete", "Delete")
			d.raw(`</td>`)
		}
		d.raw(`</tr>`)
	}
	d.raw(`
</tbody>
</table>`)
	if len(x.Schedules) == 0 {
		d.raw(`
<p class="muted" id="no-schedules">This tenant has no schedule.</p>`)
	}
	d.raw(`
<section aria-labelledby="create-heading">
<h2 id="create-heading">New schedule</h2>`)
	switch {
	case !x.ActionsEnabled:
		d.raw(`
<p class="muted">Creating schedules is disabled: this server has no operator token (admin.token).</p>
</section>`)
		return
	case !x.Operator:
		d.raw(`
<p class="muted" id="schedule-hint">Sign in with the operator token (top right) to create, pause, resume or delete schedules.</p>
</section>`)
		return
	}
	f := &x.Form
	d.raw(`
<form method="post" action="` + schedulesURL + `" class="filters action" id="schedule-form">
  <input type="hidden" name="csrf" value="`).text(x.CSRF).raw(`">`)
	x.field(d, "pipelineId", "sch-pipeline", "pipeline", "Pipeline", f.Pipeline, ` list="pipeline-ids" required autocomplete="off"`)
	d.raw(`
  <datalist id="pipeline-ids">`)
	for _, p := range x.Pipelines {
		d.raw(`<option value="`).text(p).raw(`">`)
	}
	d.raw(`</datalist>`)
	x.field(d, "spec", "sch-spec", "spec", "Spec (cron or @every)", f.Spec, ` required placeholder="*/15 * * * *" autocomplete="off"`)
	x.field(d, "timeZone", "sch-zone", "timeZone", "Time zone", f.TimeZone, ` placeholder="UTC" autocomplete="off"`)
	d.raw(`
  <div class="field">
    <label for="sch-overlap">Overlap</label>
    <select id="sch-overlap" name="overlap">`)
	for _, o := range []schedule.Overlap{schedule.Skip, schedule.BufferOne, schedule.AllowAll} {
		d.raw(`<option value="`).text(string(o)).raw(`"`).rawIf(strings.EqualFold(f.Overlap, string(o)), ` selected`).raw(`>`).text(string(o)).raw(`</option>`)
	}
	d.raw(`</select>`)
	x.problem(d, "overlap")
	d.raw(`
  </div>`)
	x.field(d, "catchupLimit", "sch-catchup", "catchupLimit", "Catch-up limit", f.Catchup, ` inputmode="numeric" size="4"`)
	x.field(d, "input", "sch-input", "input", "Input (JSON object)", f.Input, ` size="30" autocomplete="off"`)
	d.raw(`
  <label class="check"><input type="checkbox" name="paused" value="1" id="sch-paused"`).rawIf(f.Paused, ` checked`).raw(`> Create paused</label>
  <div class="buttons"><button type="submit" id="schedule-create">Create schedule</button></div>
</form>
</section>`)
}

// field writes one text field of the create form, with its problem.
func (x *schedulesData) field(d *doc, key, id, name, label, value string, attrs markup) {
	d.raw(`
  <div class="field">
    <label for="`).text(id).raw(`">`).text(label).raw(`</label>
    <input id="`).text(id).raw(`" name="`).text(name).raw(`" value="`).text(value).raw(`"`).raw(attrs)
	if x.Form.Problems[key] != "" {
		d.raw(` aria-invalid="true" aria-describedby="`).text(id + "-problem").raw(`"`)
	}
	d.raw(`>`)
	x.problem(d, key)
	d.raw(`
  </div>`)
}

// problem writes the problem of a field (key: the engine's field name).
func (x *schedulesData) problem(d *doc, key string) {
	if p := x.Form.Problems[key]; p != "" {
		d.raw(`
    <p class="problem" role="alert" id="`).text(scheduleFieldIDs[key] + "-problem").raw(`">`).text(p).raw(`</p>`)
	}
}

// scheduleFieldIDs are the create form's input ids by field name.
var scheduleFieldIDs = map[string]string{"pipelineId": "sch-pipeline", "spec": "sch-spec", "timeZone": "sch-zone",
	"overlap": "sch-overlap", "catchupLimit": "sch-catchup", "input": "sch-input"}

// actionButton writes a one-button form posting op on schedule id.
func (x *schedulesData) actionButton(d *doc, id, op, label string) {
	d.raw(`<form class="inline" method="post" action="`).text(schedulesURL + "/" + url.PathEscape(id) + "/" + op).raw(`">` +
		`<input type="hidden" name="csrf" value="`).text(x.CSRF).raw(`"><button type="submit" class="`).text("schedule-" + op).raw(`">`).text(label).raw(`</button></form>`)
}
