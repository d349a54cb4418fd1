package backendtest

// The job cases of the state store suite (store.JobStore, run when the
// state store implements it): job records created once and updated under
// their version, the active ones listed, pages of ids round tripping, and
// expired jobs and pages absent.

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qasync/qasync/shared/store"
)

// jobCases are the job cases, run by runState on stores that keep jobs.
var jobCases = []struct {
	name string
	fn   func(*stateEnv, store.JobStore)
}{
	{"JobCreatedOnce", testJobCreatedOnce},
	{"JobUpdateGuardedByVersion", testJobUpdateGuarded},
	{"ActiveJobsListed", testActiveJobs},
	{"JobPagesRoundTrip", testJobPages},
	{"ExpiredJobsAbsent", testJobsExpired},
}

func (e *stateEnv) job(id string, active bool) store.Job {
	now := e.clock.Now()
	return store.Job{
		Key: store.JobKey{TenantID: e.tenant, ID: id}, Active: active, State: []byte(`{"step":0}`),
		CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(24 * time.Hour),
	}
}

func testJobCreatedOnce(e *stateEnv, js store.JobStore) {
	want := e.job("j1", true)
	if err := js.CreateJob(e.ctx, want); err != nil {
		e.t.Fatal(err)
	}
	got, err := js.GetJob(e.ctx, want.Key)
	if err != nil {
		e.t.Fatal(err)
	}
	if got.Version != 1 || !got.Active || string(got.State) != `{"step":0}` || !got.CreatedAt.Equal(want.CreatedAt) ||
		!got.UpdatedAt.Equal(want.UpdatedAt) || got.ExpiresAt.Unix() != want.ExpiresAt.Unix() {
		e.t.Fatalf("GetJob = %+v, want %+v at version 1", got, want)
	}
	again := e.job("j1", false)
	again.State = []byte(`{"other":true}`)
	if err := js.CreateJob(e.ctx, again); !errors.Is(err, store.ErrConflict) {
		e.t.Fatalf("a second CreateJob with the key: err = %v, want ErrConflict", err)
	}
	var created atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if js.CreateJob(e.ctx, e.job("race", true)) == nil {
				created.Add(1)
			}
		})
	}
	wg.Wait()
	if created.Load() != 1 {
		e.t.Fatalf("%d of 8 concurrent CreateJob calls succeeded, want 1", created.Load())
	}
	if _, err := js.GetJob(e.ctx, store.JobKey{TenantID: e.tenant, ID: "missing"}); !errors.Is(err, store.ErrNotFound) {
		e.t.Fatalf("GetJob of a missing job: err = %v, want ErrNotFound", err)
	}
	if _, err := js.GetJob(e.ctx, store.JobKey{TenantID: e.tenant + "-other", ID: "j1"}); !errors.Is(err, store.ErrNotFound) {
		e.t.Fatalf("GetJob under another tenant: err = %v, want ErrNotFound", err)
	}
}

func testJobUpdateGuarded(e *stateEnv, js store.JobStore) {
	j := e.job("j1", true)
	if err := js.CreateJob(e.ctx, j); err != nil {
		e.t.Fatal(err)
	}
	e.clock.Advance(time.Second)
	j.State, j.UpdatedAt = []byte(`{"step":1}`), e.clock.Now()
	got, err := js.UpdateJob(e.ctx, j, 1)
	if err != nil || got.Version != 2 || string(got.State) != `{"step":1}` || !got.UpdatedAt.Equal(e.clock.Now()) {
		e.t.Fatalf("UpdateJob = %+v, %v; want version 2 with the new state", got, err)
	}
	stale := j
	stale.State = []byte(`{"stale":true}`)
	if _, err := js.UpdateJob(e.ctx, stale, 1); !errors.Is(err, store.ErrConflict) {
		e.t.Fatalf("UpdateJob at a stale version: err = %v, want ErrConflict", err)
	}
	var won atomic.Int32
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			x := j
			x.State = fmt.Appendf(nil, `{"writer":%d}`, i)
			if _, err := js.UpdateJob(e.ctx, x, 2); err == nil {
				won.Add(1)
			} else if !errors.Is(err, store.ErrConflict) {
				e.t.Errorf("UpdateJob: %v", err)
			}
		})
	}
	wg.Wait()
	if won.Load() != 1 {
		e.t.Fatalf("%d of 6 concurrent updates at one version won, want 1", won.Load())
	}
	missing := e.job("missing", false)
	if _, err := js.UpdateJob(e.ctx, missing, 1); !errors.Is(err, store.ErrNotFound) {
		e.t.Fatalf("UpdateJob of a missing job: err = %v, want ErrNotFound", err)
	}
}

// mineActive returns the ids of this case's tenant's active jobs.
func (e *stateEnv) mineActive(js store.JobStore) map[string]int64 {
	e.t.Helper()
	jobs, err := js.ActiveJobs(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]int64{}
	for _, j := range jobs {
		if !j.Active {
			e.t.Errorf("ActiveJobs returned inactive job %s", j.Key)
		}
		if j.Key.TenantID == e.tenant {
			out[j.Key.ID] = j.Version
		}
	}
	return out
}

func testActiveJobs(e *stateEnv, js store.JobStore) {
	for _, j := range []store.Job{e.job("a", true), e.job("b", true), e.job("idle", false)} {
		if err := js.CreateJob(e.ctx, j); err != nil {
			e.t.Fatal(err)
		}
	}
	if got := e.mineActive(js); !reflect.DeepEqual(got, map[string]int64{"a": 1, "b": 1}) {
		e.t.Fatalf("active jobs %v, want a and b at version 1", got)
	}
	done := e.job("a", false)
	if _, err := js.UpdateJob(e.ctx, done, 1); err != nil {
		e.t.Fatal(err)
	}
	if got := e.mineActive(js); !reflect.DeepEqual(got, map[string]int64{"b": 1}) {
		e.t.Fatalf("active jobs after a finished: %v, want b", got)
	}
	if got := e.mineActive(js); !reflect.DeepEqual(got, map[string]int64{"b": 1}) {
		e.t.Fatalf("active jobs read again: %v, want b", got)
	}
}

func testJobPages(e *stateEnv, js store.JobStore) {
	key := store.JobKey{TenantID: e.tenant, ID: "paged"}
	full := make([]string, store.MaxJobPage)
	for i := range full {
		full[i] = fmt.Sprintf("0190a1b2-0000-8000-8000-%012d", i)
	}
	exp := e.clock.Now().Add(time.Hour)
	for n, ids := range [][]string{full, {"x-1", "x-2"}, {}} {
		if err := js.PutJobPage(e.ctx, key, n, ids, exp); err != nil {
			e.t.Fatalf("PutJobPage %d: %v", n, err)
		}
	}
	for n, want := range [][]string{full, {"x-1", "x-2"}, {}} {
		got, err := js.JobPage(e.ctx, key, n)
		if err != nil || len(got) != len(want) || (len(want) > 0 && !reflect.DeepEqual(got, want)) {
			e.t.Fatalf("JobPage %d = %d ids, %v; want %d", n, len(got), err, len(want))
		}
	}
	if err := js.PutJobPage(e.ctx, key, 1, []string{"y-1"}, exp); err != nil {
		e.t.Fatal(err)
	}
	if got, err := js.JobPage(e.ctx, key, 1); err != nil || !reflect.DeepEqual(got, []string{"y-1"}) {
		e.t.Fatalf("rewritten page 1 = %v, %v", got, err)
	}
	if _, err := js.JobPage(e.ctx, key, 3); !errors.Is(err, store.ErrNotFound) {
		e.t.Fatalf("JobPage of an unwritten page: err = %v, want ErrNotFound", err)
	}
	if err := js.PutJobPage(e.ctx, key, 4, append(full, "one-too-many"), exp); err == nil {
		e.t.Fatalf("PutJobPage of %d ids succeeded, want an error", store.MaxJobPage+1)
	}
}

func testJobsExpired(e *stateEnv, js store.JobStore) {
	j := e.job("old", true)
	j.ExpiresAt = e.clock.Now().Add(time.Hour)
	if err := js.CreateJob(e.ctx, j); err != nil {
		e.t.Fatal(err)
	}
	if err := js.PutJobPage(e.ctx, j.Key, 0, []string{"a"}, j.ExpiresAt); err != nil {
		e.t.Fatal(err)
	}
	e.clock.Advance(2 * time.Hour)
	if _, err := js.GetJob(e.ctx, j.Key); !errors.Is(err, store.ErrNotFound) {
		e.t.Fatalf("GetJob of an expired job: err = %v, want ErrNotFound", err)
	}
	if _, err := js.JobPage(e.ctx, j.Key, 0); !errors.Is(err, store.ErrNotFound) {
		e.t.Fatalf("JobPage of an expired page: err = %v, want ErrNotFound", err)
	}
	if got := e.mineActive(js); len(got) != 0 {
		e.t.Fatalf("active jobs after expiry: %v, want none", got)
	}
	fresh := e.job("old", true)
	if err := js.CreateJob(e.ctx, fresh); err != nil {
		e.t.Fatalf("CreateJob over an expired job: %v", err)
	}
}
