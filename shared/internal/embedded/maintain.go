package embedded

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/reject"
	"github.com/qasync/qasync/shared/store"
)

// breakLeases ends the leases of the RUNNING rows at keys (their worker
// died with the previous process: the directory's lock says no other
// process runs) and queues each for a takeover now. Like a renewal, it
// moves no version and records no history; the takeover claim then
// counts the dead worker's attempt as used, as after a lapsed lease.
// The lease's expiry is cleared rather than set to a made-up moment: a
// zero expiry is lapsed whatever the clock-skew tolerance, and the
// takeover's history event then names no time the lease never had.
func (db *DB) breakLeases(keys [][]byte) error {
	now := db.clock.Now()
	return db.update(context.Background(), func(t *txn) error {
		for _, k := range keys {
			row, ok, err := t.row(k)
			if err != nil || !ok || row.Status != store.Running {
				continue
			}
			next := row
			next.LeaseExpiresAt = time.Time{}
			if err := t.putRow(k, &row, &next); err != nil {
				return err
			}
			item := dispatch.ItemOf(&row)
			if err := t.putQueue(k, item, now); err != nil {
				return err
			}
		}
		return nil
	})
}

// janitorEvery is how often expired values are deleted (reads already
// treat them as absent: this only keeps the file from growing).
const janitorEvery = time.Hour

// janitorChunk bounds the deletions of one write.
const janitorChunk = 256

// rejectRetention is how long a reject envelope is kept.
const rejectRetention = 90 * 24 * time.Hour

type janitor struct {
	db   *DB
	quit chan struct{}
	wg   sync.WaitGroup
}

func startJanitor(db *DB) *janitor {
	j := &janitor{db: db, quit: make(chan struct{})}
	j.wg.Add(1)
	go j.run()
	return j
}

func (j *janitor) stop() { close(j.quit); j.wg.Wait() }

func (j *janitor) run() {
	defer j.wg.Done()
	t := time.NewTimer(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-j.quit:
			return
		case <-t.C:
		}
		n, err := j.db.Expire(context.Background())
		if err != nil {
			j.db.log.LogAttrs(context.Background(), slog.LevelWarn, "embedded_expire_failed", slog.String("event", "embedded_expire_failed"), slog.String("error", err.Error()))
		} else if n > 0 {
			j.db.log.LogAttrs(context.Background(), slog.LevelInfo, "embedded_expired", slog.String("event", "embedded_expired"), slog.Int("deleted", n))
		}
		t.Reset(janitorEvery)
	}
}

// Expire deletes what has expired by the store's clock: execution rows
// (with their index entries, queue entry and history), payload parts,
// effect records, dead-letter records, operator jobs (with their entry
// of the active index) and their pages, and reject envelopes older than
// their retention. It returns how many values it deleted.
func (db *DB) Expire(ctx context.Context) (int, error) {
	now := db.clock.Now()
	type victim struct {
		bucket []byte
		key    []byte
	}
	var victims []victim
	err := db.view(ctx, func(tx *bolt.Tx) error {
		scan := func(name []byte, dead func(v []byte) bool) error {
			return tx.Bucket(name).ForEach(func(k, v []byte) error {
				if dead(v) {
					victims = append(victims, victim{name, append([]byte(nil), k...)})
				}
				return nil
			})
		}
		if err := scan(bExec, func(v []byte) bool {
			body, err := unseal(v)
			if err != nil {
				return false
			}
			var r struct {
				X int64 `json:"x,omitempty"`
			}
			// Only the expiry: the scan reads every row of the file.
			return json.Unmarshal(body, &r) == nil && expired(fromSecs(r.X), now)
		}); err != nil {
			return err
		}
		if err := scan(bParts, func(v []byte) bool {
			at, ok := partExpiryUnchecked(v)
			return ok && expired(at, now)
		}); err != nil {
			return err
		}
		if err := scan(bEffects, func(v []byte) bool {
			r, err := decodeEffect(v)
			return err == nil && expired(r.ExpiresAt, now)
		}); err != nil {
			return err
		}
		if err := scan(bDead, func(v []byte) bool {
			var r deadletter.Record
			return openJSON(v, &r, "") == nil && expired(r.ExpiresAt, now)
		}); err != nil {
			return err
		}
		if err := scan(bJobs, func(v []byte) bool {
			var r jobRec
			return openJSON(v, &r, "") == nil && expired(fromSecs(r.X), now)
		}); err != nil {
			return err
		}
		if err := scan(bJobPages, func(v []byte) bool {
			var r jobPageRec
			return openJSON(v, &r, "") == nil && expired(fromSecs(r.X), now)
		}); err != nil {
			return err
		}
		if err := scan(bMaps, func(v []byte) bool {
			var r mapRec
			return openJSON(v, &r, "") == nil && expired(fromSecs(r.X), now)
		}); err != nil {
			return err
		}
		if err := scan(bSlots, func(v []byte) bool {
			var r slotRec
			return openJSON(v, &r, "") == nil && expired(fromSecs(r.X), now)
		}); err != nil {
			return err
		}
		if err := scan(bRates, func(v []byte) bool {
			var r rateRec
			return openJSON(v, &r, "") == nil && r.expired(now)
		}); err != nil {
			return err
		}
		return scan(bRejects, func(v []byte) bool {
			var env reject.Envelope
			return openJSON(v, &env, "") == nil && now.Sub(env.RejectedAt) > rejectRetention
		})
	})
	if err != nil {
		return 0, err
	}
	deleted := 0
	for len(victims) > 0 {
		chunk := victims[:min(janitorChunk, len(victims))]
		victims = victims[len(chunk):]
		n := 0
		err := db.update(ctx, func(t *txn) error {
			n = 0
			for _, v := range chunk {
				switch string(v.bucket) {
				case string(bExec):
					e, ok, err := t.row(v.key)
					if err != nil || !ok || !e.Expired(now) {
						continue // changed since the scan
					}
					if err := t.dropRow(v.key, &e); err != nil {
						return err
					}
				case string(bDead):
					var r deadletter.Record
					if val := t.bucket(bDead).Get(v.key); val == nil || openJSON(val, &r, "") != nil || !expired(r.ExpiresAt, now) {
						continue
					}
					if r.TenantID != "" {
						if err := t.bucket(bDeadIdx).Delete(deadIdxKey(&r)); err != nil {
							return err
						}
					}
					if err := t.bucket(bDead).Delete(v.key); err != nil {
						return err
					}
				case string(bJobs):
					j, ok, err := readJob(t.tx, v.key)
					if err != nil || !ok || !expired(j.ExpiresAt, now) {
						continue
					}
					if err := t.bucket(bJobsActive).Delete(v.key); err != nil {
						return err
					}
					if err := t.bucket(bJobs).Delete(v.key); err != nil {
						return err
					}
				case string(bMaps):
					var r mapRec
					if val := t.bucket(bMaps).Get(v.key); val == nil || openJSON(val, &r, "") != nil || !expired(fromSecs(r.X), now) {
						continue // rewritten since the scan
					}
					if err := t.bucket(bMaps).Delete(v.key); err != nil {
						return err
					}
				case string(bSlots):
					var r slotRec
					if val := t.bucket(bSlots).Get(v.key); val == nil || openJSON(val, &r, "") != nil || !expired(fromSecs(r.X), now) {
						continue // rewritten since the scan
					}
					if err := t.bucket(bSlots).Delete(v.key); err != nil {
						return err
					}
				case string(bRates):
					var r rateRec
					if val := t.bucket(bRates).Get(v.key); val == nil || openJSON(val, &r, "") != nil || !r.expired(now) {
						continue // rewritten since the scan
					}
					if err := t.bucket(bRates).Delete(v.key); err != nil {
						return err
					}
				case string(bJobPages):
					var r jobPageRec
					if val := t.bucket(bJobPages).Get(v.key); val == nil || openJSON(val, &r, "") != nil || !expired(fromSecs(r.X), now) {
						continue // rewritten since the scan
					}
					if err := t.bucket(bJobPages).Delete(v.key); err != nil {
						return err
					}
				case string(bParts):
					if val := t.bucket(bParts).Get(v.key); val == nil {
						continue
					} else if at, err := partExpiry(val); err != nil || !expired(at, now) {
						continue // written anew since the scan (a part re-put after it expired)
					}
					if err := t.bucket(bParts).Delete(v.key); err != nil {
						return err
					}
				case string(bEffects):
					if val := t.bucket(bEffects).Get(v.key); val == nil {
						continue
					} else if r, err := decodeEffect(val); err != nil || !expired(r.ExpiresAt, now) {
						continue // created anew since the scan: deleting it would lose a command's record
					}
					if err := t.bucket(bEffects).Delete(v.key); err != nil {
						return err
					}
				default:
					if err := t.bucket(v.bucket).Delete(v.key); err != nil {
						return err
					}
				}
				n++
			}
			return nil
		})
		if err != nil {
			return deleted, err
		}
		deleted += n
	}
	return deleted, nil
}
