package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/clitest"
	"github.com/qasync/qasync/shared/internal/httpapi"
	"github.com/qasync/qasync/shared/store"
)

// tenantOf is a tenant id of its own for each test, so that lists and
// counts see only the test's executions.
func tenantOf(t *testing.T) string {
	return regexp.MustCompile(`[^A-Za-z0-9._-]`).ReplaceAllString(t.Name(), "-")
}

func newClient(t *testing.T, tg *clitest.Target, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(tg.URL, append([]client.Option{client.WithTenant(tenantOf(t))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ctxOf(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// inputs numbers settle's inputs.
var inputs atomic.Int64

// settle submits to pipeline and waits until the execution rests in want.
func settle(t *testing.T, c *client.Client, pipelineID string, want store.Status) client.Execution {
	t.Helper()
	ctx := ctxOf(t)
	body := fmt.Sprintf(`{"n":%d}`, inputs.Add(1)) // never a duplicate
	sub, err := c.Submit(ctx, client.SubmitRequest{PipelineID: pipelineID, Body: []byte(body)})
	if err != nil {
		t.Fatal(err)
	}
	for {
		e, err := c.Status(ctx, sub.ExecutionID)
		if err != nil {
			t.Fatal(err)
		}
		if e.Status == want {
			return e
		}
		// FAILED comes before DLQ (the dead letter is published, then
		// recorded on the row): only another terminal status is an end.
		if e.Status.Terminal() && !(e.Status == store.Failed && want == store.DLQ) {
			t.Fatalf("execution %s ended %s, want %s", e.ExecutionID, e.Status, want)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("execution %s still %s, want %s", e.ExecutionID, e.Status, want)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// problemOf returns err's *client.Error, failing the test when it is not one.
func problemOf(t *testing.T, err error) *client.Error {
	t.Helper()
	var e *client.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not a *client.Error", err, err)
	}
	if !strings.HasPrefix(e.Problem.Type, client.ProblemTypePrefix) || e.Problem.Title == "" || e.Problem.Status != e.StatusCode {
		t.Fatalf("problem document %+v is incomplete", e.Problem)
	}
	return e
}

// TestContractConstantsMatchTheServer: the client's header names and
// problem type prefix are the server's.
func TestContractConstantsMatchTheServer(t *testing.T) {
	for _, c := range [][2]string{
		{client.ProblemTypePrefix, httpapi.ProblemTypePrefix}, {client.TenantHeader, httpapi.TenantHeader},
		{client.IdempotencyKeyHeader, httpapi.IdempotencyKeyHeader}, {client.MessageTypeHeader, httpapi.MessageTypeHeader},
		{client.ResumeTokenHeader, httpapi.ResumeTokenHeader},
	} {
		if c[0] != c[1] {
			t.Errorf("client has %q, the server %q", c[0], c[1])
		}
	}
}

// TestSubmitStatusResultAgainstTheServer: a submission is 202 new and
// 200 duplicate, Wait follows it to SUCCEEDED, the result carries the last
// step's bytes and content type, and an unknown id is IsNotFound with the
// problem document.
func TestSubmitStatusResultAgainstTheServer(t *testing.T) {
	t.Parallel()
	c := newClient(t, clitest.Real(t))
	ctx := ctxOf(t)
	req := client.SubmitRequest{PipelineID: clitest.PipelineOK, IdempotencyKey: "order-1", Body: []byte(`{"order":1}`)}
	sub, err := c.Submit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if sub.Duplicate || sub.ExecutionID == "" || sub.PipelineID != clitest.PipelineOK || sub.SubmittedAt.IsZero() ||
		sub.StatusURL != "/v1/executions/"+sub.ExecutionID || sub.ResultURL != sub.StatusURL+"/result" {
		t.Fatalf("submission %+v", sub)
	}
	dup, err := c.Submit(ctx, req)
	if err != nil || !dup.Duplicate || dup.ExecutionID != sub.ExecutionID {
		t.Fatalf("duplicate submission %+v, %v", dup, err)
	}
	var seen []store.Status
	e, err := c.Wait(ctx, sub.ExecutionID, client.WaitOptions{MinInterval: 5 * time.Millisecond,
		OnChange: func(e client.Execution) error { seen = append(seen, e.Status); return nil }})
	if err != nil || e.Status != store.Succeeded || e.StepName != "finish" || e.StepIndex != 1 || e.Version < 2 || e.CreatedAt.IsZero() {
		t.Fatalf("wait: %+v, %v", e, err)
	}
	if len(seen) == 0 || seen[len(seen)-1] != store.Succeeded {
		t.Fatalf("OnChange saw %v", seen)
	}
	res, err := c.Result(ctx, sub.ExecutionID)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(res.Data, &out); err != nil || out["order"] != 1.0 || out["prepared"] != true || out["finished"] != true ||
		!strings.HasPrefix(res.ContentType, "application/json") {
		t.Fatalf("result %s (%s): %v", res.Data, res.ContentType, err)
	}
	_, err = c.Status(ctx, "no-such-execution")
	if !client.IsNotFound(err) || client.IsConflict(err) || problemOf(t, err).Problem.Kind() != "execution-not-found" {
		t.Fatalf("status of an unknown id: %v", err)
	}
	// Another tenant's execution is unknown.
	other, _ := client.New(c.BaseURL(), client.WithTenant("someone-else"))
	if _, err := other.Status(ctx, sub.ExecutionID); !client.IsNotFound(err) {
		t.Fatalf("status from another tenant: %v", err)
	}
}

// TestBadRequestsAreTypedProblems: an unknown pipeline is 404, a body
// that is not JSON 400 (IsBadRequest) with the problem's type, title,
// status and detail, and a missing id fails before any request.
func TestBadRequestsAreTypedProblems(t *testing.T) {
	t.Parallel()
	c := newClient(t, clitest.Real(t))
	ctx := ctxOf(t)
	_, err := c.Submit(ctx, client.SubmitRequest{PipelineID: "no.such.pipeline", Body: []byte(`{}`)})
	if !client.IsNotFound(err) || problemOf(t, err).Problem.Kind() != "pipeline-not-found" {
		t.Fatalf("unknown pipeline: %v", err)
	}
	_, err = c.Submit(ctx, client.SubmitRequest{PipelineID: clitest.PipelineOK, Body: []byte(`{not json`)})
	p := problemOf(t, err)
	if !client.IsBadRequest(err) || p.Problem.Kind() != "invalid-json" || p.Problem.Detail == "" || p.Method != http.MethodPost ||
		!strings.Contains(err.Error(), "400 invalid-json") {
		t.Fatalf("bad JSON: %v (%+v)", err, p)
	}
	if _, err := c.Status(ctx, ""); !errors.Is(err, client.ErrMissingArgument) {
		t.Fatalf("empty id: %v", err)
	}
}

// TestResultBeforeSuccessIsConflict: the result of a parked execution is
// a 409 whose problem names the execution's status.
func TestResultBeforeSuccessIsConflict(t *testing.T) {
	t.Parallel()
	c := newClient(t, clitest.Real(t))
	e := settle(t, c, clitest.PipelineWait, store.WaitingExternal)
	_, err := c.Result(ctxOf(t), e.ExecutionID)
	p := problemOf(t, err)
	if !client.IsConflict(err) || p.Problem.ExecutionStatus != store.WaitingExternal || p.Problem.ExecutionID != e.ExecutionID {
		t.Fatalf("result of a parked execution: %v (%+v)", err, p.Problem)
	}
}

// TestRedriveAgainstTheServer: re-drive needs the admin token (401
// without it), sends a DLQ execution back to its step (202 with the
// status), and is a 409 for a SUCCEEDED one.
func TestRedriveAgainstTheServer(t *testing.T) {
	t.Parallel()
	tg := clitest.Real(t)
	anon, c := newClient(t, tg), newClient(t, tg, client.WithAdminToken(tg.AdminToken))
	ctx := ctxOf(t)
	dlq := settle(t, c, clitest.PipelineFail, store.DLQ)
	if dlq.Error == nil || dlq.Error.Code != clitest.ErrorCodeFail || dlq.Error.TerminalReason != "non_retryable" {
		t.Fatalf("dead-lettered execution %+v", dlq)
	}
	_, err := anon.Redrive(ctx, dlq.ExecutionID, client.RedriveRequest{Reason: "fixed"})
	if !client.IsUnauthorized(err) {
		t.Fatalf("re-drive without the token: %v", err)
	}
	v := dlq.Version
	e, err := c.Redrive(ctx, dlq.ExecutionID, client.RedriveRequest{Reason: "dependency fixed, OPS-42", ExpectedVersion: &v})
	if err != nil || e.ExecutionID != dlq.ExecutionID || e.Version <= dlq.Version {
		t.Fatalf("re-drive: %+v, %v", e, err)
	}
	ok := settle(t, c, clitest.PipelineOK, store.Succeeded)
	_, err = c.Redrive(ctx, ok.ExecutionID, client.RedriveRequest{Reason: "again"})
	if !client.IsConflict(err) || problemOf(t, err).Problem.ExecutionStatus != store.Succeeded {
		t.Fatalf("re-drive of a succeeded execution: %v", err)
	}
	if _, err := c.Redrive(ctx, ok.ExecutionID, client.RedriveRequest{}); !errors.Is(err, client.ErrMissingArgument) {
		t.Fatalf("re-drive without a reason: %v", err)
	}
}

// TestCompleteAwaitAgainstTheServer: an await completion with the resume
// token resumes the execution (a wrong token is 403), and is sent without
// the admin token.
func TestCompleteAwaitAgainstTheServer(t *testing.T) {
	t.Parallel()
	tg := clitest.Real(t)
	c := newClient(t, tg, client.WithAdminToken(tg.AdminToken))
	ctx := ctxOf(t)
	e := settle(t, c, clitest.PipelineWait, store.WaitingExternal)
	awaitID, token, err := tg.ResumeToken(e.ExecutionID)
	if err != nil {
		t.Fatal(err)
	}
	if e.Await == nil || e.Await.AwaitID != awaitID || e.Await.Status != store.AwaitWaiting {
		t.Fatalf("parked execution's await %+v, want %s", e.Await, awaitID)
	}
	_, err = c.CompleteAwait(ctx, e.ExecutionID, awaitID, token+"x", []byte(`{"approved":true}`), "")
	if statusOf(err) != http.StatusForbidden {
		t.Fatalf("completion with a wrong token: %v", err)
	}
	got, err := c.CompleteAwait(ctx, e.ExecutionID, awaitID, token, []byte(`{"approved":true}`), "")
	if err != nil || got.ExecutionID != e.ExecutionID {
		t.Fatalf("completion: %+v, %v", got, err)
	}
	done, err := c.Wait(ctx, e.ExecutionID, client.WaitOptions{MinInterval: 5 * time.Millisecond})
	if err != nil || done.Status != store.Succeeded || done.Await == nil || done.Await.Status != store.AwaitCompleted {
		t.Fatalf("after the completion: %+v, %v", done, err)
	}
}

func statusOf(err error) int {
	var e *client.Error
	if errors.As(err, &e) {
		return e.StatusCode
	}
	return 0
}

// newestFirst fails the test unless the executions are newest first: the
// list orders by creation time in milliseconds (the index's sort key), so
// executions created in the same millisecond come in the server's order.
func newestFirst(t *testing.T, es []client.Execution) {
	t.Helper()
	for i := 1; i < len(es); i++ {
		if es[i].CreatedAt.Truncate(time.Millisecond).After(es[i-1].CreatedAt.Truncate(time.Millisecond)) {
			t.Fatalf("not newest first: %s created %v after %s created %v", es[i].ExecutionID, es[i].CreatedAt, es[i-1].ExecutionID, es[i-1].CreatedAt)
		}
	}
}

// sameExecutions fails the test unless es holds each id of want exactly
// once and nothing else.
func sameExecutions(t *testing.T, what string, es []client.Execution, want ...string) {
	t.Helper()
	got := make([]string, len(es))
	for i, e := range es {
		got[i] = e.ExecutionID
	}
	slices.Sort(got)
	want = slices.Sorted(slices.Values(want))
	if !slices.Equal(got, want) {
		t.Fatalf("%s: executions %v, want each of %v once", what, got, want)
	}
}

// TestListFiltersAndFollowsCursors: list returns the tenant's executions
// newest first (by creation millisecond), each exactly once across the
// pages ListAll follows, filters by pipeline and status, and refuses a bad
// status, limit or cursor with 400.
func TestListFiltersAndFollowsCursors(t *testing.T) {
	t.Parallel()
	c := newClient(t, clitest.Real(t))
	ctx := ctxOf(t)
	var oks []string
	for range 5 {
		oks = append(oks, settle(t, c, clitest.PipelineOK, store.Succeeded).ExecutionID)
	}
	dlq := settle(t, c, clitest.PipelineFail, store.DLQ)

	var all []client.Execution
	for e, err := range c.ListAll(ctx, client.ListQuery{Limit: 2}) {
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, e)
	}
	sameExecutions(t, "ListAll in pages of 2", all, append(oks, dlq.ExecutionID)...)
	newestFirst(t, all)
	first, err := c.List(ctx, client.ListQuery{Limit: 2})
	if err != nil || len(first.Executions) != 2 || first.NextCursor == "" {
		t.Fatalf("first page %+v, %v", first, err)
	}
	page, err := c.List(ctx, client.ListQuery{PipelineID: clitest.PipelineOK, Statuses: []store.Status{store.Succeeded}})
	if err != nil || page.NextCursor != "" {
		t.Fatalf("filtered page %+v: %v", page, err)
	}
	sameExecutions(t, "pipeline and status filter", page.Executions, oks...)
	newestFirst(t, page.Executions)
	p, err := c.List(ctx, client.ListQuery{Statuses: []store.Status{store.DLQ, store.Cancelled}})
	if err != nil {
		t.Fatal(err)
	}
	sameExecutions(t, "status filter DLQ,CANCELLED", p.Executions, dlq.ExecutionID)
	for name, q := range map[string]client.ListQuery{
		"status": {Statuses: []store.Status{"SLEEPING"}}, "limit": {Limit: 501}, "cursor": {Cursor: "bm90LWEtY3Vyc29y"},
	} {
		if _, err := c.List(ctx, q); !client.IsBadRequest(err) {
			t.Errorf("a bad %s: %v, want 400", name, err)
		} else {
			problemOf(t, err)
		}
	}
}

// TestHistoryInCommitOrder: an execution's history numbers its events
// from 1 without gaps, from SUBMITTED to SUCCEEDED with each step's start
// and success; an unknown id is IsNotFound.
func TestHistoryInCommitOrder(t *testing.T) {
	t.Parallel()
	c := newClient(t, clitest.Real(t))
	ctx := ctxOf(t)
	e := settle(t, c, clitest.PipelineOK, store.Succeeded)
	h := succeededHistory(t, c, e.ExecutionID)
	if h.ExecutionID != e.ExecutionID || len(h.Events) == 0 {
		t.Fatalf("history %+v", h)
	}
	var types []history.Type
	for i, ev := range h.Events {
		if ev.Seq != i+1 || ev.At.IsZero() {
			t.Fatalf("event %d: %+v", i, ev)
		}
		types = append(types, ev.Type)
	}
	if types[0] != history.Submitted || types[len(types)-1] != history.Succeeded ||
		!slices.Contains(types, history.StepStarted) || !slices.Contains(types, history.StepSucceeded) {
		t.Fatalf("event types %v", types)
	}
	if _, err := c.History(ctx, "no-such-execution"); !client.IsNotFound(err) {
		t.Fatalf("history of an unknown id: %v", err)
	}
}

// succeededHistory returns the whole history of a SUCCEEDED execution
// once it ends SUCCEEDED (clitest.Eventually: a stream-fed history
// trails the row).
func succeededHistory(t *testing.T, c *client.Client, id string) client.History {
	t.Helper()
	var h client.History
	clitest.Eventually(t, func() (err error) {
		if h, err = c.History(ctxOf(t), id); err == nil && (len(h.Events) == 0 || h.Events[len(h.Events)-1].Type != history.Succeeded) {
			err = fmt.Errorf("the history does not end SUCCEEDED yet: %+v", h.Events)
		}
		return err
	})
	return h
}

// TestCancel: a parked execution is CANCELLED at once (202), a second
// cancel changes nothing (200), a SUCCEEDED one is IsConflict, and the
// route needs the admin token.
func TestCancel(t *testing.T) {
	t.Parallel()
	tg := clitest.Real(t)
	anon, c := newClient(t, tg), newClient(t, tg, client.WithAdminToken(tg.AdminToken))
	ctx := ctxOf(t)
	parked := settle(t, c, clitest.PipelineWait, store.WaitingExternal)
	if _, err := anon.Cancel(ctx, parked.ExecutionID, client.CancelRequest{Reason: "no"}); !client.IsUnauthorized(err) {
		t.Fatalf("cancel without the token: %v", err)
	}
	e, err := c.Cancel(ctx, parked.ExecutionID, client.CancelRequest{Reason: "customer withdrew"})
	if err != nil || e.Status != store.Cancelled || e.CancelReason != "customer withdrew" || e.CancelRequestedAt.IsZero() {
		t.Fatalf("cancel: %+v, %v", e, err)
	}
	again, err := c.Cancel(ctx, parked.ExecutionID, client.CancelRequest{Reason: "again"})
	if err != nil || again.Status != store.Cancelled {
		t.Fatalf("second cancel: %+v, %v", again, err)
	}
	ok := settle(t, c, clitest.PipelineOK, store.Succeeded)
	if _, err := c.Cancel(ctx, ok.ExecutionID, client.CancelRequest{Reason: "late"}); !client.IsConflict(err) {
		t.Fatalf("cancel of a succeeded execution: %v", err)
	}
	if _, err := c.Cancel(ctx, "no-such-execution", client.CancelRequest{Reason: "x"}); !client.IsNotFound(err) {
		t.Fatalf("cancel of an unknown id: %v", err)
	}
	historyHas(t, c, parked.ExecutionID, func(ev client.Event) bool {
		return ev.Type == history.Cancelled && ev.Reason == "customer withdrew"
	})
}

// historyHas waits (clitest.Eventually: a stream-fed history trails the
// row) until execution id's history holds an event that match accepts.
func historyHas(t *testing.T, c *client.Client, id string, match func(client.Event) bool) {
	t.Helper()
	clitest.Eventually(t, func() error {
		h, err := c.History(ctxOf(t), id)
		if err == nil && !slices.ContainsFunc(h.Events, match) {
			err = fmt.Errorf("history of %s: no such event in %+v", id, h.Events)
		}
		return err
	})
}

// TestBulkRedrive: a dry run counts the matching DLQ executions, is done
// at once and re-drives none; a real run re-drives each (each gets a
// REDRIVEN event whose audit note names the job and the reason) and its
// progress reaches done; an unknown re-drive id is IsNotFound.
func TestBulkRedrive(t *testing.T) {
	t.Parallel()
	tg := clitest.Real(t)
	c := newClient(t, tg, client.WithAdminToken(tg.AdminToken))
	ctx := ctxOf(t)
	a := settle(t, c, clitest.PipelineFail, store.DLQ)
	b := settle(t, c, clitest.PipelineFail, store.DLQ)
	settle(t, c, clitest.PipelineOK, store.Succeeded)
	filter := client.RedriveFilter{PipelineID: clitest.PipelineFail, Statuses: []store.Status{store.DLQ}, ErrorCode: clitest.ErrorCodeFail,
		CreatedAfter: a.CreatedAt.Add(-time.Minute), CreatedBefore: time.Now().Add(time.Minute)}
	dry, err := c.StartRedrives(ctx, client.BulkRedriveRequest{Filter: filter, Reason: "count", DryRun: true})
	if err != nil || dry.Matched != 2 || dry.RedriveID == "" {
		t.Fatalf("dry run: %+v, %v", dry, err)
	}
	if p, err := c.RedriveProgress(ctx, dry.RedriveID); err != nil ||
		p != (client.RedriveProgress{RedriveID: dry.RedriveID, Matched: 2, Done: true, DryRun: true}) {
		t.Fatalf("dry run progress %+v, %v", p, err)
	}
	for _, x := range []client.Execution{a, b} {
		if e, err := c.Status(ctx, x.ExecutionID); err != nil || e.Version != x.Version {
			t.Fatalf("a dry run changed %s: %+v, %v", x.ExecutionID, e, err)
		}
	}
	start := client.BulkRedriveRequest{Filter: filter, Reason: "fixed upstream, OPS-7", RatePerSecond: 50, IdempotencyKey: client.NewIdempotencyKey()}
	run, err := c.StartRedrives(ctx, start)
	if err != nil || run.Matched != 2 || run.Duplicate {
		t.Fatalf("bulk re-drive: %+v, %v", run, err)
	}
	// A retry of the start (its answer lost) answers the job it started.
	if again, err := c.StartRedrives(ctx, start); err != nil || again.RedriveID != run.RedriveID || !again.Duplicate {
		t.Fatalf("the retried start: %+v, %v; want job %s, duplicate", again, err, run.RedriveID)
	}
	other := start
	other.Reason = "another reason"
	var ce *client.Error
	if _, err := c.StartRedrives(ctx, other); !errors.As(err, &ce) || ce.StatusCode != http.StatusUnprocessableEntity ||
		ce.Problem.Kind() != "idempotency-key-mismatch" {
		t.Fatalf("the key with another request: %v, want a 422 idempotency-key-mismatch", err)
	}
	// The sweeper loop of the server drives the job: it looks for new
	// jobs every few seconds (at least 5 s apart while it holds none),
	// then re-drives at the job's rate. ctxOf's 30 s bound the wait.
	var p client.RedriveProgress
	for !p.Done {
		if p, err = c.RedriveProgress(ctx, run.RedriveID); err != nil {
			t.Fatalf("progress %+v: %v", p, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if p != (client.RedriveProgress{RedriveID: run.RedriveID, Matched: 2, Redriven: 2, Done: true}) {
		t.Fatalf("progress %+v", p)
	}
	for _, x := range []client.Execution{a, b} {
		historyHas(t, c, x.ExecutionID, func(ev client.Event) bool {
			return ev.Type == history.Redriven && strings.Contains(ev.Reason, run.RedriveID) && strings.HasSuffix(ev.Reason, "fixed upstream, OPS-7")
		})
	}
	if _, err := c.RedriveProgress(ctx, "no-such-redrive"); !client.IsNotFound(err) {
		t.Fatalf("progress of an unknown re-drive: %v", err)
	}
	if _, err := c.StartRedrives(ctx, client.BulkRedriveRequest{Filter: filter}); !errors.Is(err, client.ErrMissingArgument) {
		t.Fatalf("bulk re-drive without a reason: %v", err)
	}
}

// TestDeadLetters: the tenant's dead-letter records, newest first (by
// recording time), each once across the pages DeadLettersAll follows,
// with the step, reason and error of each failure, filtered by pipeline.
func TestDeadLetters(t *testing.T) {
	t.Parallel()
	c := newClient(t, clitest.Real(t))
	ctx := ctxOf(t)
	a := settle(t, c, clitest.PipelineFail, store.DLQ)
	b := settle(t, c, clitest.PipelineFail, store.DLQ)
	var got []client.DeadLetter
	for r, err := range c.DeadLettersAll(ctx, client.DeadLetterQuery{PipelineID: clitest.PipelineFail, Limit: 1}) {
		if err != nil {
			t.Fatal(err)
		}
		if r.ID == "" || r.PipelineID != clitest.PipelineFail || r.StepIndex != 0 || r.StepName != "work" || r.TransitionKey == "" ||
			r.TerminalReason != "non_retryable" || r.ErrorCode != clitest.ErrorCodeFail || r.ErrorMessage != "this step always fails" ||
			r.RetriesObserved != 0 || r.FailedAt.IsZero() || r.RecordedAt.IsZero() {
			t.Fatalf("record %+v", r)
		}
		got = append(got, r)
	}
	ids := []string{}
	for i, r := range got {
		ids = append(ids, r.ExecutionID)
		if i > 0 && r.RecordedAt.Truncate(time.Millisecond).After(got[i-1].RecordedAt.Truncate(time.Millisecond)) {
			t.Fatalf("not newest first: %+v after %+v", r, got[i-1])
		}
	}
	if slices.Sort(ids); !slices.Equal(ids, slices.Sorted(slices.Values([]string{a.ExecutionID, b.ExecutionID}))) {
		t.Fatalf("dead letters of %v, want each of %s and %s once", ids, a.ExecutionID, b.ExecutionID)
	}
	if p, err := c.DeadLetters(ctx, client.DeadLetterQuery{PipelineID: clitest.PipelineOK}); err != nil || len(p.DeadLetters) != 0 {
		t.Fatalf("dead letters of a pipeline without any: %+v, %v", p, err)
	}
}

// TestOpenAPI: the API serves an OpenAPI 3.1 document.
func TestOpenAPI(t *testing.T) {
	t.Parallel()
	c := newClient(t, clitest.Real(t))
	doc, err := c.OpenAPI(ctxOf(t))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		OpenAPI string         `json:"openapi"`
		Paths   map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(doc, &d); err != nil || !strings.HasPrefix(d.OpenAPI, "3.1") || d.Paths["/v1/executions"] == nil {
		t.Fatalf("document %.200s: %v", doc, err)
	}
}

// TestNonProblemAnswerBecomesAProblem: an error answer that is not a
// problem document (API Gateway's {"message":"Forbidden"}) is an *Error
// with the status, its text as title and the message as detail.
func TestNonProblemAnswerBecomesAProblem(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"message":"Forbidden"}`))
	}))
	defer srv.Close()
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Status(ctxOf(t), "x")
	var e *client.Error
	if !errors.As(err, &e) || e.StatusCode != 403 || e.Problem.Status != 403 || e.Problem.Title != "Forbidden" ||
		e.Problem.Detail != "Forbidden" || !client.IsUnauthorized(err) || client.IsNotFound(err) {
		t.Fatalf("error %v (%+v)", err, e)
	}
}

// TestNewRefusesBadURLs: a URL without an http(s) scheme or host, or with
// a query, is refused, and the base path of a stage is kept.
func TestNewRefusesBadURLs(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"127.0.0.1:8080", "ftp://x", "http://", "http://x/?a=b", "http://x/#f"} {
		if _, err := client.New(u); err == nil {
			t.Errorf("New(%q) succeeded", u)
		}
	}
	c, err := client.New("https://example.com/prod/")
	if err != nil || c.BaseURL() != "https://example.com/prod" {
		t.Fatalf("base URL %v, %v", c, err)
	}
}
