package crashtest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/internal/crashtest"
	"github.com/qasync/qasync/shared/internal/sqsbackend"
	"github.com/qasync/qasync/shared/schema"
	"github.com/qasync/qasync/shared/store"
)

// The HA gate: each test runs real `qasync serve` processes on its own
// tables and queues with crashtest.GateTimings (lease 1.5 s, sweep every
// 1 s with 1 s grace, 2 retries 1 s apart, 3 s visibility) and breaks them.
// docs/recovery.md maps the seed's crash table onto these tests.

func mustSubmit(t *testing.T, addr, pipelineID, key, body string) crashtest.Submitted {
	t.Helper()
	code, s, err := crashtest.Submit(addr, pipelineID, key, []byte(body))
	if err != nil || code != http.StatusAccepted {
		t.Fatalf("submit %s: %d %+v %v", key, code, s, err)
	}
	return s
}

// awaitStatus polls the server until the execution is terminal (or want,
// when given) and returns the status.
func awaitStatus(t *testing.T, addr, id string, within time.Duration) crashtest.Status {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		s, err := crashtest.GetStatus(addr, id)
		if err == nil && crashtest.Terminal(s.Status) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("execution %s not terminal after %s: %+v %v", id, within, s, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// events returns the parsed logs of the servers.
func events(t *testing.T, servers ...*crashtest.Server) []crashtest.Event {
	t.Helper()
	var all []crashtest.Event
	for _, s := range servers {
		evs, err := s.Events()
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, evs...)
	}
	return all
}

// TestGateDuplicateSubmitDeterminism: 50 pairs of concurrent submits with
// the same key, each pair split across two instances, resolve to one
// execution per key: both answers carry the same id, exactly one says
// duplicate=false (202), and the execution and key tables hold exactly 50
// items each.
func TestGateDuplicateSubmitDeterminism(t *testing.T) {
	t.Parallel()
	st := crashtest.NewStack(t)
	env := st.Env(crashtest.GateTimings)
	a, b := crashtest.Start(t, env, "a"), crashtest.Start(t, env, "b")
	const pairs = 50
	type answer struct {
		code int
		s    crashtest.Submitted
		err  error
	}
	got := make([][2]answer, pairs)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 10) // 10 pairs (20 requests) in flight
	for i := range pairs {
		sem <- struct{}{}
		start := make(chan struct{})
		key, body := fmt.Sprintf("dup-%d", i), fmt.Sprintf(`{"echo":"dup-%d"}`, i)
		var pair sync.WaitGroup
		for j, srv := range []*crashtest.Server{a, b} {
			pair.Add(1)
			wg.Go(func() {
				defer pair.Done()
				<-start
				code, s, err := crashtest.Submit(srv.Addr, crashtest.DrillID, key, []byte(body))
				got[i][j] = answer{code, s, err}
			})
		}
		close(start) // both requests leave together
		go func() { pair.Wait(); <-sem }()
	}
	wg.Wait()
	ids := map[string]bool{}
	for i, p := range got {
		x, y := p[0], p[1]
		if x.err != nil || y.err != nil {
			t.Fatalf("pair %d: %v / %v", i, x.err, y.err)
		}
		if x.s.ExecutionID == "" || x.s.ExecutionID != y.s.ExecutionID {
			t.Errorf("pair %d: ids %q and %q differ", i, x.s.ExecutionID, y.s.ExecutionID)
		}
		if x.s.Duplicate == y.s.Duplicate {
			t.Errorf("pair %d: duplicate %v and %v, want exactly one false", i, x.s.Duplicate, y.s.Duplicate)
		}
		for _, ans := range []answer{x, y} {
			if want := map[bool]int{false: http.StatusAccepted, true: http.StatusOK}[ans.s.Duplicate]; ans.code != want {
				t.Errorf("pair %d: HTTP %d with duplicate=%v", i, ans.code, ans.s.Duplicate)
			}
		}
		ids[x.s.ExecutionID] = true
	}
	if len(ids) != pairs {
		t.Errorf("%d distinct executions, want %d", len(ids), pairs)
	}
	ctx := context.Background()
	// The row is its own idempotency record: one row per key, nothing else.
	if n, err := st.CountExecutions(ctx); err != nil || n != pairs {
		t.Errorf("table %s holds %d executions (%v), want %d", st.Names.ExecutionTable, n, err, pairs)
	}
	for id := range ids { // and each runs once to success
		if s := awaitStatus(t, a.Addr, id, 60*time.Second); s.Status != "SUCCEEDED" {
			t.Errorf("execution %s: %+v", id, s)
		}
	}
	if dups := crashtest.DuplicateCommits(events(t, a, b)); len(dups) > 0 {
		t.Errorf("transitions committed twice: %v", dups)
	}
}

// TestGateWorkerKillTakeover: the worker running a step is SIGKILLed
// (only one instance runs while the step starts, so the lease owner is
// that process); another instance takes the expired lease over, counts
// the dead worker's attempt, runs the step again and the execution
// succeeds with the right result. The step ran at least twice and every
// transition was committed once: no transition key twice across both
// processes' logs, one commit per step, and the final version equals 1 +
// the claims (those not chained into a commit) + the commits the logs
// record.
func TestGateWorkerKillTakeover(t *testing.T) {
	t.Parallel()
	st := crashtest.NewStack(t)
	env := st.Env(crashtest.GateTimings)
	a := crashtest.Start(t, env, "a")
	sub := mustSubmit(t, a.Addr, crashtest.DrillID, "kill-1", `{"sleepMs":4000,"echo":"survives a kill","resultBytes":100}`)
	ctx := context.Background()
	row, ok := st.AwaitRow(ctx, sub.ExecutionID, 20*time.Second, func(e store.Execution) bool {
		return e.Status == store.Running && e.StepName == crashtest.DrillStepWork && e.LeaseOwner != ""
	})
	if !ok {
		t.Fatalf("work step never RUNNING under a lease: %+v", row)
	}
	host, _ := os.Hostname()
	if !strings.Contains(row.LeaseOwner, host) {
		t.Errorf("lease owner %q does not name this host %q", row.LeaseOwner, host)
	}
	killedAt := time.Now()
	if err := a.Kill(); err != nil {
		t.Fatal(err)
	}
	b := crashtest.Start(t, env, "b")
	s := awaitStatus(t, b.Addr, sub.ExecutionID, 60*time.Second)
	if s.Status != "SUCCEEDED" {
		t.Fatalf("after the kill: %+v", s)
	}
	t.Logf("killed %s holding %s at attempt %d; SUCCEEDED %s later", a.Name, row.LeaseOwner, row.Attempt, time.Since(killedAt).Round(time.Millisecond))
	code, body, err := crashtest.GetResult(b.Addr, sub.ExecutionID)
	var res crashtest.DrillResult
	if err != nil || code != http.StatusOK || json.Unmarshal(body, &res) != nil {
		t.Fatalf("result: %d %s %v", code, body, err)
	}
	if string(res.Echo) != `"survives a kill"` || len(res.Data) != 100 || res.WorkAttempt < 2 {
		t.Errorf("result %s: want the echo, 100 bytes of data and workAttempt >= 2", body)
	}

	evs := events(t, a, b)
	if dups := crashtest.DuplicateCommits(evs); len(dups) > 0 {
		t.Errorf("transitions committed twice: %v", dups)
	}
	commits := crashtest.Filter(evs, "transition_committed", sub.ExecutionID)
	claims := crashtest.Filter(evs, "lease_claimed", sub.ExecutionID)
	perStep := map[string]int{}
	for _, e := range commits {
		perStep[e.Str("step")]++
	}
	if len(commits) != 3 || perStep[crashtest.DrillStepPrepare] != 1 || perStep[crashtest.DrillStepWork] != 1 || perStep[crashtest.DrillStepFinish] != 1 {
		t.Errorf("commits per step %v, want one each of prepare, work, finish", perStep)
	}
	takeovers := 0
	for _, e := range claims {
		if e.Bool("takeover") && e.Str("step") == crashtest.DrillStepWork {
			takeovers++
		}
	}
	if takeovers < 1 {
		t.Errorf("no takeover claim of the work step in the logs")
	}
	// A chained claim rides in the commit before it (one write, one
	// version); every other claim and every commit is a version.
	ownClaims := 0
	for _, e := range claims {
		if !e.Bool("chained") {
			ownClaims++
		}
	}
	if want := int64(1 + ownClaims + len(commits)); s.Version != want {
		t.Errorf("version %d, want 1 + %d claims of their own + %d commits = %d", s.Version, ownClaims, len(commits), want)
	}
}

// TestGateSweeperRedispatch: the work item of the next step is lost after
// the commit. The only instance is stopped gracefully while the work step
// runs (it finishes the step, commits, dispatches the finish step's item
// and exits); the test then drains that item from the work queue, so the
// execution sits QUEUED between steps with nothing queued for it. A new
// instance's sweeper alone finds it and re-dispatches it, and it succeeds.
func TestGateSweeperRedispatch(t *testing.T) {
	t.Parallel()
	st := crashtest.NewStack(t)
	env := st.Env(crashtest.GateTimings)
	a := crashtest.Start(t, env, "a")
	sub := mustSubmit(t, a.Addr, crashtest.DrillID, "sweep-1", `{"sleepMs":2500,"echo":"swept"}`)
	ctx := context.Background()
	if row, ok := st.AwaitRow(ctx, sub.ExecutionID, 20*time.Second, func(e store.Execution) bool {
		return e.Status == store.Running && e.StepName == crashtest.DrillStepWork
	}); !ok {
		t.Fatalf("work step never RUNNING: %+v", row)
	}
	if err := a.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	row, err := st.Row(ctx, sub.ExecutionID)
	if err != nil || row.Status != store.Queued || row.StepName != crashtest.DrillStepFinish {
		t.Fatalf("after the graceful stop: %+v %v, want QUEUED at step finish", row, err)
	}
	lost, err := st.Drain(ctx, st.WorkQueueURL(), 100)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range lost {
		if item, err := sqsbackend.Decode(*m.Body); err == nil && item.ExecutionID == sub.ExecutionID {
			found = true
		}
	}
	if !found {
		t.Fatalf("the finish step's work item was not in the queue (%d messages drained)", len(lost))
	}
	if n, err := st.QueueDepth(ctx, st.WorkQueueURL()); err != nil || n != 0 {
		t.Fatalf("work queue still holds %d messages (%v)", n, err)
	}
	b := crashtest.Start(t, env, "b")
	if s := awaitStatus(t, b.Addr, sub.ExecutionID, 30*time.Second); s.Status != "SUCCEEDED" {
		t.Fatalf("after the sweep: %+v", s)
	}
	evs := events(t, b)
	redispatched := 0
	for _, e := range crashtest.Filter(evs, "sweep_completed", "") {
		redispatched += e.Int("redispatched")
	}
	if redispatched < 1 {
		t.Errorf("b's sweeper re-dispatched nothing")
	}
	finished := false
	for _, e := range crashtest.Filter(evs, "transition_committed", sub.ExecutionID) {
		finished = finished || e.Str("step") == crashtest.DrillStepFinish
	}
	if !finished {
		t.Errorf("b did not commit the finish step")
	}
	if dups := crashtest.DuplicateCommits(events(t, a, b)); len(dups) > 0 {
		t.Errorf("transitions committed twice: %v", dups)
	}
}

// TestGateRetryExhaustionSurvivesRestart: a step that always fails is
// retried max-retries times, then dead-lettered: status DLQ with
// terminal reason retry_exhausted, and the dead-letter consumer inside
// serve records the envelope (KindExecution, ID the last transition key).
// Every process is then SIGKILLed and new ones started: the status is
// still DLQ at the same version and the record is still readable.
func TestGateRetryExhaustionSurvivesRestart(t *testing.T) {
	t.Parallel()
	st := crashtest.NewStack(t)
	env := st.Env(crashtest.GateTimings)
	a, b := crashtest.Start(t, env, "a"), crashtest.Start(t, env, "b")
	sub := mustSubmit(t, a.Addr, crashtest.DrillID, "exhaust-1", `{"failAttempts":9,"echo":"never"}`)
	s := awaitStatus(t, b.Addr, sub.ExecutionID, 60*time.Second)
	if s.Status != "DLQ" || s.Error == nil || s.Error.TerminalReason != store.ReasonRetryExhausted ||
		s.Error.Code != crashtest.DrillCodeFailure || s.Attempt != 3 {
		t.Fatalf("status %+v (error %+v), want DLQ, retry_exhausted, drill_failure at attempt 3", s, s.Error)
	}
	ctx := context.Background()
	row, err := st.Row(ctx, sub.ExecutionID)
	if err != nil {
		t.Fatal(err)
	}
	rec := awaitRecord(t, st, row.LastTransitionKey, 20*time.Second)
	if rec.Kind != deadletter.KindExecution || rec.ExecutionID != sub.ExecutionID || rec.Envelope == nil ||
		rec.Envelope.TerminalReason != store.ReasonRetryExhausted || rec.Envelope.TransitionKey != row.LastTransitionKey {
		t.Fatalf("dead-letter record %+v (envelope %+v)", rec, rec.Envelope)
	}

	for _, srv := range []*crashtest.Server{a, b} {
		if err := srv.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	c, d := crashtest.Start(t, env, "c"), crashtest.Start(t, env, "d")
	time.Sleep(3 * time.Second) // a few sweeps and polls of the new processes
	for _, srv := range []*crashtest.Server{c, d} {
		again, err := crashtest.GetStatus(srv.Addr, sub.ExecutionID)
		if err != nil || again.Status != "DLQ" || again.Version != s.Version || again.Error == nil ||
			again.Error.TerminalReason != store.ReasonRetryExhausted {
			t.Errorf("after restart, %s says %+v %v; want DLQ at version %d", srv.Name, again, err, s.Version)
		}
	}
	if again, err := st.DeadLetters.Get(ctx, row.LastTransitionKey); err != nil || again.ExecutionID != sub.ExecutionID {
		t.Errorf("after restart, dead-letter record %+v %v", again, err)
	}
	if n, err := st.QueueDepth(ctx, st.DLQURL()); err != nil || n != 0 {
		t.Errorf("DLQ queue holds %d messages (%v), want its envelope consumed", n, err)
	}
}

// awaitRecord waits for the dead-letter record with id.
func awaitRecord(t *testing.T, st *crashtest.Stack, id string, within time.Duration) deadletter.Record {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		rec, err := st.DeadLetters.Get(context.Background(), id)
		if err == nil {
			return rec
		}
		if !errors.Is(err, deadletter.ErrNotFound) || time.Now().After(deadline) {
			t.Fatalf("dead-letter record %s: %v", id, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestGatePoisonWorkItem: a work item whose step crashes its worker every
// time (diag.drill crashAttempts, diag.allow-crash on) on a work queue
// with maxReceiveCount 2. The one instance is restarted each time it
// exits. The queue's redrive policy moves the message to the poison
// queue, where serve's dead-letter consumer records it (a KindPoison
// record naming the execution); the execution itself is not lost: the
// sweeper dispatches it again, takeovers use up its attempts, and it ends
// DLQ with code worker_lost (or SUCCEEDED), visible through the API.
func TestGatePoisonWorkItem(t *testing.T) {
	t.Parallel()
	const maxReceives = 2
	st := crashtest.NewStack(t, crashtest.WithQueues(func(n schema.Names) []schema.Queue {
		return []schema.Queue{
			{Name: n.PoisonQueue, VisibilityTimeout: 5 * time.Second, Retention: time.Hour},
			{Name: n.DLQQueue, VisibilityTimeout: 5 * time.Second, Retention: time.Hour},
			{Name: n.RejectQueue, VisibilityTimeout: 5 * time.Second, Retention: time.Hour},
			{Name: n.WorkQueue, VisibilityTimeout: 5 * time.Second, Retention: time.Hour, RedriveTo: n.PoisonQueue, MaxReceiveCount: maxReceives},
		}
	}))
	// A 5 s visibility, longer than the lease and the clock tolerance
	// (1.5 s + 2 s), as a deployment's is: the crashed message comes back
	// once the dead worker's lease has lapsed, so the next worker takes it
	// over (and crashes) rather than deferring it, which would hand it back
	// as a fresh message with its receive count reset. Against an 8 s sweep
	// grace, the crashed message is delivered again (towards the poison
	// queue) before the sweeper dispatches a fresh one.
	env := st.Env(crashtest.GateTimings, crashtest.Settings{
		"diag.allow-crash": "true", "sqs.visibility-timeout": "5s", "sweep-grace": "8s",
	})
	sup := supervise(t, env, 12)
	sub := mustSubmit(t, sup.addr(), crashtest.DrillID, "poison-1", `{"crashAttempts":99,"echo":"poison"}`)
	ctx := context.Background()
	row, ok := st.AwaitRow(ctx, sub.ExecutionID, 90*time.Second, func(e store.Execution) bool {
		return e.Status == store.Succeeded || e.Status == store.DLQ
	})
	if !ok {
		t.Fatalf("execution not terminal after 90 s: %+v (error %+v); %d restarts", row, row.Error, sup.restarts())
	}
	var poison *deadletter.Record
	deadline := time.Now().Add(30 * time.Second)
	for poison == nil {
		recs, err := st.DeadLetterRecords(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := range recs {
			if recs[i].Kind == deadletter.KindPoison && recs[i].ExecutionID == sub.ExecutionID {
				poison = &recs[i]
			}
		}
		if poison == nil && time.Now().After(deadline) {
			t.Fatalf("no poison record for %s (records: %+v)", sub.ExecutionID, recs)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if poison.ReceiveCount <= maxReceives || !strings.HasPrefix(poison.ID, "poison:") {
		t.Errorf("poison record %+v: want a receive count above %d", poison, maxReceives)
	}
	s := awaitStatus(t, sup.addr(), sub.ExecutionID, 30*time.Second)
	switch s.Status {
	case "DLQ":
		if s.Error == nil || s.Error.Code != "worker_lost" {
			t.Errorf("DLQ with error %+v, want worker_lost", s.Error)
		}
		awaitRecord(t, st, row.LastTransitionKey, 20*time.Second)
	case "SUCCEEDED":
	default:
		t.Errorf("status %s", s.Status)
	}
	t.Logf("%s after %d worker crashes (restarts); poison record %s with receive count %d", s.Status, sup.restarts(), poison.ID, poison.ReceiveCount)
	if sup.restarts() < maxReceives {
		t.Errorf("%d crashes, want at least %d", sup.restarts(), maxReceives)
	}
}

// supervisor keeps one serve instance running, starting a new one
// whenever it exits, at most limit times.
type supervisor struct {
	mu      sync.Mutex
	cur     *crashtest.Server
	started int
}

func supervise(t *testing.T, env []string, limit int) *supervisor {
	t.Helper()
	dir := t.TempDir()
	sup := &supervisor{}
	first, err := crashtest.StartServer(env, dir, "serve-0")
	if err != nil {
		t.Fatal(err)
	}
	sup.cur = first
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			sup.mu.Lock()
			cur := sup.cur
			sup.mu.Unlock()
			select {
			case <-stop:
				return
			case <-cur.Done():
			}
			sup.mu.Lock()
			if sup.started >= limit {
				sup.mu.Unlock()
				return
			}
			sup.started++
			n := sup.started
			sup.mu.Unlock()
			next, err := crashtest.StartServer(env, dir, fmt.Sprintf("serve-%d", n))
			if err != nil {
				t.Errorf("restart %d: %v", n, err)
				return
			}
			sup.mu.Lock()
			sup.cur = next
			sup.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-done
		sup.mu.Lock()
		defer sup.mu.Unlock()
		_ = sup.cur.Kill()
		if t.Failed() {
			t.Logf("last lines of %s:\n%s", sup.cur.Name, sup.cur.Tail(40))
		}
	})
	return sup
}

func (s *supervisor) addr() string {
	deadline := time.Now().Add(30 * time.Second)
	for {
		s.mu.Lock()
		cur := s.cur
		s.mu.Unlock()
		if !cur.Exited() || time.Now().After(deadline) {
			return cur.Addr
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *supervisor) restarts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started
}
