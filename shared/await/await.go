// Package await builds steps that suspend an execution until an external
// party completes it: the step hands a resume token to someone (a person,
// a partner system), returns, and the execution parks as WAITING_EXTERNAL
// without holding a worker. POST /v1/executions/{executionId}/awaits/
// {awaitId}/complete with the token as X-Resume-Token carries the
// completion payload, which becomes the next step's input (or the
// execution's result, when the await step is the last one).
//
// The await id is derived from the execution, step name and attempt, so a
// retried await step (after AWAIT_TIMEOUT) starts a new await with a new
// token. A token is "r1.<tenant>.<mac>", where mac is the hex
// HMAC-SHA256 over (tenant, execution id, await id) keyed by
// pipeline.orchestrator.await.resume-token-secret: it names the tenant, so
// the completion route needs no other caller identity (behind API Gateway
// it has no authorizer; the token is its authorization). Without a secret
// an await step fails non-retryably with code
// await_resume_token_secret_missing.
package await

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
)

// ID returns the id of the await the step attempt described by info
// starts: stable for one attempt, new for every retry.
func ID(info pipeline.StepInfo) string {
	h := sha256.Sum256(fmt.Appendf(nil, "%d:%s;%d:%s;%d", len(info.ExecutionID), info.ExecutionID, len(info.StepName), info.StepName, info.Attempt))
	return "aw-" + hex.EncodeToString(h[:12])
}

// Token returns the resume token of awaitID, to be handed to the party
// that completes the await. It fails when the runtime has no resume-token
// secret configured.
func Token(info pipeline.StepInfo, awaitID string) (string, error) {
	if info.ResumeToken == nil {
		return "", pipeline.NonRetryable(pipeline.CodeAwaitTokenSecretMissing,
			fmt.Errorf("await: no resume-token secret is configured (pipeline.orchestrator.await.resume-token-secret)"))
	}
	return info.ResumeToken(awaitID), nil
}

// tokenPrefix starts every resume token (its format's version).
const tokenPrefix = "r1."

// Sign computes the resume token of an await: "r1.<tenant>.<mac>", mac
// being the hex HMAC-SHA256, keyed by secret, over the length-prefixed
// tenant, execution id and await id.
func Sign(secret []byte, tenantID, executionID, awaitID string) string {
	return tokenPrefix + tenantID + "." + mac(secret, tenantID, executionID, awaitID)
}

func mac(secret []byte, tenantID, executionID, awaitID string) string {
	m := hmac.New(sha256.New, secret)
	for _, p := range []string{tenantID, executionID, awaitID} {
		fmt.Fprintf(m, "%d:%s;", len(p), p)
	}
	return hex.EncodeToString(m.Sum(nil))
}

// TokenTenant returns the tenant a resume token names ("" and false when
// the token is not of the resume-token form). It does not verify the token.
func TokenTenant(token string) (string, bool) {
	rest, ok := strings.CutPrefix(token, tokenPrefix)
	i := strings.LastIndexByte(rest, '.')
	if !ok || i <= 0 || len(rest)-i-1 != 2*sha256.Size {
		return "", false
	}
	return rest[:i], true
}

// Verify reports, in constant time, whether token is the resume token of
// the await.
func Verify(secret []byte, tenantID, executionID, awaitID, token string) bool {
	want := Sign(secret, tenantID, executionID, awaitID)
	return hmac.Equal([]byte(want), []byte(token))
}

// Suspend returns the error a step returns to park its execution until
// the await is completed. timeout, when positive, bounds the wait.
func Suspend(awaitID string, timeout time.Duration) error {
	return &pipeline.AwaitError{ID: awaitID, Timeout: timeout}
}

// Spec configures an await step.
type Spec struct {
	// Timeout, when positive, fails the step with AWAIT_TIMEOUT if no
	// completion arrives within it (enforced by the sweeper, so up to a
	// sweep interval later). The step's retry policy then applies: a retry
	// starts a new await; exhaustion dead-letters the execution. It may not
	// exceed the execution retention (the runtime refuses to start): the
	// parked execution is kept at least a retention past its timeout.
	Timeout time.Duration
}

// Request is what an await step's function gets: the step's input, and
// the await id and resume token to hand to the external party.
type Request struct {
	Info    pipeline.StepInfo
	Input   payload.Payload
	AwaitID string
	Token   string
}

// Step builds a step that calls notify (to hand the await id and token to
// whoever completes the await; it should be idempotent, as a takeover may
// call it again) and then suspends the execution. A notify error fails
// the step like any step error.
func Step(name string, spec Spec, notify func(ctx context.Context, req Request) error, opts ...pipeline.StepOption) pipeline.Step {
	s := pipeline.Step{Name: name, Run: func(ctx context.Context, info pipeline.StepInfo, in payload.Payload) (payload.Payload, error) {
		id := ID(info)
		tok, err := Token(info, id)
		if err != nil {
			return payload.Payload{}, err
		}
		if notify != nil {
			if err := notify(ctx, Request{Info: info, Input: in, AwaitID: id, Token: tok}); err != nil {
				return payload.Payload{}, err
			}
		}
		return payload.Payload{}, Suspend(id, spec.Timeout)
	}}
	s.AwaitTimeout = spec.Timeout
	for _, o := range opts {
		o(&s)
	}
	return s
}
