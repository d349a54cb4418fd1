package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/store"
)

// ActiveJobs fails too: the schedules' list reads it.
func (f failingJobs) ActiveJobs(context.Context) ([]store.Job, error) { return nil, f.err }

// addScheduleCases adds the schedules' routes to the OpenAPI test's
// cases: every documented status of every schedule route.
func addScheduleCases(t *testing.T, cases map[*env][]apiCase, e, broken, down, closed, throttled *env, admin func(map[string]string) map[string]string, badTenant map[string]string, big string) {
	t.Helper()
	mk := func(tenant string) string {
		s, err := e.rt.CreateSchedule(context.Background(), tenant, engine.ScheduleSpec{PipelineID: "echo", Spec: "@hourly"})
		if err != nil {
			t.Fatal(err)
		}
		return s.ID
	}
	one, gone := mk("default"), mk("default")
	for range engine.MaxSchedulesPerTenant {
		mk("full")
	}
	js := map[string]string{"Content-Type": "application/json"}
	sp := func(id string) string { return "/v1/schedules/" + id }
	body := `{"pipelineId":"echo","spec":"*/15 * * * *","timeZone":"Europe/Paris","overlap":"BUFFER_ONE","catchupLimit":3,"input":{"n":1}}`
	cases[e] = append(cases[e],
		apiCase{"POST", "/v1/schedules", body, admin(nil), 201, true},
		apiCase{"POST", "/v1/schedules", `{"pipelineId":"echo","spec":"every hour"}`, admin(nil), 400, true},
		apiCase{"POST", "/v1/schedules", `{"pipelineId":"echo","spec":"@hourly"}`, admin(map[string]string{"X-Tenant-Id": "full"}), 409, true},
		apiCase{"POST", "/v1/schedules", body, js, 401, false},
		apiCase{"POST", "/v1/schedules", big, admin(nil), 413, false},
		apiCase{"GET", "/v1/schedules", "", admin(nil), 200, true},
		apiCase{"GET", "/v1/schedules", "", admin(badTenant), 400, false},
		apiCase{"GET", "/v1/schedules", "", nil, 401, false},
		apiCase{"GET", sp(one), "", admin(nil), 200, true},
		apiCase{"GET", sp(one), "", admin(badTenant), 400, false},
		apiCase{"GET", sp(one), "", nil, 401, false},
		apiCase{"GET", sp("sch-nope"), "", admin(nil), 404, true},
		apiCase{"POST", sp(one) + "/pause", "", admin(nil), 200, true},
		apiCase{"POST", sp(one) + "/pause", "", admin(badTenant), 400, false},
		apiCase{"POST", sp(one) + "/pause", "", nil, 401, false},
		apiCase{"POST", sp("sch-nope") + "/pause", "", admin(nil), 404, true},
		apiCase{"POST", sp(one) + "/resume", "", admin(nil), 200, true},
		apiCase{"POST", sp(one) + "/resume", "", admin(badTenant), 400, false},
		apiCase{"POST", sp(one) + "/resume", "", nil, 401, false},
		apiCase{"POST", sp("sch-nope") + "/resume", "", admin(nil), 404, true},
		apiCase{"DELETE", sp(gone), "", admin(nil), 204, true},
		apiCase{"DELETE", sp(gone), "", admin(nil), 404, true},
		apiCase{"DELETE", sp(one), "", admin(badTenant), 400, false},
		apiCase{"DELETE", sp(one), "", nil, 401, false},
	)
	every := func(want int) []apiCase {
		return []apiCase{
			{"POST", "/v1/schedules", `{"pipelineId":"echo","spec":"@hourly"}`, admin(nil), want, true},
			{"GET", "/v1/schedules", "", admin(nil), want, true},
			{"GET", sp("sch-x"), "", admin(nil), want, true},
			{"DELETE", sp("sch-x"), "", admin(nil), want, true},
			{"POST", sp("sch-x") + "/pause", "", admin(nil), want, true},
			{"POST", sp("sch-x") + "/resume", "", admin(nil), want, true},
		}
	}
	cases[closed] = append(cases[closed], every(403)...)
	cases[throttled] = append(cases[throttled], every(429)...)
	cases[broken] = append(cases[broken], every(500)...)
	cases[down] = append(cases[down], every(503)...)
}

// A refused schedule names its field; a created one answers its
// document, and the list, pause and resume follow.
func TestScheduleRoutes(t *testing.T) {
	e := openapiEnv(t, nil)
	admin := map[string]string{"Authorization": "Bearer " + adminToken, "Content-Type": "application/json"}
	for field, body := range map[string]string{
		"pipelineId":   `{"pipelineId":"nope","spec":"@hourly"}`,
		"spec":         `{"pipelineId":"echo","spec":"61 * * * *"}`,
		"timeZone":     `{"pipelineId":"echo","spec":"@hourly","timeZone":"Mars/Base"}`,
		"overlap":      `{"pipelineId":"echo","spec":"@hourly","overlap":"NEVER"}`,
		"catchupLimit": `{"pipelineId":"echo","spec":"@hourly","catchupLimit":1000}`,
	} {
		w := e.do(req{method: http.MethodPost, path: "/v1/schedules", body: body, headers: admin})
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), fmt.Sprintf(`\"%s\"`, field)) {
			t.Errorf("%s: %d %s", field, w.Code, w.Body.String())
		}
	}
	w := e.do(req{method: http.MethodPost, path: "/v1/schedules", body: `{"pipelineId":"echo","spec":"0 9 * * MON-FRI","timeZone":"Asia/Tokyo"}`, headers: admin})
	if w.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", w.Code, w.Body.String())
	}
	var s client.Schedule
	if err := json.Unmarshal(w.Body.Bytes(), &s); err != nil {
		t.Fatal(err)
	}
	if s.Overlap != "SKIP" || s.CatchupLimit != 1 || s.NextFireAt == nil || s.NextFireAt.UTC().Hour() != 0 || w.Header().Get("Location") != "/v1/schedules/"+s.ScheduleID {
		t.Fatalf("created %+v at %q", s, w.Header().Get("Location"))
	}
	w = e.do(req{method: http.MethodPost, path: "/v1/schedules/" + s.ScheduleID + "/pause", headers: admin})
	if err := json.Unmarshal(w.Body.Bytes(), &s); err != nil || !s.Paused {
		t.Fatalf("pause: %d %s", w.Code, w.Body.String())
	}
	w = e.do(req{method: http.MethodGet, path: "/v1/schedules", headers: admin})
	var l client.ScheduleList
	if err := json.Unmarshal(w.Body.Bytes(), &l); err != nil || len(l.Schedules) != 1 || !l.Schedules[0].Paused {
		t.Fatalf("list: %d %s", w.Code, w.Body.String())
	}
	if w := e.do(req{method: http.MethodPut, path: "/v1/schedules/" + s.ScheduleID, headers: admin}); w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != "GET, HEAD, DELETE" {
		t.Fatalf("PUT: %d %q", w.Code, w.Header().Get("Allow"))
	}
}
