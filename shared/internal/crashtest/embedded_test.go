package crashtest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/crashtest"
	"github.com/qasync/qasync/shared/internal/embedded"
	"github.com/qasync/qasync/shared/store"
)

// The embedded store under real processes: `qasync serve` on a data
// directory, SIGKILLed at the worst moments and started again on the same
// directory. These tests need no local AWS stack.

// embeddedTimings log the events the checks read (lease_claimed,
// transition_committed) and keep the sweeper out of the way unless a
// test wants it: every recovery below comes from the store itself.
var embeddedTimings = crashtest.Settings{"log-level": "info", "lease-ms": "3000", "sweep-grace": "10s"}

// dirServer runs `qasync serve` generations on one data directory; every
// generation's log stays in logs.
type dirServer struct {
	t    *testing.T
	dir  string
	logs string
	env  []string
	gen  int
	cur  *crashtest.Server
}

func newDirServer(t *testing.T, settings ...crashtest.Settings) *dirServer {
	d := &dirServer{t: t, dir: t.TempDir(), logs: t.TempDir()}
	d.env = crashtest.EmbeddedEnv(d.dir, append([]crashtest.Settings{embeddedTimings}, settings...)...)
	d.start()
	t.Cleanup(func() {
		if d.cur != nil {
			_ = d.cur.Kill()
		}
		if t.Failed() {
			t.Logf("logs of every generation in %s", d.logs)
		}
	})
	return d
}

// start starts the next generation.
func (d *dirServer) start() {
	d.t.Helper()
	d.gen++
	s, err := crashtest.StartServer(d.env, d.logs, fmt.Sprintf("gen%d", d.gen))
	if err != nil {
		d.t.Fatal(err)
	}
	d.cur = s
}

// kill SIGKILLs the current generation.
func (d *dirServer) kill() {
	d.t.Helper()
	if err := d.cur.Kill(); err != nil {
		d.t.Fatal(err)
	}
}

// stop ends the current generation gracefully.
func (d *dirServer) stop() {
	d.t.Helper()
	if err := d.cur.Stop(30 * time.Second); err != nil {
		d.t.Fatal(err)
	}
	d.cur = nil
}

// events reads the logs of every generation.
func (d *dirServer) events() []crashtest.Event {
	d.t.Helper()
	paths, _ := filepath.Glob(filepath.Join(d.logs, "gen*.log"))
	evs, err := crashtest.ReadEvents(paths...)
	if err != nil {
		d.t.Fatal(err)
	}
	return evs
}

// noDuplicateCommits fails the test if a transition key was committed
// twice across every generation's log (see RunChaos for why this check is
// sound: a kill can lose a log line, never write one twice).
func (d *dirServer) noDuplicateCommits() int {
	d.t.Helper()
	evs := d.events()
	for k, n := range crashtest.DuplicateCommits(evs) {
		d.t.Errorf("transition %s committed %d times", k, n)
	}
	return len(crashtest.Filter(evs, "transition_committed", ""))
}

// rows opens the stopped store and returns every execution of tenant
// "default", newest first.
func (d *dirServer) rows() []store.Execution {
	d.t.Helper()
	db, err := embedded.Open(d.dir, embedded.Options{NoControl: true})
	if err != nil {
		d.t.Fatal(err)
	}
	defer db.Close()
	var out []store.Execution
	q := store.ListQuery{TenantID: "default", Limit: store.MaxListLimit}
	for {
		page, err := db.State(nil).List(context.Background(), q)
		if err != nil {
			d.t.Fatal(err)
		}
		out = append(out, page.Executions...)
		if page.Cursor == "" {
			return out
		}
		q.Cursor = page.Cursor
	}
}

// waitTerminal polls until every id is terminal and returns their
// statuses.
func waitTerminal(t *testing.T, addr string, ids []string, within time.Duration) map[string]crashtest.Status {
	t.Helper()
	out := map[string]crashtest.Status{}
	deadline := time.Now().Add(within)
	for pending := ids; len(pending) > 0; {
		var still []string
		for _, id := range pending {
			s, err := crashtest.GetStatus(addr, id)
			if err != nil || !crashtest.Terminal(s.Status) {
				still = append(still, id)
				continue
			}
			out[id] = s
		}
		pending = still
		if len(pending) > 0 {
			if time.Now().After(deadline) {
				s, _ := crashtest.GetStatus(addr, pending[0])
				t.Fatalf("%d of %d executions not terminal after %s (e.g. %s: %+v)", len(pending), len(ids), within, pending[0], s)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return out
}

func drill(t *testing.T, d crashtest.Drill) []byte {
	t.Helper()
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestEmbeddedKillMidStepResumes: `qasync serve` SIGKILLed while a step
// runs; the next process on the same directory breaks the dead worker's
// lease at open (the lock proves it dead) and runs the step again as a
// takeover, at once rather than after the lease and the sweeper's grace:
// the execution succeeds on attempt 2, the killed attempt never committed.
// The lease is ten minutes, so that "at once" is told by the history's
// own times (the takeover inside the killed attempt's lease), not by how
// fast the machine restarts a process.
func TestEmbeddedKillMidStepResumes(t *testing.T) {
	t.Parallel()
	const lease = 10 * time.Minute
	srv := newDirServer(t, crashtest.Settings{"lease-ms": strconv.FormatInt(lease.Milliseconds(), 10)})
	code, sub, err := crashtest.Submit(srv.cur.Addr, crashtest.DrillID, "mid-step", drill(t, crashtest.Drill{SleepMs: 3000, Echo: json.RawMessage(`"kept"`)}))
	if err != nil || code != http.StatusAccepted {
		t.Fatalf("submit: %d %v", code, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := crashtest.GetStatus(srv.cur.Addr, sub.ExecutionID)
		if err == nil && s.Status == "RUNNING" && s.StepName == crashtest.DrillStepWork {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never RUNNING in work: %+v %v", s, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	srv.kill()
	srv.start()
	st := waitTerminal(t, srv.cur.Addr, []string{sub.ExecutionID}, 2*time.Minute)[sub.ExecutionID]
	if st.Status != "SUCCEEDED" {
		t.Fatalf("after the restart: %+v", st)
	}
	code, body, err := crashtest.GetResult(srv.cur.Addr, sub.ExecutionID)
	var res crashtest.DrillResult
	if err != nil || code != http.StatusOK || json.Unmarshal(body, &res) != nil || res.WorkAttempt != 2 || string(res.Echo) != `"kept"` {
		t.Fatalf("result %d %s %v, want work on attempt 2 and the echo", code, body, err)
	}
	// The history tells the takeover as it happened: one LEASE_TAKEN_OVER
	// by the new process, naming the dead worker and no invented expiry.
	cl, err := client.New("http://" + srv.cur.Addr)
	if err != nil {
		t.Fatal(err)
	}
	h, err := cl.History(context.Background(), sub.ExecutionID)
	if err != nil {
		t.Fatal(err)
	}
	takeovers := 0
	var killedStart time.Time // the killed attempt's STEP_STARTED in work
	for _, ev := range h.Events {
		if ev.Type == history.StepStarted && ev.StepName == crashtest.DrillStepWork && ev.Attempt == 1 {
			killedStart = ev.At
		}
		if ev.Type == history.LeaseTakenOver {
			takeovers++
			if ev.Attempt != 2 || !strings.HasPrefix(ev.Reason, "the lease of ") || strings.Contains(ev.Reason, " at ") {
				t.Errorf("takeover event %+v: want attempt 2, the dead worker named, no expiry time", ev)
			}
			// The lease was broken at open: the step ran again at once,
			// not after the lease lapsed.
			if killedStart.IsZero() || !ev.At.Before(killedStart.Add(lease)) {
				t.Errorf("takeover at %v, the killed attempt started at %v: the dead worker's lease (%v) was waited out", ev.At, killedStart, lease)
			}
		}
	}
	if takeovers != 1 {
		t.Errorf("history %+v: %d takeovers, want 1", h.Events, takeovers)
	}
	srv.stop()
	srv.noDuplicateCommits()
	for _, e := range crashtest.Filter(srv.events(), "transition_committed", sub.ExecutionID) {
		if strings.HasSuffix(e.Str("transition_key"), ":1:1") {
			t.Errorf("the killed attempt of work committed: %s", e.Str("transition_key"))
		}
	}
}

// TestEmbeddedKillMidSubmitBurst: `qasync serve` SIGKILLed in the middle
// of a burst of submits from 16 clients; every submit that was
// acknowledged (202) is in the store after the restart and completes, an
// unacknowledged one either never happened or resolves to its one
// execution when sent again with its key, each key is one execution, and
// no transition is committed twice.
func TestEmbeddedKillMidSubmitBurst(t *testing.T) {
	t.Parallel()
	srv := newDirServer(t)
	const n, clients, killAt = 600, 16, 150
	acked := make([]string, n)
	var mu sync.Mutex
	ackedCount := 0
	killed := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	next := make(chan int)
	go func() {
		defer close(next)
		for i := range n {
			select {
			case next <- i:
			case <-killed:
				return
			}
		}
	}()
	addr := srv.cur.Addr
	for range clients {
		wg.Go(func() {
			for i := range next {
				code, sub, err := crashtest.Submit(addr, crashtest.DrillID, fmt.Sprint("burst-", i), drill(t, crashtest.Drill{Echo: json.RawMessage(fmt.Sprint(i))}))
				if err != nil || code != http.StatusAccepted {
					continue // lost with the process: not acknowledged
				}
				mu.Lock()
				acked[i] = sub.ExecutionID
				ackedCount++
				if ackedCount == killAt {
					once.Do(func() { srv.kill(); close(killed) })
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if ackedCount < killAt {
		t.Fatalf("only %d submits acknowledged", ackedCount)
	}
	srv.start()
	var ids []string
	for i, id := range acked {
		if id == "" {
			continue
		}
		ids = append(ids, id)
		if _, err := crashtest.GetStatus(srv.cur.Addr, id); err != nil {
			t.Errorf("acknowledged submit %d (%s) lost: %v", i, id, err)
		}
	}
	// Send the unacknowledged ones again: each is created now or was
	// created by the killed process; either way one execution per key.
	for i, id := range acked {
		if id != "" {
			continue
		}
		code, sub, err := crashtest.Submit(srv.cur.Addr, crashtest.DrillID, fmt.Sprint("burst-", i), drill(t, crashtest.Drill{Echo: json.RawMessage(fmt.Sprint(i))}))
		if err != nil || (code != http.StatusAccepted && code != http.StatusOK) {
			t.Fatalf("resubmit %d: %d %v", i, code, err)
		}
		acked[i] = sub.ExecutionID
		ids = append(ids, sub.ExecutionID)
	}
	for id, s := range waitTerminal(t, srv.cur.Addr, ids, time.Minute) {
		if s.Status != "SUCCEEDED" {
			t.Errorf("execution %s ended %s", id, s.Status)
		}
	}
	srv.stop()
	commits := srv.noDuplicateCommits()
	rows := srv.rows()
	if len(rows) != n {
		t.Errorf("the store holds %d executions for %d keys", len(rows), n)
	}
	t.Logf("%d of %d submits acknowledged before the kill; %d executions, %d commits logged", killAt, n, len(rows), commits)
}

// TestEmbeddedKillBetweenCommitAndHandOver: with one step per work item
// (chain.max-steps=1: every step's commit hands the next step over
// through the queue) and the sweeper's grace at an hour (it rescues
// nothing during the test), `qasync serve` is SIGKILLed five times at
// random moments of a burst, restarted each time. Every execution still
// completes: a commit and its hand-over are one write of the embedded
// store, so no kill can keep one and lose the other; and no transition is
// committed twice.
func TestEmbeddedKillBetweenCommitAndHandOver(t *testing.T) {
	t.Parallel()
	srv := newDirServer(t, crashtest.Settings{"chain.max-steps": "1", "sweep-grace": "1h"})
	const n = 300
	ids := make([]string, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			code, sub, err := crashtest.Submit(srv.cur.Addr, crashtest.DrillID, fmt.Sprint("handover-", i), drill(t, crashtest.Drill{SleepMs: 25, Echo: json.RawMessage(fmt.Sprint(i))}))
			if err != nil || code != http.StatusAccepted {
				t.Errorf("submit %d: %d %v", i, code, err)
				return
			}
			ids[i] = sub.ExecutionID
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for range 5 {
		time.Sleep(time.Duration(100+rng.IntN(400)) * time.Millisecond)
		srv.kill()
		srv.start()
	}
	for id, s := range waitTerminal(t, srv.cur.Addr, ids, time.Minute) {
		if s.Status != "SUCCEEDED" {
			t.Errorf("execution %s ended %s", id, s.Status)
		}
	}
	srv.stop()
	commits := srv.noDuplicateCommits()
	redispatched := 0
	for _, e := range crashtest.Filter(srv.events(), "sweep_completed", "") {
		redispatched += e.Int("redispatched")
	}
	if redispatched != 0 {
		t.Errorf("the sweeper re-dispatched %d executions: a hand-over was lost", redispatched)
	}
	// Each restart found work the killed process had queued or was
	// running: the kills fell in the middle of the run.
	queued, broken := 0, 0
	for _, e := range crashtest.Filter(srv.events(), "embedded_store_opened", "") {
		queued += e.Int("queued")
		broken += e.Int("leases_broken")
	}
	if queued == 0 {
		t.Errorf("no restart found queued work: the kills missed the run")
	}
	t.Logf("%d executions across 6 processes (5 SIGKILLs; the restarts found %d queued items and broke %d leases), %d commits logged, none twice, none re-dispatched",
		n, queued, broken, commits)
}

// TestEmbeddedChaos: the chaos run (RunChaos: its inputs, its killer, its
// faults and its invariant checker) on one `qasync serve` over the
// embedded store instead of two over DynamoDB and SQS. The CHAOS_*
// variables change its profile as they do TestChaos's (make
// chaos-embedded runs 1000 executions).
func TestEmbeddedChaos(t *testing.T) {
	t.Parallel()
	opts, err := crashtest.ChaosOptionsFromEnv(crashtest.ChaosOptions{Embedded: true, Executions: 60, KillEvery: 3 * time.Second, MinKills: 3})
	if err != nil {
		t.Fatal(err)
	}
	opts.Embedded = true
	rep := crashtest.RunChaos(t, opts)
	t.Log("\n" + rep.Table())
	for _, v := range rep.Violations {
		t.Error(v)
	}
}

// TestEmbeddedSecondServeRefused: a second `qasync serve` on a data
// directory in use exits at once with status 2 and an error naming the
// directory, the process holding it and the key to change.
func TestEmbeddedSecondServeRefused(t *testing.T) {
	t.Parallel()
	srv := newDirServer(t)
	bin, err := crashtest.Binary()
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := crashtest.FreeAddr()
	cmd := exec.Command(bin, "serve", "--addr", addr)
	cmd.Env = srv.env
	out, err := cmd.CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 2 {
		t.Fatalf("second serve: %v, want exit status 2\n%s", err, out)
	}
	for _, want := range []string{srv.dir, "locked by another qasync process (pid " + fmt.Sprint(srv.cur.PID()), "pipeline.orchestrator.embedded.data-dir"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("second serve's error lacks %q:\n%s", want, out)
		}
	}
}

// TestEmbeddedRestartKeepsEverything: the curl walk-through (docs/http-api.md) across a
// restart: an execution submitted, the server stopped and started again,
// and the execution, its result and a duplicate submit's answer are the
// same; `qasync backup` while the server runs writes a copy that opens as
// a store holding it.
func TestEmbeddedRestartKeepsEverything(t *testing.T) {
	t.Parallel()
	srv := newDirServer(t)
	body := drill(t, crashtest.Drill{Echo: json.RawMessage(`"restart me"`)})
	_, sub, err := crashtest.Submit(srv.cur.Addr, crashtest.DrillID, "walk-1", body)
	if err != nil {
		t.Fatal(err)
	}
	before := waitTerminal(t, srv.cur.Addr, []string{sub.ExecutionID}, 10*time.Second)[sub.ExecutionID]
	_, resBefore, _ := crashtest.GetResult(srv.cur.Addr, sub.ExecutionID)

	bin, _ := crashtest.Binary()
	copyPath := filepath.Join(t.TempDir(), "backup.db")
	out, err := exec.Command(bin, "backup", "--to", copyPath, "--data-dir", srv.dir).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "copied by the running server") {
		t.Fatalf("qasync backup while serving: %v\n%s", err, out)
	}

	srv.stop()
	srv.start()
	after, err := crashtest.GetStatus(srv.cur.Addr, sub.ExecutionID)
	if err != nil || after.Status != "SUCCEEDED" || after.Version != before.Version {
		t.Fatalf("after the restart: %+v %v, before %+v", after, err, before)
	}
	code, resAfter, err := crashtest.GetResult(srv.cur.Addr, sub.ExecutionID)
	if err != nil || code != http.StatusOK || string(resAfter) != string(resBefore) {
		t.Fatalf("result after the restart: %d %s %v, before %s", code, resAfter, err, resBefore)
	}
	code, dup, err := crashtest.Submit(srv.cur.Addr, crashtest.DrillID, "walk-1", body)
	if err != nil || code != http.StatusOK || !dup.Duplicate || dup.ExecutionID != sub.ExecutionID {
		t.Fatalf("duplicate after the restart: %d %+v %v", code, dup, err)
	}
	srv.stop()

	restored := t.TempDir()
	data, err := os.ReadFile(copyPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(restored, embedded.FileName), data, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := embedded.Open(restored, embedded.Options{NoControl: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if e, err := db.State(nil).Get(context.Background(), store.Key{TenantID: "default", ExecutionID: sub.ExecutionID}); err != nil || e.Status != store.Succeeded {
		t.Fatalf("the backup's copy of the execution: %+v %v", e, err)
	}
}
