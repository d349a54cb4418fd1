package sim

import (
	"context"
	"fmt"
	"time"

	"github.com/qasync/qasync/shared/internal/console"
	"github.com/qasync/qasync/shared/store"
)

// The console's sign-out across instances (console.StoreRevocations): an
// operator signs out at one process's console, which records the
// session's revocation in the state store's job store until the session
// would expire; every other process's console must refuse the session
// until then. The simulator signs sessions out now and then, through a
// live process (its store faults apply: a failed sign-out promises
// nothing), and reads the revocation back through other processes at
// times drawn up to the session's expiry, near its end too, where a
// record kept too briefly (or dropped by the store's expiry early) would
// let the session in again.

// signOut revokes a new session at one live process and plans reads of
// it from others before it expires.
func (w *world) signOut() {
	p := w.liveProc()
	js, ok := storeOf(p)
	if !ok {
		return
	}
	w.mu.Lock()
	w.sessions++
	id := fmt.Sprintf("session-%d", w.sessions)
	w.mu.Unlock()
	now := time.Now()
	until := now.Add(console.SessionTTL)
	if err := console.StoreRevocations(js, time.Now).Revoke(context.Background(), id, until); err != nil {
		w.tracef("", "sign-out of %s at %s failed (the session stays): %v", id, p.name, err)
		return
	}
	w.fault("console_sign_out")
	for range 3 {
		// Anywhere in the session's life, the last minutes included.
		at := now.Add(w.between(time.Second, console.SessionTTL-w.cfg.tolerance-w.cfg.rates.skew))
		w.at(at, "session_check", func() { w.checkSignedOut(id, until) })
	}
}

// checkSignedOut reads session id's revocation through a live process: a
// signed-out session is refused until it expires. A read that fails
// refuses the session too (the console fails closed), so only a read
// that answers "not revoked" is a violation.
func (w *world) checkSignedOut(id string, until time.Time) {
	if !time.Now().Before(until) {
		return
	}
	p := w.liveProc()
	js, ok := storeOf(p)
	if !ok {
		return
	}
	revoked, err := console.StoreRevocations(js, time.Now).Revoked(context.Background(), id)
	if err != nil {
		return // refused: the console fails closed
	}
	w.check(invSignedOut)
	if !revoked {
		w.violate(invSignedOut, "", "session %s, signed out, was accepted again at %s %s before it expires", id, p.name, fmtDur(until.Sub(time.Now())))
	}
}

// storeOf is the job store of p's runtime (nil p, or a store without
// one: false).
func storeOf(p *proc) (store.JobStore, bool) {
	if p == nil || p.rt == nil {
		return nil, false
	}
	js, ok := p.rt.Store().(store.JobStore)
	return js, ok
}
