package console_test

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/store"
)

// epoch is "now" for the fixtures: every execution was created before it.
var epoch = time.Date(2026, 3, 4, 15, 30, 0, 0, time.UTC)

// Fixture ids.
const (
	tenantAcme    = "acme"
	tenantOther   = "globex"
	tenantHostile = "hostile"

	// showcaseID has the long timeline: retries, an await, a takeover, a
	// dead letter and a re-drive, then success.
	showcaseID = "0195a1c2-0000-8000-8000-00000000show"
	// queuedID is QUEUED (cancelled at once), runningID RUNNING (cancel
	// requested), succeededID SUCCEEDED (not cancellable), dlqID DLQ and
	// unknownID REMOTE_OUTCOME_UNKNOWN (re-drivable).
	queuedID    = "0195a1c2-0000-8000-8000-0000000queue"
	runningID   = "0195a1c2-0000-8000-8000-000000000run"
	succeededID = "0195a1c2-0000-8000-8000-000000000don"
	dlqID       = "0195a1c2-0000-8000-8000-0000000000dl"
	unknownID   = "0195a1c2-0000-8000-8000-00000000unkn"
	hostileID   = "0195a1c2-0000-8000-8000-00000000evil"

	// resultBytes is the result of succeededID: never on a page but its
	// own, to an operator who asks for it.
	resultBytes = `{"secret-result":"do-not-render-7f3a"}`
	// inputBytes is succeededID's input, submitted with succeededKey.
	inputBytes   = `{"order":"A-1027","lines":[{"sku":"input-marker-41c9","qty":2}]}`
	succeededKey = "order-A-1027 (retry 2)"
	// goneID's dead letter outlived its execution's row.
	goneID = "0195a1c2-0000-8000-8000-00000000gone"
)

// keyedID was submitted with the idempotency key keyedKey: its id is the
// key's slot and an incarnation, as the runtime's are.
var keyedID = engine.ExecutionSlot(tenantAcme, keyedKey) + ".7c1f0e2d3b4a5968"

const keyedKey = "invoice B-2044"

// fixturePipelines are the pipelines of the fixtures.
var fixturePipelines = []string{"checkout.deliver-order", "invoices.render", "diag.drill"}

// Hostile strings: the pages must show them as text.
const (
	hostileScript = `<script>alert("xss")</script>`
	hostileImg    = `"><img src=x onerror=alert(1)>`
)

// errFakeNotCancellable stands for engine.ErrNotCancellable (the ops
// branch's), which the console must not need to know.
var errFakeNotCancellable = errors.New("fake: execution is not cancellable")

// fakeBackend is an in-memory console.Backend with realistic data.
type fakeBackend struct {
	mu       sync.Mutex
	execs    map[store.Key]*store.Execution
	events   map[store.Key][]history.Event
	dead     map[string][]deadletter.Record // by tenant, newest first
	results  map[store.Key]payload.Payload
	inputs   map[store.Key]payload.Payload
	lists    []store.ListQuery
	cancels  []string // "tenant/id: reason"
	redrives []engine.RedriveOptions
	// counts are the map parents' children counts.
	counts map[store.Key]engine.ChildCounts
	now    time.Time
	// recRedrives are the re-drives of a dead letter's execution when it
	// was recorded (by record id): a record is outstanding while its
	// execution is DLQ or FAILED with as many.
	recRedrives map[string]int
	// countLimit bounds the records DeadLetterCounts counts.
	countLimit int
	// starts are the bulk re-drives started; jobs the bulk re-drives by
	// tenant/id, jobKeys their ids by tenant/idempotency key.
	starts  []engine.RedrivesOptions
	jobs    map[string]engine.RedriveJob
	jobKeys map[string]string
}

// newFakeBackend returns the fixtures: 137 executions of tenant acme over
// three pipelines in every status (newest first by creation time), a few
// of tenant globex, and tenant hostile's execution whose strings attack
// the pages.
func newFakeBackend() *fakeBackend {
	f := &fakeBackend{
		execs: map[store.Key]*store.Execution{}, events: map[store.Key][]history.Event{},
		dead: map[string][]deadletter.Record{}, results: map[store.Key]payload.Payload{}, counts: map[store.Key]engine.ChildCounts{},
		inputs: map[store.Key]payload.Payload{}, recRedrives: map[string]int{}, countLimit: 1000,
		jobs: map[string]engine.RedriveJob{}, jobKeys: map[string]string{},
		now: epoch,
	}
	steps := []string{"validate", "charge", "await-approval", "ship"}
	for i := range 130 {
		st := store.Statuses[i%len(store.Statuses)]
		created := epoch.Add(-time.Duration(i+20) * 47 * time.Second)
		e := f.add(tenantAcme, fmt.Sprintf("0195a1c2-%04x-8000-8000-%012d", 9999-i, i), fixturePipelines[i%len(fixturePipelines)], st, created)
		e.StepIndex = i % len(steps)
		e.StepName = steps[e.StepIndex]
		e.Attempt = 1 + i%3
		f.simpleHistory(e)
	}
	// The named fixtures, newest of all.
	q := f.add(tenantAcme, queuedID, "checkout.deliver-order", store.Queued, epoch.Add(-5*time.Second))
	q.StepName = "validate"
	f.simpleHistory(q)
	r := f.add(tenantAcme, runningID, "checkout.deliver-order", store.Running, epoch.Add(-9*time.Second))
	r.StepIndex, r.StepName, r.LeaseOwner, r.LeaseExpiresAt = 1, "charge", "worker-7f2c", epoch.Add(25*time.Second)
	f.simpleHistory(r)
	s := f.add(tenantAcme, succeededID, "invoices.render", store.Succeeded, epoch.Add(-13*time.Second))
	s.StepIndex, s.StepName = 1, "render"
	s.UpdatedAt = s.CreatedAt.Add(2350 * time.Millisecond)
	f.results[s.Key()] = payload.Payload{ContentType: "application/json", Data: []byte(resultBytes)}
	s.IdempotencyKey = succeededKey
	f.inputs[s.Key()] = payload.Payload{ContentType: "application/json", Data: []byte(inputBytes)}
	f.simpleHistory(s)
	d := f.add(tenantAcme, dlqID, "checkout.deliver-order", store.DLQ, epoch.Add(-17*time.Second))
	d.StepIndex, d.StepName, d.Attempt = 1, "charge", 5
	d.Error = &store.Failure{Code: "card_declined", Message: "the card issuer declined the charge", TerminalReason: store.ReasonRetryExhausted}
	f.simpleHistory(d)
	f.deadLetter(d, epoch.Add(-16*time.Second))
	u := f.add(tenantAcme, unknownID, "diag.drill", store.RemoteOutcomeUnknown, epoch.Add(-21*time.Second))
	u.StepName = "remote-call"
	u.Error = &store.Failure{Code: "remote_outcome_unknown", Message: "rest http://worker/run: no answer within 30s"}
	f.simpleHistory(u)
	k := f.add(tenantAcme, keyedID, "invoices.render", store.Succeeded, epoch.Add(-30*time.Second))
	k.StepName, k.IdempotencyKey = "render", keyedKey
	f.results[k.Key()] = payload.Payload{ContentType: "application/json", Data: []byte(`{"invoice":"B-2044"}`)}
	f.simpleHistory(k)
	f.showcase()
	f.fanOut()
	// A dead letter whose execution's row expired since.
	f.dead[tenantAcme] = append(f.dead[tenantAcme], deadletter.Record{ID: goneID + ":0:1", Kind: deadletter.KindExecution, TenantID: tenantAcme,
		ExecutionID: goneID, RecordedAt: epoch.Add(-3 * time.Hour), Envelope: &deadletter.Envelope{TenantID: tenantAcme, ExecutionID: goneID,
			PipelineID: "invoices.render", StepName: "render", ErrorCode: "template_missing", ErrorMessage: "no template for locale",
			TerminalReason: store.ReasonNonRetryable, FailedAt: epoch.Add(-3 * time.Hour)}})
	for i := range 4 {
		e := f.add(tenantOther, fmt.Sprintf("0195a1c2-aaaa-8000-8000-%012d", i), "invoices.render", store.Succeeded, epoch.Add(-time.Duration(i+1)*time.Minute))
		e.StepName = "render"
		f.simpleHistory(e)
	}
	f.hostile()
	for _, e := range f.execs {
		if e.Status == store.DLQ && e.TenantID == tenantAcme && e.ExecutionID != dlqID {
			f.deadLetter(e, e.UpdatedAt)
		}
	}
	for t := range f.dead {
		slices.SortFunc(f.dead[t], func(a, b deadletter.Record) int { return b.RecordedAt.Compare(a.RecordedAt) })
	}
	return f
}

// add stores an execution created at created, updated a little later.
func (f *fakeBackend) add(tenant, id, pipelineID string, st store.Status, created time.Time) *store.Execution {
	e := &store.Execution{
		TenantID: tenant, ExecutionID: id, PipelineID: pipelineID, PipelineVersion: "v3", Status: st, Version: 3,
		Attempt: 1, MaxAttempt: 5, StepName: "validate", CreatedAt: created, UpdatedAt: created.Add(1200 * time.Millisecond),
	}
	switch st {
	case store.Running:
		e.LeaseOwner, e.LeaseExpiresAt, e.UpdatedAt = "worker-1", epoch.Add(30*time.Second), created.Add(300*time.Millisecond)
	case store.WaitRetry:
		e.NextDueAt = epoch.Add(40 * time.Second)
		e.Error = &store.Failure{Code: "upstream_timeout", Message: "carrier API timed out"}
	case store.Failed, store.DLQ:
		e.Error = &store.Failure{Code: "validation_failed", Message: "address has no postcode", TerminalReason: store.ReasonNonRetryable}
	case store.WaitingExternal:
		e.Await = &store.Await{ID: "approval", Status: store.AwaitWaiting, TimeoutAt: epoch.Add(time.Hour)}
	case store.Cancelled:
		e.CancelReason, e.CancelRequestedAt = "customer withdrew the order", created.Add(time.Second)
	}
	f.execs[e.Key()] = e
	f.inputs[e.Key()] = payload.Payload{ContentType: "application/json", Data: []byte(`{"order":"` + id + `"}`)}
	return e
}

// simpleHistory gives e a short history that ends in its status.
func (f *fakeBackend) simpleHistory(e *store.Execution) {
	at := e.CreatedAt
	ev := []history.Event{{Type: history.Submitted, At: at, Status: store.Queued}}
	for i := 0; i <= e.StepIndex; i++ {
		at = at.Add(150 * time.Millisecond)
		if i == e.StepIndex && e.Status == store.Queued {
			break
		}
		ev = append(ev, history.Event{Type: history.StepStarted, At: at, StepIndex: i, StepName: stepName(e, i), Attempt: 1, Status: store.Running, Worker: "worker-1"})
		if i == e.StepIndex {
			break
		}
		at = at.Add(400 * time.Millisecond)
		ev = append(ev, history.Event{Type: history.StepSucceeded, At: at, StepIndex: i, StepName: stepName(e, i), Attempt: 1, Status: store.Queued})
	}
	step := history.Event{StepIndex: e.StepIndex, StepName: e.StepName, Attempt: e.Attempt, At: e.UpdatedAt, Status: e.Status}
	switch e.Status {
	case store.Succeeded:
		step.Type = history.StepSucceeded
		end := step
		end.Type = history.Succeeded
		ev = append(ev, step, end)
	case store.WaitRetry:
		step.Type, step.Error, step.RetryAt = history.StepFailed, e.Error, e.NextDueAt
		ev = append(ev, step)
	case store.Failed, store.DLQ:
		step.Type, step.Error = history.StepFailed, e.Error
		end := step
		end.Type = history.DeadLettered
		ev = append(ev, step, end)
	case store.WaitingExternal:
		step.Type = history.Awaiting
		ev = append(ev, step)
	case store.RemoteOutcomeUnknown:
		step.Type, step.Reason = history.OutcomeUnknown, "remote worker did not answer"
		ev = append(ev, step)
	case store.Cancelled:
		step.Type, step.Reason = history.Cancelled, e.CancelReason
		ev = append(ev, step)
	}
	f.setEvents(e.Key(), ev)
}

func stepName(e *store.Execution, i int) string {
	if i == e.StepIndex {
		return e.StepName
	}
	return []string{"validate", "charge", "await-approval", "ship"}[i%4]
}

// setEvents stores events, numbering them from 1.
func (f *fakeBackend) setEvents(key store.Key, ev []history.Event) {
	for i := range ev {
		ev[i].Seq, ev[i].Version = i+1, int64(i+1)
	}
	f.events[key] = ev
}

// showcase is the execution with the long timeline.
func (f *fakeBackend) showcase() {
	t0 := epoch.Add(-10 * time.Minute)
	e := f.add(tenantAcme, showcaseID, "checkout.deliver-order", store.Succeeded, t0)
	e.StepIndex, e.StepName, e.Attempt, e.RedriveCount, e.Note = 3, "ship", 2, 1, "carrier fixed the label API"
	e.Await = &store.Await{ID: "manager-approval", StepIndex: 2, Status: store.AwaitCompleted, CompletedAt: t0.Add(95 * time.Second)}
	e.Version = 21
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	declined := &store.Failure{Code: "gateway_timeout", Message: "payment gateway did not answer within 5s"}
	label := &store.Failure{Code: "label_rejected", Message: "carrier rejected the shipping label: postcode missing", TerminalReason: store.ReasonNonRetryable}
	ev := []history.Event{
		{Type: history.Submitted, At: at(0), Status: store.Queued},
		{Type: history.StepStarted, At: at(120), StepIndex: 0, StepName: "validate", Attempt: 1, Status: store.Running, Worker: "worker-a1"},
		{Type: history.StepSucceeded, At: at(470), StepIndex: 0, StepName: "validate", Attempt: 1, Status: store.Queued},
		{Type: history.StepStarted, At: at(520), StepIndex: 1, StepName: "charge", Attempt: 1, Status: store.Running, Worker: "worker-a1"},
		{Type: history.StepFailed, At: at(5520), StepIndex: 1, StepName: "charge", Attempt: 1, Status: store.WaitRetry, Error: declined, RetryAt: at(7520)},
		{Type: history.StepStarted, At: at(7600), StepIndex: 1, StepName: "charge", Attempt: 2, Status: store.Running, Worker: "worker-b2"},
		{Type: history.StepFailed, At: at(12600), StepIndex: 1, StepName: "charge", Attempt: 2, Status: store.WaitRetry, Error: declined, RetryAt: at(16600)},
		{Type: history.StepStarted, At: at(16700), StepIndex: 1, StepName: "charge", Attempt: 3, Status: store.Running, Worker: "worker-a1"},
		{Type: history.StepSucceeded, At: at(18200), StepIndex: 1, StepName: "charge", Attempt: 3, Status: store.Queued},
		{Type: history.StepStarted, At: at(18300), StepIndex: 2, StepName: "await-approval", Attempt: 1, Status: store.Running, Worker: "worker-b2"},
		{Type: history.Awaiting, At: at(18400), StepIndex: 2, StepName: "await-approval", Attempt: 1, Status: store.WaitingExternal},
		{Type: history.AwaitCompleted, At: at(95000), StepIndex: 2, StepName: "await-approval", Attempt: 1, Status: store.Queued},
		{Type: history.StepStarted, At: at(95100), StepIndex: 3, StepName: "ship", Attempt: 1, Status: store.Running, Worker: "worker-a1"},
		{Type: history.LeaseTakenOver, At: at(125100), StepIndex: 3, StepName: "ship", Attempt: 1, Status: store.Running, Worker: "worker-c3"},
		{Type: history.StepFailed, At: at(126900), StepIndex: 3, StepName: "ship", Attempt: 1, Status: store.DLQ, Error: label},
		{Type: history.DeadLettered, At: at(127000), StepIndex: 3, StepName: "ship", Attempt: 1, Status: store.DLQ, Error: label},
		{Type: history.Redriven, At: at(400000), StepIndex: 3, StepName: "ship", Attempt: 2, Status: store.Queued, Reason: "carrier fixed the label API"},
		{Type: history.StepStarted, At: at(400200), StepIndex: 3, StepName: "ship", Attempt: 2, Status: store.Running, Worker: "worker-b2"},
		{Type: history.StepSucceeded, At: at(401100), StepIndex: 3, StepName: "ship", Attempt: 2, Status: store.Succeeded},
		{Type: history.Succeeded, At: at(401100), StepIndex: 3, StepName: "ship", Attempt: 2, Status: store.Succeeded},
	}
	e.UpdatedAt = at(401100)
	f.results[e.Key()] = payload.Payload{ContentType: "application/json", Data: []byte(resultBytes)}
	f.setEvents(e.Key(), ev)
	// Its dead letter, before the re-drive that made it succeed.
	env := &deadletter.Envelope{TenantID: e.TenantID, ExecutionID: e.ExecutionID, PipelineID: e.PipelineID, StepIndex: 3, StepName: "ship",
		TransitionKey: store.TransitionKey(e.ExecutionID, 3, 1), TerminalReason: label.TerminalReason, ErrorCode: label.Code,
		ErrorMessage: label.Message, FailedAt: at(126900)}
	f.dead[e.TenantID] = append(f.dead[e.TenantID], deadletter.Record{ID: env.TransitionKey, Kind: deadletter.KindExecution,
		TenantID: e.TenantID, ExecutionID: e.ExecutionID, Envelope: env, RecordedAt: at(127000)})
	f.recRedrives[env.TransitionKey] = 0
}

// hostile is tenant hostile's execution, every string of it an attack.
func (f *fakeBackend) hostile() {
	e := f.add(tenantHostile, hostileID, "p"+hostileScript, store.DLQ, epoch.Add(-time.Minute))
	e.StepName = "step" + hostileImg
	e.LeaseOwner = "w" + hostileScript
	e.Error = &store.Failure{Code: "c" + hostileImg, Message: "m" + hostileScript, TerminalReason: store.ReasonNonRetryable}
	e.Note, e.RedriveCount = "note"+hostileImg, 1
	e.CancelReason = "r" + hostileScript
	f.setEvents(e.Key(), []history.Event{
		{Type: history.Submitted, At: e.CreatedAt, Status: store.Queued},
		{Type: history.StepStarted, At: e.CreatedAt.Add(time.Second), StepName: e.StepName, Attempt: 1, Status: store.Running, Worker: e.LeaseOwner},
		{Type: history.StepFailed, At: e.CreatedAt.Add(2 * time.Second), StepName: e.StepName, Attempt: 1, Status: store.DLQ, Error: e.Error, Reason: hostileImg},
	})
	f.deadLetter(e, e.UpdatedAt)
}

// deadLetter records e's dead letter.
func (f *fakeBackend) deadLetter(e *store.Execution, at time.Time) {
	env := &deadletter.Envelope{
		TenantID: e.TenantID, ExecutionID: e.ExecutionID, PipelineID: e.PipelineID, StepIndex: e.StepIndex, StepName: e.StepName,
		TransitionKey: store.TransitionKey(e.ExecutionID, e.StepIndex, e.Attempt), TerminalReason: e.Error.TerminalReason,
		ErrorCode: e.Error.Code, ErrorMessage: e.Error.Message, RetriesObserved: e.Attempt - 1, FailedAt: at.Add(-100 * time.Millisecond),
	}
	f.dead[e.TenantID] = append(f.dead[e.TenantID], deadletter.Record{
		ID: env.TransitionKey, Kind: deadletter.KindExecution, TenantID: e.TenantID, ExecutionID: e.ExecutionID, Envelope: env, RecordedAt: at,
	})
	f.recRedrives[env.TransitionKey] = e.RedriveCount
}

// cursor encodes an offset into a query's results (bound to the query).
func cursor(q string, off int) string {
	return base64.RawURLEncoding.EncodeToString([]byte(q + "|" + strconv.Itoa(off)))
}

func offset(q, c string) (int, error) {
	if c == "" {
		return 0, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	qq, n, ok := strings.Cut(string(b), "|")
	off, aerr := strconv.Atoi(n)
	if err != nil || !ok || qq != q || aerr != nil || off < 0 {
		return 0, store.ErrInvalidCursor
	}
	return off, nil
}

func pageSize(limit int) int {
	if limit == 0 {
		return store.DefaultListLimit
	}
	return limit
}

// List implements console.Backend.
func (f *fakeBackend) List(_ context.Context, q store.ListQuery) (store.ListPage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists = append(f.lists, q)
	var rows []store.Execution
	for _, e := range f.execs {
		if e.TenantID == q.TenantID && (q.PipelineID == "" || e.PipelineID == q.PipelineID) &&
			(len(q.Statuses) == 0 || slices.Contains(q.Statuses, e.Status)) &&
			(q.CreatedAfter.IsZero() || e.CreatedAt.After(q.CreatedAfter)) && (q.CreatedBefore.IsZero() || e.CreatedAt.Before(q.CreatedBefore)) {
			rows = append(rows, *e)
		}
	}
	slices.SortFunc(rows, func(a, b store.Execution) int { return b.CreatedAt.Compare(a.CreatedAt) })
	qk := fmt.Sprint(q.TenantID, q.PipelineID, q.Statuses, q.CreatedAfter.UnixMilli(), q.CreatedBefore.UnixMilli(), q.Limit)
	off, err := offset(qk, q.Cursor)
	if err != nil {
		return store.ListPage{}, err
	}
	off = min(off, len(rows))
	end := min(off+pageSize(q.Limit), len(rows))
	p := store.ListPage{Executions: rows[off:end]}
	if end < len(rows) {
		p.Cursor = cursor(qk, end)
	}
	return p, nil
}

// Status implements console.Backend as a store reads: an id without an
// incarnation (a bare slot) reads the execution living in it.
func (f *fakeBackend) Status(_ context.Context, key store.Key) (store.Execution, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e, ok := f.execs[key]; ok {
		return *e, nil
	}
	for k, e := range f.execs {
		if k.TenantID == key.TenantID && store.Answers(key.ExecutionID, k.ExecutionID) {
			return *e, nil
		}
	}
	return store.Execution{}, store.ErrNotFound
}

// Result implements console.Backend.
func (f *fakeBackend) Result(_ context.Context, key store.Key) (store.Execution, payload.Payload, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.execs[key]
	if !ok {
		return store.Execution{}, payload.Payload{}, store.ErrNotFound
	}
	if e.Status != store.Succeeded {
		return *e, payload.Payload{}, fmt.Errorf("%w: status %s", engine.ErrNotSucceeded, e.Status)
	}
	return *e, f.results[key], nil
}

// History implements console.Backend: the execution's events.
func (f *fakeBackend) History(_ context.Context, key store.Key) ([]history.Event, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.execs[key]; !ok {
		return nil, store.ErrNotFound
	}
	return slices.Clone(f.events[key]), nil
}

// ChildCounts implements console.Backend as the runtime does: nil for an
// execution without a map.
func (f *fakeBackend) ChildCounts(_ context.Context, e store.Execution) (*engine.ChildCounts, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.counts[e.Key()]
	if e.Children == nil || !ok {
		return nil, nil
	}
	return &c, nil
}

// view is rec with its execution now (f.mu held).
func (f *fakeBackend) view(rec deadletter.Record) engine.DeadLetterView {
	v := engine.DeadLetterView{Record: rec}
	if e, ok := f.execs[store.Key{TenantID: rec.TenantID, ExecutionID: rec.ExecutionID}]; ok {
		cur := *e
		v.Current = &cur
		v.Outstanding = (e.Status == store.DLQ || e.Status == store.Failed) && e.RedriveCount == f.recRedrives[rec.ID]
	}
	return v
}

// DeadLetterViews implements console.Backend.
func (f *fakeBackend) DeadLetterViews(_ context.Context, q engine.DeadLetterViewQuery) (engine.DeadLetterViewPage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var views []engine.DeadLetterView
	for _, r := range f.dead[q.TenantID] {
		if q.PipelineID == "" || r.Envelope.PipelineID == q.PipelineID {
			if v := f.view(r); v.Outstanding || !q.OutstandingOnly {
				views = append(views, v)
			}
		}
	}
	qk := fmt.Sprint("dl", q.TenantID, q.PipelineID, q.Limit, q.OutstandingOnly)
	off, err := offset(qk, q.Cursor)
	if err != nil {
		return engine.DeadLetterViewPage{}, fmt.Errorf("fake: %w", deadletter.ErrInvalidCursor)
	}
	off = min(off, len(views))
	end := min(off+pageSize(q.Limit), len(views))
	p := engine.DeadLetterViewPage{DeadLetters: views[off:end]}
	if end < len(views) {
		p.Cursor = cursor(qk, end)
	}
	return p, nil
}

// DeadLetterCounts implements console.Backend over the newest
// countLimit records.
func (f *fakeBackend) DeadLetterCounts(_ context.Context, q deadletter.ListQuery) (engine.DeadLetterCounts, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := engine.DeadLetterCounts{ByCode: map[string]int{}, Outstanding: map[string]int{}, Complete: true}
	for _, r := range f.dead[q.TenantID] {
		if q.PipelineID != "" && r.Envelope.PipelineID != q.PipelineID {
			continue
		}
		if c.Scanned == f.countLimit {
			c.Complete = false
			break
		}
		c.Scanned++
		c.ByCode[r.Envelope.ErrorCode]++
		if f.view(r).Outstanding {
			c.Outstanding[r.Envelope.ErrorCode]++
		}
	}
	return c, nil
}

// Input implements console.Backend.
func (f *fakeBackend) Input(_ context.Context, key store.Key) (store.Execution, payload.Payload, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.execs[key]
	if !ok {
		return store.Execution{}, payload.Payload{}, store.ErrNotFound
	}
	return *e, f.inputs[key], nil
}

// StartRedrivesWith implements console.Backend as the engine does, at
// once: the job scans and (unless a dry run) re-drives every matching
// execution before it returns, done.
func (f *fakeBackend) StartRedrivesWith(_ context.Context, tenant string, opts engine.RedrivesOptions) (engine.RedriveJob, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.starts = append(f.starts, opts)
	filter := opts.Filter
	if strings.TrimSpace(opts.Reason) == "" || opts.RatePerSecond < 0 || opts.RatePerSecond > engine.MaxRedriveRate {
		return engine.RedriveJob{}, engine.ErrInvalidRedrive
	}
	if len(filter.Statuses) == 0 {
		filter.Statuses = fakeBulkStatuses(opts.Action)
	}
	slices.Sort(filter.Statuses)
	if filter.CreatedBefore.IsZero() {
		filter.CreatedBefore = f.now.Add(time.Millisecond)
	}
	rate := cmp.Or(opts.RatePerSecond, engine.DefaultRedriveRate)
	idemKey := tenant + "/" + string(opts.Action) + "/" + opts.IdempotencyKey
	if opts.IdempotencyKey != "" {
		if id, ok := f.jobKeys[idemKey]; ok {
			j := f.jobs[tenant+"/"+id]
			j.Duplicate = true
			return j, nil
		}
	}
	job := engine.RedriveJob{ID: fmt.Sprintf("%032x", len(f.jobs)+1), DryRun: opts.DryRun, Reason: opts.Reason, RatePerSecond: rate,
		Filter: filter, CreatedAt: f.now, Done: true, Action: opts.Action}
	for _, e := range f.execs {
		if e.TenantID != tenant || !slices.Contains(filter.Statuses, e.Status) || (filter.PipelineID != "" && e.PipelineID != filter.PipelineID) ||
			(filter.ErrorCode != "" && (e.Error == nil || e.Error.Code != filter.ErrorCode)) ||
			(!filter.CreatedAfter.IsZero() && !e.CreatedAt.After(filter.CreatedAfter)) || !e.CreatedAt.Before(filter.CreatedBefore) {
			continue
		}
		job.Matched++
		if !opts.DryRun && opts.Action != engine.BulkRedrive {
			fakeBulkPause(e, opts.Action, "bulk "+opts.Action.String()+" "+job.ID+": "+opts.Reason)
			job.Redriven++
		} else if !opts.DryRun {
			e.Status, e.Attempt, e.Error, e.Version = store.Queued, e.Attempt+1, nil, e.Version+1
			e.Note = "redrive " + job.ID + ": " + opts.Reason
			e.RedriveCount++
			job.Redriven++
		}
	}
	f.jobs[tenant+"/"+job.ID] = job
	if opts.IdempotencyKey != "" {
		f.jobKeys[idemKey] = job.ID
	}
	return job, nil
}

// RedriveJob implements console.Backend.
func (f *fakeBackend) RedriveJob(_ context.Context, tenant, id string) (engine.RedriveJob, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	j, ok := f.jobs[tenant+"/"+id]
	if !ok {
		return engine.RedriveJob{}, store.ErrNotFound
	}
	return j, nil
}

// bulkStarts returns the bulk re-drives started.
func (f *fakeBackend) bulkStarts() []engine.RedrivesOptions {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.starts)
}

// Cancel implements console.Backend as the engine does: QUEUED and the
// parked statuses end CANCELLED at once, RUNNING records the request.
func (f *fakeBackend) Cancel(_ context.Context, key store.Key, reason string) (store.Execution, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cancels = append(f.cancels, key.String()+": "+reason)
	e, ok := f.execs[key]
	switch {
	case !ok:
		return store.Execution{}, false, store.ErrNotFound
	case e.Status == store.Cancelled:
		return *e, false, nil
	case e.Status.Terminal():
		return *e, false, fmt.Errorf("%w: status %s", errFakeNotCancellable, e.Status)
	}
	e.Version++
	e.CancelReason, e.CancelRequestedAt, e.UpdatedAt = reason, f.now, f.now
	// The events of one commit, after the history's last (history.Number
	// orders and keeps events by Version and Index).
	ev := f.events[key]
	v := ev[len(ev)-1].Version + 1
	ev = append(ev, history.Event{Seq: len(ev) + 1, Type: history.CancelRequested, At: f.now,
		StepIndex: e.StepIndex, StepName: e.StepName, Attempt: e.Attempt, Status: e.Status, Reason: reason, Version: v})
	if e.Status != store.Running {
		e.Status = store.Cancelled
		ev = append(ev, history.Event{Seq: len(ev) + 1, Type: history.Cancelled, At: f.now,
			StepIndex: e.StepIndex, StepName: e.StepName, Attempt: e.Attempt, Status: e.Status, Reason: reason, Version: v, Index: 1})
	}
	f.events[key] = ev
	return *e, true, nil
}

// RedriveWith implements console.Backend as the engine does.
func (f *fakeBackend) RedriveWith(_ context.Context, key store.Key, opts engine.RedriveOptions) (store.Execution, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.redrives = append(f.redrives, opts)
	e, ok := f.execs[key]
	switch {
	case !ok:
		return store.Execution{}, store.ErrNotFound
	case opts.ExpectedVersion != nil && *opts.ExpectedVersion != e.Version:
		return *e, engine.ErrVersionMismatch
	case e.Status == store.RemoteOutcomeUnknown && !opts.ConfirmedNoRemoteEffect:
		return *e, engine.ErrRemoteEffectUnconfirmed
	case e.Status != store.DLQ && e.Status != store.Failed && e.Status != store.RemoteOutcomeUnknown:
		return *e, fmt.Errorf("%w: status %s", engine.ErrNotRedrivable, e.Status)
	}
	e.Status, e.Attempt, e.Error, e.Note, e.Version = store.Queued, e.Attempt+1, nil, opts.Reason, e.Version+1
	e.RedriveCount++
	return *e, nil
}

// calls returns the recorded cancels and re-drives.
func (f *fakeBackend) calls() (cancels []string, redrives []engine.RedriveOptions) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.cancels), slices.Clone(f.redrives)
}

// lastList returns the last list query.
func (f *fakeBackend) lastList() store.ListQuery {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lists[len(f.lists)-1]
}

// count returns how many of tenant's executions match.
func (f *fakeBackend) count(tenant, pipelineID string, statuses ...store.Status) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, e := range f.execs {
		if e.TenantID == tenant && (pipelineID == "" || e.PipelineID == pipelineID) && (len(statuses) == 0 || slices.Contains(statuses, e.Status)) {
			n++
		}
	}
	return n
}
