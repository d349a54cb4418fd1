package sim

import (
	"context"
	"errors"
	"time"

	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// partner is the external party that completes await steps: on time,
// late, never, twice, and now and then with a token it was given for an
// earlier execution under the same idempotency key.
type partner struct {
	w      *world
	tokens []*token
}

// token is a resume token the partner was handed.
type token struct {
	inc     *incarnation // the execution it was issued for
	exec    string
	awaitID string
	value   string
	in      doc
}

// issued is called by the approve step: the partner keeps the token and
// plans its completions.
func (pt *partner) issued(info pipeline.StepInfo, awaitID, value string, in doc, timeout time.Duration) {
	w := pt.w
	var inc *incarnation
	if e, err := w.back.view().state.Get(context.Background(), store.Key{TenantID: info.TenantID, ExecutionID: info.ExecutionID}); err == nil {
		inc = w.created(nil, e, false)
	}
	w.mu.Lock()
	tok := &token{inc: inc, exec: info.ExecutionID, awaitID: awaitID, value: value, in: in}
	pt.tokens = append(pt.tokens, tok)
	// Tokens of earlier executions under the same key: a partner that
	// keeps them may deliver one again (a repeated delivery of an old
	// approval).
	var stale []*token
	if inc != nil && inc.sub != nil && inc.sub.key != "" {
		for _, t := range pt.tokens {
			if t.inc != nil && t.inc != inc && t.inc.sub != nil && t.inc.sub.key == inc.sub.key {
				stale = append(stale, t)
			}
		}
	}
	w.mu.Unlock()
	w.tracef(info.ExecutionID, "partner holds await %s (attempt %d)", awaitID, info.Attempt)
	wait := timeout
	if wait <= 0 {
		wait = 6 * time.Hour
	}
	switch n := w.intn(100); {
	case n < 65: // on time
		w.after(w.between(time.Second, wait*8/10), "complete", func() { pt.complete(tok, "on time") })
	case n < 75: // late
		w.after(wait+w.between(time.Minute, time.Hour), "complete", func() { pt.complete(tok, "late") })
	case n < 85: // never
	default: // twice
		first := w.between(time.Second, wait*8/10)
		w.after(first, "complete", func() { pt.complete(tok, "on time") })
		w.after(first+w.between(0, time.Hour), "complete", func() { pt.complete(tok, "repeated") })
	}
	for _, old := range stale {
		if w.chance(0.5) {
			w.after(w.between(time.Second, 10*time.Minute), "complete", func() { pt.complete(old, "stale (an earlier execution's token)") })
		}
	}
}

// complete delivers a completion with tok (POST .../complete) through a
// live process. A completion accepted for an execution other than the one
// the token was issued for satisfies another execution's await.
func (pt *partner) complete(tok *token, why string) {
	w := pt.w
	p := w.liveProc()
	if p == nil {
		return
	}
	e, dup, err := p.rt.CompleteAwait(context.Background(), tok.exec, tok.awaitID, tok.value, approvalPayload(tok.in, time.Now()))
	switch {
	case errors.Is(err, store.ErrUnavailable), errors.Is(err, errCrashed), errors.Is(err, engine.ErrAwaitBusy):
		w.after(w.between(time.Second, time.Minute), "complete", func() { pt.complete(tok, why) })
		return
	case err != nil:
		w.tracef(tok.exec, "partner completion (%s) of await %s refused: %v", why, tok.awaitID, err)
		return
	}
	w.tracef(tok.exec, "partner completion (%s) of await %s accepted (duplicate=%v, status %s)", why, tok.awaitID, dup, e.Status)
	w.saw(e)
	if dup {
		return
	}
	w.check(invAwaitIsolation)
	if got := w.incOf(&e); got != tok.inc {
		w.violate(invAwaitIsolation, tok.exec, "a completion with the token issued to execution %s (created %s) completed the await of another execution (created %s, nonce %s): an approval for one order completed another",
			tok.exec, tok.inc.createdAt.Sub(w.start).Round(time.Second), e.CreatedAt.Sub(w.start).Round(time.Second), bodyNonce(got))
	}
}

func bodyNonce(inc *incarnation) string {
	if inc == nil || inc.sub == nil {
		return "?"
	}
	return inc.sub.body.Nonce
}
