package httpapi

// The schedules' routes (operator routes, authorized as re-drive is):
//
//	POST   /v1/schedules                        create (201, Location)
//	GET    /v1/schedules                        the tenant's schedules
//	GET    /v1/schedules/{scheduleId}           one schedule
//	DELETE /v1/schedules/{scheduleId}           delete (204)
//	POST   /v1/schedules/{scheduleId}/pause     pause
//	POST   /v1/schedules/{scheduleId}/resume    resume (no catch-up)

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/schedule"
	"github.com/qasync/qasync/shared/store"
)

// Route patterns of the schedules.
const (
	routeSchedulesCreate = "POST /v1/schedules"
	routeSchedulesList   = "GET /v1/schedules"
	routeScheduleGet     = "GET /v1/schedules/{scheduleId}"
	routeScheduleDelete  = "DELETE /v1/schedules/{scheduleId}"
	routeSchedulePause   = "POST /v1/schedules/{scheduleId}/pause"
	routeScheduleResume  = "POST /v1/schedules/{scheduleId}/resume"
)

// The problem kinds of the schedules.
var (
	kindScheduleNotFound     = kind{"schedule-not-found", http.StatusNotFound, "Schedule not found"}
	kindSchedulesUnavailable = kind{"schedules-unavailable", http.StatusServiceUnavailable, "Schedules not available"}
	kindTooManySchedules     = kind{"too-many-schedules", http.StatusConflict, "Too many schedules"}
)

// routeSchedules registers the schedules' routes; a path with several
// methods answers the others with one problem+json 405.
func (a *api) routeSchedules() {
	a.mux.HandleFunc(routeSchedulesCreate, a.createSchedule)
	a.mux.HandleFunc(routeSchedulesList, a.listSchedules)
	a.mux.HandleFunc(routeScheduleGet, a.getSchedule)
	a.mux.HandleFunc(routeScheduleDelete, a.deleteSchedule)
	a.mux.HandleFunc(routeSchedulePause, a.pauseSchedule)
	a.mux.HandleFunc(routeScheduleResume, a.resumeSchedule)
	for p, allow := range map[string]string{
		"/v1/schedules":                     "GET, HEAD, POST",
		"/v1/schedules/{scheduleId}":        "GET, HEAD, DELETE",
		"/v1/schedules/{scheduleId}/pause":  "POST",
		"/v1/schedules/{scheduleId}/resume": "POST",
	} {
		a.mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeProblem(w, kindMethodNotAllowed.problem(fmt.Sprintf("This resource supports %s only.", allow)))
		})
	}
}

// scheduleView is the API's document of a schedule.
func scheduleView(s engine.Schedule) client.Schedule {
	opt := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return &t
	}
	return client.Schedule{ScheduleID: s.ID, PipelineID: s.PipelineID, Spec: s.Spec, TimeZone: s.TimeZone, Overlap: string(s.Overlap),
		CatchupLimit: s.CatchupLimit, Input: s.Input, Paused: s.Paused, NextFireAt: opt(s.NextFireAt), LastFireAt: opt(s.LastFireAt),
		LastExecutionID: s.LastExecutionID, PendingFireAt: opt(s.PendingFireAt), Fired: s.Fired, Skipped: s.Skipped,
		CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
}

// createSchedule handles POST /v1/schedules.
func (a *api) createSchedule(w http.ResponseWriter, r *http.Request) {
	body, ok := a.operatorBody(w, r)
	if !ok {
		return
	}
	tenant, ok := a.tenant(w, r)
	if !ok {
		return
	}
	var req client.ScheduleRequest
	if detail := decodeBody(body, &req, `{"pipelineId": string, "spec": string, "timeZone": string, "overlap": string, "catchupLimit": integer, "input": JSON, "paused": boolean}`); detail != "" {
		writeProblem(w, kindInvalidRequest.problem(detail))
		return
	}
	s, err := a.rt.CreateSchedule(r.Context(), tenant, engine.ScheduleSpec{PipelineID: req.PipelineID, Spec: req.Spec, TimeZone: req.TimeZone,
		Overlap: schedule.Overlap(req.Overlap), CatchupLimit: req.CatchupLimit, Input: req.Input, Paused: req.Paused})
	if err != nil {
		a.scheduleFail(w, r, err)
		return
	}
	w.Header().Set("Location", a.basePath+"/v1/schedules/"+s.ID)
	writeJSON(w, http.StatusCreated, scheduleView(s))
}

// listSchedules handles GET /v1/schedules.
func (a *api) listSchedules(w http.ResponseWriter, r *http.Request) {
	if !a.authorized(w, r) {
		return
	}
	tenant, ok := a.tenant(w, r)
	if !ok {
		return
	}
	all, err := a.rt.ListSchedules(r.Context(), tenant)
	if err != nil {
		a.scheduleFail(w, r, err)
		return
	}
	out := client.ScheduleList{Schedules: make([]client.Schedule, 0, len(all))}
	for _, s := range all {
		out.Schedules = append(out.Schedules, scheduleView(s))
	}
	writeJSON(w, http.StatusOK, out)
}

// scheduleCall authorizes a request on one schedule and returns its
// tenant and id.
func (a *api) scheduleCall(w http.ResponseWriter, r *http.Request) (tenant, id string, ok bool) {
	if !a.authorized(w, r) {
		return "", "", false
	}
	if tenant, ok = a.tenant(w, r); !ok {
		return "", "", false
	}
	id = r.PathValue("scheduleId")
	if !validExecutionID(id) || !strings.HasPrefix(id, engine.ScheduleIDPrefix) {
		writeProblem(w, kindScheduleNotFound.problem("No schedule with this id exists for this tenant."))
		return "", "", false
	}
	return tenant, id, true
}

// getSchedule handles GET /v1/schedules/{scheduleId}.
func (a *api) getSchedule(w http.ResponseWriter, r *http.Request) {
	a.oneSchedule(w, r, a.rt.GetSchedule)
}

// pauseSchedule handles POST /v1/schedules/{scheduleId}/pause.
func (a *api) pauseSchedule(w http.ResponseWriter, r *http.Request) {
	a.oneSchedule(w, r, a.rt.PauseSchedule)
}

// resumeSchedule handles POST /v1/schedules/{scheduleId}/resume.
func (a *api) resumeSchedule(w http.ResponseWriter, r *http.Request) {
	a.oneSchedule(w, r, a.rt.ResumeSchedule)
}

func (a *api) oneSchedule(w http.ResponseWriter, r *http.Request, do func(ctx context.Context, tenant, id string) (engine.Schedule, error)) {
	tenant, id, ok := a.scheduleCall(w, r)
	if !ok {
		return
	}
	s, err := do(r.Context(), tenant, id)
	if err != nil {
		a.scheduleFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, scheduleView(s))
}

// deleteSchedule handles DELETE /v1/schedules/{scheduleId}: 204.
func (a *api) deleteSchedule(w http.ResponseWriter, r *http.Request) {
	tenant, id, ok := a.scheduleCall(w, r)
	if !ok {
		return
	}
	if err := a.rt.DeleteSchedule(r.Context(), tenant, id); err != nil {
		a.scheduleFail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// scheduleFail answers a schedule call's error.
func (a *api) scheduleFail(w http.ResponseWriter, r *http.Request, err error) {
	var fe *engine.ScheduleFieldError
	switch {
	case errors.As(err, &fe):
		b, _ := json.Marshal(fe.Field)
		writeProblem(w, kindInvalidRequest.problem(fmt.Sprintf("%s: %s.", b, fe.Reason)))
	case errors.Is(err, store.ErrNotFound):
		writeProblem(w, kindScheduleNotFound.problem("No schedule with this id exists for this tenant."))
	case errors.Is(err, engine.ErrTooManySchedules):
		writeProblem(w, kindTooManySchedules.problem(fmt.Sprintf("A tenant holds at most %d schedules and a deployment %d: delete one first.", engine.MaxSchedulesPerTenant, engine.MaxSchedules)))
	case errors.Is(err, engine.ErrSchedulesUnavailable):
		writeProblem(w, kindSchedulesUnavailable.problem("This deployment's state store keeps no schedules."))
	default:
		a.fail(w, r, err)
	}
}
