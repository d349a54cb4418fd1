package embedded

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/qasync/qasync/shared/store"
)

// Operator jobs (store.JobStore: the bulk re-drives) beside the rows, in
// buckets of their own that no step's write touches: bucket jobs holds
// each job's record, bucket jobpages its numbered pages of ids, and
// bucket jobsactive the keys of the active jobs (ActiveJobs reads that
// index only: it grows with the jobs in flight, never with the
// executions). Each call is one write of the group commit.

var _ store.JobStore = (*State)(nil)

// jobRec is the stored form of a job (times in milliseconds, the expiry
// in seconds, as a row's).
type jobRec struct {
	T string `json:"t"`
	I string `json:"i"`
	V int64  `json:"v"`
	A bool   `json:"a,omitempty"`
	S []byte `json:"s,omitempty"`
	C int64  `json:"c"`
	U int64  `json:"u"`
	X int64  `json:"x"`
}

// jobPageRec is the stored form of a page of ids.
type jobPageRec struct {
	IDs []string `json:"ids"`
	X   int64    `json:"x"`
}

// jobKey is a job's key: its tenant and id, each length-prefixed (so no
// job's key is a prefix of another's, and its pages' keys extend it).
func jobKey(k store.JobKey) []byte { return appendStr(appendStr(nil, k.TenantID), k.ID) }

// jobPageKey is page n of the job at jk.
func jobPageKey(jk []byte, n int) []byte {
	return binary.BigEndian.AppendUint32(slices.Clone(jk), uint32(n))
}

// checkJob refuses a job record the store cannot keep.
func checkJob(j store.Job) error {
	if j.Key.TenantID == "" || j.Key.ID == "" || j.ExpiresAt.IsZero() {
		return fmt.Errorf("embedded: a job needs a tenant, an id and an expiry")
	}
	if len(j.State) > store.MaxJobState {
		return fmt.Errorf("embedded: job state of %d bytes exceeds %d", len(j.State), store.MaxJobState)
	}
	return nil
}

func encodeJob(j *store.Job) ([]byte, error) {
	return sealJSON(jobRec{T: j.Key.TenantID, I: j.Key.ID, V: j.Version, A: j.Active, S: j.State,
		C: ms(j.CreatedAt), U: ms(j.UpdatedAt), X: secs(j.ExpiresAt)})
}

// readJob reads the job at jk (ok false when missing; expiry is not
// judged here).
func readJob(tx *bolt.Tx, jk []byte) (store.Job, bool, error) {
	v := tx.Bucket(bJobs).Get(jk)
	if v == nil {
		return store.Job{}, false, nil
	}
	var r jobRec
	if err := openJSON(v, &r, fmt.Sprintf("job %x", jk)); err != nil {
		return store.Job{}, false, err
	}
	return store.Job{Key: store.JobKey{TenantID: r.T, ID: r.I}, Version: r.V, Active: r.A, State: slices.Clone(r.S),
		CreatedAt: fromMs(r.C), UpdatedAt: fromMs(r.U), ExpiresAt: fromSecs(r.X)}, true, nil
}

// liveJob reads the unexpired job at jk.
func (s *State) liveJob(tx *bolt.Tx, jk []byte) (store.Job, bool, error) {
	j, ok, err := readJob(tx, jk)
	if err != nil || !ok || expired(j.ExpiresAt, s.clock.Now()) {
		return store.Job{}, false, err
	}
	return j, true, nil
}

// putJob writes j over old (nil: none), keeping the active index in step.
func (t *txn) putJob(jk []byte, old, j *store.Job) error {
	v, err := encodeJob(j)
	if err != nil {
		return err
	}
	if err := t.bucket(bJobs).Put(jk, v); err != nil {
		return err
	}
	switch active := t.bucket(bJobsActive); {
	case j.Active && (old == nil || !old.Active):
		return active.Put(jk, nil)
	case !j.Active && (old == nil || old.Active):
		return active.Delete(jk)
	}
	return nil
}

// CreateJob implements store.JobStore: version 1, unless a live job holds
// the key (store.ErrConflict); an expired one is replaced.
func (s *State) CreateJob(ctx context.Context, j store.Job) error {
	if err := checkJob(j); err != nil {
		return err
	}
	jk := jobKey(j.Key)
	return s.db.update(ctx, func(t *txn) error {
		old, exists, err := readJob(t.tx, jk)
		switch {
		case err != nil:
			return err
		case exists && !expired(old.ExpiresAt, s.clock.Now()):
			return refuse(store.ErrConflict)
		}
		next := normalizeJob(j)
		next.Version = 1
		var prev *store.Job
		if exists {
			prev = &old
		}
		return t.putJob(jk, prev, &next)
	})
}

// normalizeJob keeps j's times at the store's precision and gives it its
// own state.
func normalizeJob(j store.Job) store.Job {
	j.CreatedAt, j.UpdatedAt, j.ExpiresAt = fromMs(ms(j.CreatedAt)), fromMs(ms(j.UpdatedAt)), fromSecs(secs(j.ExpiresAt))
	j.State = slices.Clone(j.State)
	return j
}

// GetJob implements store.JobStore.
func (s *State) GetJob(ctx context.Context, key store.JobKey) (store.Job, error) {
	var j store.Job
	var ok bool
	err := s.db.view(ctx, func(tx *bolt.Tx) (err error) {
		j, ok, err = s.liveJob(tx, jobKey(key))
		return err
	})
	switch {
	case err != nil:
		return store.Job{}, err
	case !ok:
		return store.Job{}, store.ErrNotFound
	}
	return j, nil
}

// UpdateJob implements store.JobStore.
func (s *State) UpdateJob(ctx context.Context, j store.Job, expectVersion int64) (store.Job, error) {
	if err := checkJob(j); err != nil {
		return store.Job{}, err
	}
	jk := jobKey(j.Key)
	var got store.Job
	err := s.db.update(ctx, func(t *txn) error {
		old, ok, err := s.liveJob(t.tx, jk)
		switch {
		case err != nil:
			return err
		case !ok:
			return refuse(store.ErrNotFound)
		case old.Version != expectVersion:
			return refuse(store.ErrConflict)
		}
		next := old
		next.Active, next.State, next.UpdatedAt, next.ExpiresAt = j.Active, j.State, j.UpdatedAt, j.ExpiresAt
		next.Version = expectVersion + 1
		next = normalizeJob(next)
		if err := t.putJob(jk, &old, &next); err != nil {
			return err
		}
		got = next
		return nil
	})
	if err != nil {
		return store.Job{}, err
	}
	got.State = slices.Clone(got.State)
	return got, nil
}

// ActiveJobs implements store.JobStore: the live jobs of the active index.
func (s *State) ActiveJobs(ctx context.Context) ([]store.Job, error) {
	var out []store.Job
	err := s.db.view(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(bJobsActive).ForEach(func(jk, _ []byte) error {
			j, ok, err := s.liveJob(tx, jk)
			if err != nil {
				return err
			}
			if ok && j.Active {
				out = append(out, j)
			}
			return nil // an expired job's entry goes with it (Expire)
		})
	})
	return out, err
}

// PutJobPage implements store.JobStore.
func (s *State) PutJobPage(ctx context.Context, key store.JobKey, n int, ids []string, expires time.Time) error {
	if n < 0 || len(ids) > store.MaxJobPage {
		return fmt.Errorf("embedded: job page %d of %d ids: pages are numbered from 0 and hold at most %d", n, len(ids), store.MaxJobPage)
	}
	if key.TenantID == "" || key.ID == "" {
		return fmt.Errorf("embedded: a job page needs its job's tenant and id")
	}
	v, err := sealJSON(jobPageRec{IDs: ids, X: secs(expires)})
	if err != nil {
		return err
	}
	pk := jobPageKey(jobKey(key), n)
	return s.db.update(ctx, func(t *txn) error { return t.bucket(bJobPages).Put(pk, v) })
}

// JobPage implements store.JobStore.
func (s *State) JobPage(ctx context.Context, key store.JobKey, n int) ([]string, error) {
	if n < 0 {
		return nil, store.ErrNotFound
	}
	pk := jobPageKey(jobKey(key), n)
	var ids []string
	found := false
	err := s.db.view(ctx, func(tx *bolt.Tx) error {
		v := tx.Bucket(bJobPages).Get(pk)
		if v == nil {
			return nil
		}
		var r jobPageRec
		if err := openJSON(v, &r, fmt.Sprintf("job page %x", pk)); err != nil {
			return err
		}
		if expired(fromSecs(r.X), s.clock.Now()) {
			return nil
		}
		ids, found = r.IDs, true
		return nil
	})
	switch {
	case err != nil:
		return nil, err
	case !found:
		return nil, store.ErrNotFound
	}
	if ids == nil {
		ids = []string{}
	}
	return ids, nil
}
