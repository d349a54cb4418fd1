package memory

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/qasync/qasync/shared/store"
)

var _ store.JobStore = (*StateStore)(nil)

// memJobs holds the jobs and their pages (StateStore's part that
// implements store.JobStore). Callers hold the StateStore's lock.
type memJobs struct {
	jobs  map[store.JobKey]*store.Job
	pages map[jobPageKey]jobPage
}

type jobPageKey struct {
	job store.JobKey
	n   int
}

type jobPage struct {
	ids     []string
	expires time.Time
}

// liveJob returns the unexpired job for key, dropping an expired one.
// Callers hold s.mu.
func (s *StateStore) liveJob(key store.JobKey, now time.Time) *store.Job {
	j, ok := s.jobs.jobs[key]
	if !ok {
		return nil
	}
	if expired(j.ExpiresAt, now) {
		delete(s.jobs.jobs, key)
		return nil
	}
	return j
}

// CreateJob implements store.JobStore.
func (s *StateStore) CreateJob(ctx context.Context, j store.Job) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkJob(j); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.liveJob(j.Key, s.clock.Now()) != nil {
		return store.ErrConflict
	}
	c := cloneJob(j)
	c.Version = 1
	s.jobs.jobs[j.Key] = &c
	return nil
}

// GetJob implements store.JobStore.
func (s *StateStore) GetJob(ctx context.Context, key store.JobKey) (store.Job, error) {
	if err := ctx.Err(); err != nil {
		return store.Job{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.liveJob(key, s.clock.Now())
	if j == nil {
		return store.Job{}, store.ErrNotFound
	}
	return cloneJob(*j), nil
}

// UpdateJob implements store.JobStore.
func (s *StateStore) UpdateJob(ctx context.Context, j store.Job, expectVersion int64) (store.Job, error) {
	if err := ctx.Err(); err != nil {
		return store.Job{}, err
	}
	if err := checkJob(j); err != nil {
		return store.Job{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.liveJob(j.Key, s.clock.Now())
	if old == nil {
		return store.Job{}, store.ErrNotFound
	}
	if old.Version != expectVersion {
		return store.Job{}, store.ErrConflict
	}
	next := cloneJob(*old)
	next.Active, next.State, next.UpdatedAt, next.ExpiresAt = j.Active, slices.Clone(j.State), j.UpdatedAt, j.ExpiresAt
	next.Version = expectVersion + 1
	*old = next
	return cloneJob(next), nil
}

// ActiveJobs implements store.JobStore.
func (s *StateStore) ActiveJobs(ctx context.Context) ([]store.Job, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	var out []store.Job
	for k := range s.jobs.jobs {
		if j := s.liveJob(k, now); j != nil && j.Active {
			out = append(out, cloneJob(*j))
		}
	}
	return out, nil
}

// PutJobPage implements store.JobStore.
func (s *StateStore) PutJobPage(ctx context.Context, key store.JobKey, n int, ids []string, expires time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if n < 0 || len(ids) > store.MaxJobPage {
		return fmt.Errorf("memory: job page %d of %d ids: pages are numbered from 0 and hold at most %d", n, len(ids), store.MaxJobPage)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.jobs.pages[jobPageKey{key, n}] = jobPage{ids: slices.Clone(ids), expires: expires}
	return nil
}

// JobPage implements store.JobStore.
func (s *StateStore) JobPage(ctx context.Context, key store.JobKey, n int) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.jobs.pages[jobPageKey{key, n}]
	if ok && expired(p.expires, s.clock.Now()) {
		delete(s.jobs.pages, jobPageKey{key, n})
		ok = false
	}
	if !ok {
		return nil, store.ErrNotFound
	}
	return slices.Clone(p.ids), nil
}

// checkJob refuses a job record no store could keep.
func checkJob(j store.Job) error {
	if j.Key.TenantID == "" || j.Key.ID == "" || j.ExpiresAt.IsZero() {
		return fmt.Errorf("memory: a job needs a tenant, an id and an expiry")
	}
	if len(j.State) > store.MaxJobState {
		return fmt.Errorf("memory: job state of %d bytes exceeds %d", len(j.State), store.MaxJobState)
	}
	return nil
}

func cloneJob(j store.Job) store.Job {
	j.State = slices.Clone(j.State)
	return j
}
