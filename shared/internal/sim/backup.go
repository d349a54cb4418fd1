package sim

import (
	"errors"
	"time"

	"github.com/qasync/qasync/shared/internal/embedded"
)

// backupStall starts a backup of the embedded store whose reader stops
// reading for a while (a hung disk, a client that went away without
// closing): whatever the backup holds open then stays open that long.
func (w *world) backupStall() {
	eb, ok := w.back.(*embeddedBackend)
	if !ok {
		return
	}
	db := eb.db
	stall := w.between(time.Minute, 20*time.Minute)
	w.fault("backup_stall")
	w.tracef("", "BACKUP with a reader that stalls for %s", stall.Round(time.Second))
	w.async(func() {
		_ = db.WriteBackup(&stalledReader{w: w, db: db, stall: stall})
	})
}

// stalledReader is the backup's reader: it takes the first bytes, then
// stops reading for its stall.
type stalledReader struct {
	w       *world
	db      *embedded.DB
	stall   time.Duration
	stalled bool
}

func (s *stalledReader) Write(b []byte) (int, error) {
	if s.stalled {
		return len(b), nil
	}
	s.stalled = true
	s.w.check(invBackupNoPin)
	if n := s.db.OpenReadTransactions(); n > 0 {
		s.w.violate(invBackupNoPin, "", "a backup reader stalled while %d read transaction(s) of the serving store were open for it: once the file must grow, every read and write of the store waits until the reader resumes", n)
		// Stalling for real here would hang the store, and the simulation
		// with it: the reader gives up instead.
		return 0, errors.New("sim: the stalled reader gave up")
	}
	time.Sleep(s.stall)
	return len(b), nil
}
