package crashtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/wiring"
	"github.com/qasync/qasync/shared/store"
)

// ChaosOptions configure RunChaos. Zero fields take the defaults of the
// short profile that `make test` runs.
type ChaosOptions struct {
	// Executions is how many executions are submitted (M). Default 60.
	Executions int
	// Workers is how many `qasync serve` processes share the tables and
	// queues (K). Default 2.
	Workers int
	// KillEvery is the mean time between two kills (each wait is drawn
	// from 0.5x to 1.5x). Default 3s.
	KillEvery time.Duration
	// MinKills keeps the killer going after the last submit until it has
	// killed this many workers. Default 0.
	MinKills int
	// Seed seeds the inputs and the killer's choices (printed, so a run's
	// inputs can be repeated). Default: from the clock.
	Seed uint64
	// SubmitRate is how many executions are submitted per second. Default 4.
	SubmitRate float64
	// DynamoErrorRate, DuplicateRate and DropRate are the workers' fault
	// settings (faults.*). Defaults 0.02, 0.05 and 0.05; a negative value
	// turns a fault off.
	DynamoErrorRate, DuplicateRate, DropRate float64
	// CommitErrorRate is the workers' faults.commit-error-rate: step
	// commits failed as unavailable, half of them after they landed.
	// Default 0.05; negative: off.
	CommitErrorRate float64
	// DLQOutage is how long, from the first submit, every dead-letter
	// publish fails (faults.dlq-outage-until-ms): dead letters get stuck
	// while work items are dropped. Default a third of the submit period;
	// negative: none.
	DLQOutage time.Duration
	// ClockSkew bounds each worker's clock offset (faults.clock-offset-ms,
	// drawn from -ClockSkew..ClockSkew); it must stay within the
	// runtime's clock-skew tolerance (2 s). Default 1.5s; negative: none.
	ClockSkew time.Duration
	// NoRollingDeploy turns off the rolling deploy: half-way through the
	// submits, half the worker slots restart serving version 2 of
	// diag.drill only (diag.drill-versions=2), the others keep version 1.
	NoRollingDeploy bool
	// QuiesceTimeout bounds the wait for every execution to be terminal
	// after the last submit and the last kill. Default 3m.
	QuiesceTimeout time.Duration
	// LogDir receives each process's log (w<slot>-<generation>.log).
	// Default: a temporary directory of the test.
	LogDir string
	// Embedded runs the processes on the embedded store (one data
	// directory) instead of fresh DynamoDB tables and SQS queues. One
	// process holds a directory, so Workers is 1 (the killer kills and
	// restarts it), and what needs several processes or AWS is off: the
	// DynamoDB faults, clock skew between workers and the rolling deploy.
	// The checks are the same; the rows are read through the API while the
	// process runs and from the file once it stopped.
	Embedded bool
}

func (o *ChaosOptions) defaults(t testing.TB) {
	if o.Embedded {
		o.Workers, o.DynamoErrorRate, o.ClockSkew, o.NoRollingDeploy = 1, -1, -1, true
	}
	if o.Executions <= 0 {
		o.Executions = 60
	}
	if o.Workers <= 0 {
		o.Workers = 2
	}
	if o.KillEvery <= 0 {
		o.KillEvery = 3 * time.Second
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	if o.SubmitRate <= 0 {
		o.SubmitRate = 4
	}
	rate := func(p *float64, def float64) {
		switch {
		case *p == 0:
			*p = def
		case *p < 0:
			*p = 0
		}
	}
	rate(&o.DynamoErrorRate, 0.02)
	rate(&o.DuplicateRate, 0.05)
	rate(&o.DropRate, 0.05)
	rate(&o.CommitErrorRate, 0.05)
	span := func(p *time.Duration, def time.Duration) {
		switch {
		case *p == 0:
			*p = def
		case *p < 0:
			*p = 0
		}
	}
	span(&o.DLQOutage, time.Duration(float64(o.Executions)/o.SubmitRate*float64(time.Second))/3)
	span(&o.ClockSkew, 1500*time.Millisecond)
	if o.QuiesceTimeout <= 0 {
		o.QuiesceTimeout = 3 * time.Minute
	}
	if o.LogDir == "" {
		o.LogDir = t.TempDir()
	}
}

// Chaos timings: like the gate's, with a 2 s lease and a 4 s visibility
// so that a loaded two-core machine does not lose leases to scheduling
// alone, 3 retries 0.5 s apart (doubling, at most 4 s), and a 1 KiB
// inline budget so that larger drill results are stored as chunks.
var chaosTimings = Settings{
	"lease-ms": "2000", "sweep-interval": "1s", "sweep-grace": "2s",
	"max-retries": "3", "retry-delay": "500ms", "retry-multiplier": "2", "retry-max-delay": "4s",
	"sqs.wait-seconds": "1", "sqs.visibility-timeout": "4s", "worker-concurrency": "8",
	"payload.inline-budget-bytes": "1024", "log-level": "info", "clock-skew-tolerance": "2s",
}

// chaosMaxAttempts is max-retries + 1 of chaosTimings.
const chaosMaxAttempts = 4

// Report is what a chaos run did and found. Counts of faults, takeovers
// and re-dispatches come from the processes' logs (killed ones included).
type Report struct {
	// Seed seeded the inputs (CHAOS_SEED repeats them).
	Seed uint64
	// Executions is how many were submitted.
	Executions int
	// Drills and Checkouts split Executions by pipeline.
	Drills, Checkouts int
	// Workers is the number of worker slots (K).
	Workers int
	// Kills counts SIGKILLs (each followed by a restart).
	Kills int
	// SubmitRetries counts submits sent again (same key) after a worker
	// died under them or answered 5xx.
	SubmitRetries int
	// Outcomes counts executions by final status and reason
	// ("SUCCEEDED", "DLQ retry_exhausted", "DLQ worker_lost", ...).
	Outcomes map[string]int
	// DuplicatedItems and DroppedItems count injected dispatch faults.
	DuplicatedItems, DroppedItems int
	// DynamoFaults counts injected DynamoDB attempt failures.
	DynamoFaults int
	// CommitFaultsBefore and CommitFaultsAfter count injected commit
	// failures (before the write; after it landed); CommitsResolved counts
	// commits whose unknown outcome was resolved by reading the row back.
	CommitFaultsBefore, CommitFaultsAfter, CommitsResolved int
	// DLQFaults counts failed dead-letter publishes (the outage).
	DLQFaults int
	// ClockOffsets lists each worker slot's clock offset.
	ClockOffsets []time.Duration
	// RolledSlots is how many worker slots the rolling deploy switched
	// to diag.drill version 2 (0: no rolling deploy).
	RolledSlots int
	// Versions counts drill executions by the definition they were bound to.
	Versions map[string]int
	// VersionDeferrals counts work items a worker left because it did not
	// serve the execution's definition.
	VersionDeferrals int
	// LeaseTakeovers counts claims of an expired lease (lease_claimed
	// with takeover=true); LeaseLost counts lease_lost events.
	LeaseTakeovers, LeaseLost int
	// SweepRedispatches and SweepDLQPublishes sum the sweeps' counts.
	SweepRedispatches, SweepDLQPublishes int
	// Transitions counts transition_committed events.
	Transitions int
	// MaxAttempt is the highest attempt claimed or recorded.
	MaxAttempt int
	// DeadLetterRecords and PoisonRecords count the dead-letter table's
	// records by kind.
	DeadLetterRecords, PoisonRecords int
	// StaleWorkItemsLeft counts work items still queued after the run
	// (duplicates and late redeliveries for finished executions).
	StaleWorkItemsLeft int
	// Quiesce is the time from the last submit (and kill) until every
	// execution was terminal; Total is the whole run.
	Quiesce, Total time.Duration
	// Violations lists every broken invariant; a good run has none.
	Violations []string
}

// Table renders the report as one Markdown table.
func (r Report) Table() string {
	var b strings.Builder
	row := func(k string, v any) { fmt.Fprintf(&b, "| %s | %v |\n", k, v) }
	b.WriteString("| chaos run | |\n|---|---|\n")
	row("seed (CHAOS_SEED)", r.Seed)
	row("executions (diag.drill / checkout)", fmt.Sprintf("%d (%d / %d)", r.Executions, r.Drills, r.Checkouts))
	var outs []string
	for _, k := range slices.Sorted(mapKeys(r.Outcomes)) {
		outs = append(outs, fmt.Sprintf("%s %d", k, r.Outcomes[k]))
	}
	row("outcomes", strings.Join(outs, ", "))
	row("worker processes", r.Workers)
	row("kills (SIGKILL, restarted)", r.Kills)
	row("submits retried after a kill or 5xx", r.SubmitRetries)
	row("work items duplicated (injected)", r.DuplicatedItems)
	row("work items dropped (injected)", r.DroppedItems)
	row("DynamoDB faults injected (throttle / 500)", r.DynamoFaults)
	row("commit faults injected (before / after the write)", fmt.Sprintf("%d / %d", r.CommitFaultsBefore, r.CommitFaultsAfter))
	row("commits resolved by reading the row back", r.CommitsResolved)
	row("dead-letter publishes failed (DLQ outage)", r.DLQFaults)
	row("worker clock offsets", fmt.Sprint(r.ClockOffsets))
	row("rolling deploy: slots switched to diag.drill v2", r.RolledSlots)
	var vs []string
	for _, k := range slices.Sorted(mapKeys(r.Versions)) {
		vs = append(vs, fmt.Sprintf("%s %d", k, r.Versions[k]))
	}
	row("drill executions by definition", strings.Join(vs, ", "))
	row("work items left for a worker of their definition", r.VersionDeferrals)
	row("lease takeovers", r.LeaseTakeovers)
	row("leases lost (step or commit refused)", r.LeaseLost)
	row("sweeper re-dispatches", r.SweepRedispatches)
	row("sweeper dead-letter publishes", r.SweepDLQPublishes)
	row("transitions committed", r.Transitions)
	row("max attempts seen", r.MaxAttempt)
	row("dead-letter records (execution / poison)", fmt.Sprintf("%d / %d", r.DeadLetterRecords, r.PoisonRecords))
	row("stale work items left in the queue", r.StaleWorkItemsLeft)
	row("time to quiesce", r.Quiesce.Round(100*time.Millisecond))
	row("total time", r.Total.Round(100*time.Millisecond))
	row("invariant violations", len(r.Violations))
	return b.String()
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// job is one submitted execution and what a crash-free run says of it.
type job struct {
	i          int
	pipelineID string
	key        string
	body       []byte
	// expected outcome
	status     string // SUCCEEDED or DLQ
	reason     string // terminal reason when DLQ
	code       string // error code when DLQ
	minAttempt int    // drill: workAttempt at least this
	result     []byte // the reference's result: checkout's exact bytes; the drill's echo and data
	// what happened
	id  string
	row store.Execution
}

// RunChaos runs the chaos scenario and returns its report; a test fails
// on any report violation. It provisions fresh tables and queues, starts
// opts.Workers `qasync serve` processes with fault injection on
// (DynamoDB throttling and 500s, duplicated and dropped work items),
// submits opts.Executions executions of diag.drill (random sleeps,
// results, echo and failure scripts) and checkout.deliver-order (some
// invalid) at opts.SubmitRate through random workers, while a killer
// SIGKILLs a random worker every ~opts.KillEvery and restarts it. Then it
// waits until every execution is terminal and checks:
//
//   - every execution reached the status its input dictates: SUCCEEDED,
//     or DLQ with terminal reason retry_exhausted (failAttempts beyond
//     max-retries) or non_retryable (a non-retryable failure, an invalid
//     order). One documented exception: DLQ with code worker_lost is the
//     right outcome when takeovers (each counting the killed worker's
//     attempt) used up a step's attempts; it is accepted only with a
//     takeover logged for that execution and its attempts exhausted;
//   - none lost or stuck: each key is one execution (the execution and
//     key tables hold exactly M items), each is terminal in time;
//   - no transition committed twice: no transition key appears in two
//     transition_committed events across the logs of all processes,
//     killed ones included. This is sound because a worker logs
//     transition_committed only after its conditional commit succeeded,
//     and each transition key (executionId:step:attempt) can be committed
//     at most once if commits are exactly-once; a kill can only lose a
//     log line (the process dies before writing it), never write one
//     twice, so a key seen twice means two commits, and a missing line
//     hides nothing that could make a duplicate look unique;
//   - each result equals a crash-free run's (the same input run by a
//     reference `qasync serve` on the memory providers, without faults or
//     kills; see crashFree): checkout's JSON byte for byte, the drill's
//     echo and data exactly and workAttempt at least failAttempts+1;
//   - a drill's result names exactly the steps of the definition its
//     execution was bound to (as the reference processes serving each
//     definition report them): no step of another definition ran;
//   - no execution ends with an error code only the runtime causes
//     (runtimeCaused): a version nobody serves, a release limit, an
//     unstorable output, an unreadable payload;
//   - every DLQ execution has exactly one dead-letter record of kind
//     execution, whose ID is its last transition key, and no other
//     execution has one; the DLQ queue is drained by serve's consumer.
func RunChaos(t testing.TB, opts ChaosOptions) Report {
	t.Helper()
	opts.defaults(t)
	start := time.Now()
	rep := Report{Seed: opts.Seed, Executions: opts.Executions, Workers: opts.Workers, Outcomes: map[string]int{}, Versions: map[string]int{}}
	var vmu sync.Mutex
	violate := func(format string, args ...any) {
		vmu.Lock()
		defer vmu.Unlock()
		rep.Violations = append(rep.Violations, fmt.Sprintf(format, args...))
	}
	t.Logf("chaos: seed %d (CHAOS_SEED=%d repeats these inputs), %d executions, %d workers, a kill every ~%s, faults: DynamoDB %.3f, duplicate %.3f, drop %.3f, commit %.3f, DLQ outage %s, clock skew up to %s, rolling deploy %v; logs in %s",
		opts.Seed, opts.Seed, opts.Executions, opts.Workers, opts.KillEvery, opts.DynamoErrorRate, opts.DuplicateRate, opts.DropRate,
		opts.CommitErrorRate, opts.DLQOutage, opts.ClockSkew, !opts.NoRollingDeploy, opts.LogDir)

	var st chaosStore
	if opts.Embedded {
		st = embeddedStore{dir: t.TempDir()}
	} else {
		st = stackStore{NewStack(t)}
	}
	// The expectations first: the reference runs must not eat into the
	// DLQ outage, which is counted from here.
	jobs, err := chaosJobs(opts.Seed, opts.Executions)
	if err != nil {
		t.Fatal(err)
	}
	defs, err := crashFree(jobs, opts.LogDir)
	if err != nil {
		t.Fatal(err)
	}
	outageUntil := int64(0)
	if opts.DLQOutage > 0 {
		outageUntil = time.Now().Add(opts.DLQOutage).UnixMilli()
	}
	env := st.env(chaosTimings, Settings{
		"faults.dynamo-error-rate":       strconv.FormatFloat(opts.DynamoErrorRate, 'f', -1, 64),
		"faults.dispatch-duplicate-rate": strconv.FormatFloat(opts.DuplicateRate, 'f', -1, 64),
		"faults.dispatch-drop-rate":      strconv.FormatFloat(opts.DropRate, 'f', -1, 64),
		"faults.commit-error-rate":       strconv.FormatFloat(opts.CommitErrorRate, 'f', -1, 64),
		"faults.dlq-outage-until-ms":     strconv.FormatInt(outageUntil, 10),
	})
	for _, j := range jobs {
		if j.pipelineID == DrillID {
			rep.Drills++
		} else {
			rep.Checkouts++
		}
	}

	fl := &fleet{env: env, dir: opts.LogDir, gen: make([]int, opts.Workers), slots: make([]*Server, opts.Workers),
		extra: make([]Settings, opts.Workers)}
	skewRng := rand.New(rand.NewPCG(opts.Seed, 2))
	for i := range opts.Workers {
		off := time.Duration(0)
		if opts.ClockSkew > 0 {
			off = time.Duration((skewRng.Float64()*2 - 1) * float64(opts.ClockSkew)).Round(time.Millisecond)
		}
		rep.ClockOffsets = append(rep.ClockOffsets, off)
		fl.extra[i] = Settings{"faults.clock-offset-ms": strconv.FormatInt(off.Milliseconds(), 10), "diag.drill-versions": "1"}
	}
	t.Cleanup(fl.killAll)
	for i := range opts.Workers {
		if err := fl.restart(i); err != nil {
			t.Fatal(err)
		}
	}

	// The killer: a random worker every 0.5-1.5 x KillEvery, restarted at
	// once, until the submits are done and MinKills reached.
	var submitted atomic.Bool
	killerDone := make(chan struct{})
	var kills atomic.Int32
	go func() {
		defer close(killerDone)
		rng := rand.New(rand.NewPCG(opts.Seed, 1))
		for {
			time.Sleep(time.Duration(float64(opts.KillEvery) * (0.5 + rng.Float64())))
			if submitted.Load() && int(kills.Load()) >= opts.MinKills {
				return
			}
			i := rng.IntN(opts.Workers)
			fl.op.Lock()
			if err := fl.kill(i); err != nil {
				fl.op.Unlock()
				violate("kill worker %d: %v", i, err)
				return
			}
			kills.Add(1)
			var err error
			for range 3 {
				if err = fl.restart(i); err == nil {
					break
				}
			}
			fl.op.Unlock()
			if err != nil {
				violate("restart worker %d: %v", i, err)
				return
			}
		}
	}()

	// The submitter: opts.SubmitRate per second, 4 at a time, each to a
	// random live worker, retried with the same key elsewhere when the
	// worker dies under it.
	var retries atomic.Int32
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	tick := time.NewTicker(time.Duration(float64(time.Second) / opts.SubmitRate))
	var mu sync.Mutex
	rollAt := len(jobs) / 2
	if opts.NoRollingDeploy {
		rollAt = -1
	}
	for n, j := range jobs {
		if n == rollAt {
			// The rolling deploy: half the slots (at least one, never all
			// but... with one worker, that one) move to version 2 only.
			rep.RolledSlots = max(1, opts.Workers/2)
			for i := range rep.RolledSlots {
				if err := fl.redeploy(i, Settings{"diag.drill-versions": "2"}); err != nil {
					violate("rolling deploy of worker %d: %v", i, err)
				}
			}
		}
		<-tick.C
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			id, n, err := submitRetrying(fl, j)
			retries.Add(int32(n))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				violate("submit %d (%s): %v", j.i, j.key, err)
				return
			}
			j.id = id
		})
	}
	tick.Stop()
	wg.Wait()
	submitted.Store(true)
	<-killerDone
	rep.Kills, rep.SubmitRetries = int(kills.Load()), int(retries.Load())
	quiesceFrom := time.Now()

	// Quiescence: every execution terminal (FAILED with its dead letter
	// still pending is not).
	ctx := context.Background()
	pending := slices.DeleteFunc(slices.Clone(jobs), func(j *job) bool { return j.id == "" })
	deadline := time.Now().Add(opts.QuiesceTimeout)
	for len(pending) > 0 {
		pending = parallel(pending, 8, func(j *job) bool {
			row, err := st.row(ctx, fl, j.id)
			if err != nil {
				return true
			}
			j.row = row
			return !(row.Status == store.Succeeded || row.Status == store.DLQ || (row.Status == store.Failed && !row.DLQPending))
		})
		if len(pending) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	rep.Quiesce = time.Since(quiesceFrom)
	for _, j := range pending {
		violate("execution %d (%s) not terminal after %s: %s at step %s attempt %d", j.i, j.id, opts.QuiesceTimeout, j.row.Status, j.row.StepName, j.row.Attempt)
	}

	// Dead-letter records are written by serve's DLQ consumer after the
	// row is DLQ: wait for them, and for the DLQ queue to empty.
	recDeadline := time.Now().Add(60 * time.Second)
	for _, j := range jobs {
		if j.row.Status != store.DLQ {
			continue
		}
		for !st.recorded(ctx, j.row.LastTransitionKey) && time.Now().Before(recDeadline) {
			time.Sleep(200 * time.Millisecond)
		}
	}
	for time.Now().Before(recDeadline) {
		if n, err := st.dlqDepth(ctx); err == nil && n == 0 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}

	// Results, through the API of a live worker.
	results := map[*job][]byte{}
	var rmu sync.Mutex
	parallel(jobs, 8, func(j *job) bool {
		if j.row.Status != store.Succeeded {
			return false
		}
		var body []byte
		var err error
		for range 5 {
			var code int
			code, body, err = GetResult(fl.pick(), j.id)
			if err == nil && code == http.StatusOK {
				break
			}
			if err == nil {
				err = fmt.Errorf("HTTP %d: %s", code, body)
			}
			time.Sleep(200 * time.Millisecond)
		}
		rmu.Lock()
		defer rmu.Unlock()
		if err != nil {
			violate("result of %d (%s): %v", j.i, j.id, err)
			return false
		}
		results[j] = body
		return false
	})

	// Stop every worker gracefully, then read the logs of every process
	// that ever ran.
	fl.stopAll(func(err error) { violate("%v", err) })
	if err := st.settle(ctx, jobs); err != nil {
		violate("read the rows after the run: %v", err)
	}
	paths, _ := filepath.Glob(filepath.Join(opts.LogDir, "w*.log"))
	evs, err := ReadEvents(paths...)
	if err != nil {
		t.Fatal(err)
	}
	takeovers := map[string]int{}
	for _, e := range evs {
		switch e.Name() {
		case "fault_injected":
			switch e.Str("fault") {
			case wiring.FaultDispatchDuplicate:
				rep.DuplicatedItems++
			case wiring.FaultDispatchDrop:
				rep.DroppedItems++
			case wiring.FaultDynamoThrottle, wiring.FaultDynamo500:
				rep.DynamoFaults++
			case wiring.FaultCommitBeforeWrite:
				rep.CommitFaultsBefore++
			case wiring.FaultCommitAfterWrite:
				rep.CommitFaultsAfter++
			case wiring.FaultDLQPublish:
				rep.DLQFaults++
			}
		case "commit_outcome_resolved":
			rep.CommitsResolved++
		case "pipeline_version_unavailable":
			rep.VersionDeferrals++
		case "lease_claimed":
			if e.Bool("takeover") {
				rep.LeaseTakeovers++
				takeovers[e.Str("execution_id")]++
			}
			rep.MaxAttempt = max(rep.MaxAttempt, e.Int("attempt"))
		case "lease_lost":
			rep.LeaseLost++
		case "sweep_completed":
			rep.SweepRedispatches += e.Int("redispatched")
			rep.SweepDLQPublishes += e.Int("dead_letters_published")
		case "transition_committed":
			rep.Transitions++
		}
	}
	for k, n := range DuplicateCommits(evs) {
		violate("transition %s committed %d times", k, n)
	}

	// Outcomes and results against the crash-free expectation.
	for _, j := range jobs {
		if j.id == "" || !(j.row.Status == store.Succeeded || j.row.Status == store.DLQ || j.row.Status == store.Failed) {
			continue
		}
		rep.MaxAttempt = max(rep.MaxAttempt, j.row.Attempt)
		outcome := string(j.row.Status)
		if j.row.Error != nil && j.row.Status != store.Succeeded {
			outcome += " " + j.row.Error.TerminalReason
			if j.row.Error.Code == engine.CodeWorkerLost {
				outcome = "DLQ worker_lost"
			}
		}
		rep.Outcomes[outcome]++
		if j.pipelineID == DrillID {
			rep.Versions[defs.name(j.row.PipelineVersion)]++
		}
		checkOutcome(j, results[j], takeovers[j.id], defs, violate)
	}

	// The table: exactly one execution per submitted key (the row is its
	// own idempotency record).
	if n, err := st.countExecutions(ctx); err != nil || n != opts.Executions {
		violate("%s holds %d executions (%v), want %d", st.where(), n, err, opts.Executions)
	}
	// Dead-letter records: exactly one per DLQ execution, keyed by its
	// last transition key, none for the others.
	recs, err := st.deadLetterRecords(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]*job{}
	for _, j := range jobs {
		byID[j.id] = j
	}
	perExec := map[string][]deadletter.Record{}
	for _, r := range recs {
		switch r.Kind {
		case deadletter.KindExecution:
			rep.DeadLetterRecords++
			perExec[r.ExecutionID] = append(perExec[r.ExecutionID], r)
		case deadletter.KindPoison:
			rep.PoisonRecords++
			if j := byID[r.ExecutionID]; r.ExecutionID != "" && j == nil {
				violate("poison record %s names unknown execution %s", r.ID, r.ExecutionID)
			}
		}
	}
	for _, j := range jobs {
		got := perExec[j.id]
		switch {
		case j.row.Status == store.DLQ && len(got) != 1:
			violate("DLQ execution %d (%s) has %d dead-letter records, want 1", j.i, j.id, len(got))
		case j.row.Status == store.DLQ && (got[0].ID != j.row.LastTransitionKey || got[0].Envelope == nil ||
			got[0].Envelope.TerminalReason != j.row.Error.TerminalReason):
			violate("DLQ execution %d (%s): record %s (%+v), want id %s", j.i, j.id, got[0].ID, got[0].Envelope, j.row.LastTransitionKey)
		case j.row.Status != store.DLQ && len(got) > 0:
			violate("%s execution %d (%s) has %d dead-letter records", j.row.Status, j.i, j.id, len(got))
		}
		delete(perExec, j.id)
	}
	for id := range perExec {
		violate("dead-letter record for unknown execution %s", id)
	}
	if n, err := st.dlqDepth(ctx); err != nil || n != 0 {
		violate("DLQ queue holds %d envelopes (%v) after the run", n, err)
	}
	// The work queue may still hold duplicates and late redeliveries; each
	// must name one of the (terminal) executions.
	left, err := st.leftItems(ctx, 10*opts.Executions)
	if err != nil {
		t.Fatal(err)
	}
	rep.StaleWorkItemsLeft = len(left)
	for _, id := range left {
		if byID[id] == nil {
			violate("work item left in the queue names no known execution (%q)", id)
		}
	}
	rep.Total = time.Since(start)
	return rep
}

// checkOutcome compares an execution's end with its expectation.
func checkOutcome(j *job, result []byte, takeovers int, defs definitions, violate func(string, ...any)) {
	row := j.row
	if row.Status == store.DLQ && row.Error != nil && row.Error.Code == engine.CodeWorkerLost {
		// Kills used up a step's attempts: legitimate only after a
		// takeover, with the attempts past the limit.
		if takeovers == 0 || row.Attempt <= chaosMaxAttempts || row.Error.TerminalReason != store.ReasonRetryExhausted {
			violate("execution %d (%s) DLQ worker_lost at attempt %d with %d takeovers logged", j.i, j.id, row.Attempt, takeovers)
		}
		return
	}
	if row.Error != nil && runtimeCaused[row.Error.Code] {
		violate("execution %d (%s) ended %s with the runtime-caused code %s: %s", j.i, j.id, row.Status, row.Error.Code, row.Error.Message)
		return
	}
	if string(row.Status) != j.status {
		violate("execution %d (%s, %s) ended %s (error %+v), want %s %s", j.i, j.id, j.body, row.Status, row.Error, j.status, j.reason)
		return
	}
	if row.Status == store.DLQ {
		if row.Error == nil || row.Error.TerminalReason != j.reason || row.Error.Code != j.code {
			violate("execution %d (%s) DLQ with %+v, want %s %s", j.i, j.id, row.Error, j.code, j.reason)
		}
		return
	}
	if result == nil {
		return // already reported
	}
	if j.pipelineID == CheckoutID {
		if !bytes.Equal(result, j.result) {
			violate("checkout %d (%s): result %s, want %s", j.i, j.id, result, j.result)
		}
		return
	}
	var got, want DrillResult
	if err := json.Unmarshal(result, &got); err != nil {
		violate("drill %d (%s): result %s: %v", j.i, j.id, result, err)
		return
	}
	_ = json.Unmarshal(j.result, &want)
	if !bytes.Equal(got.Echo, want.Echo) || got.Data != want.Data || got.WorkAttempt < j.minAttempt || got.WorkAttempt > chaosMaxAttempts {
		violate("drill %d (%s): echo %s, %d data bytes, workAttempt %d; want echo %s, %d bytes, workAttempt %d..%d",
			j.i, j.id, got.Echo, len(got.Data), got.WorkAttempt, want.Echo, len(want.Data), j.minAttempt, chaosMaxAttempts)
	}
	// The steps that led to the result are exactly those of the definition
	// the execution was bound to: no step of another definition ran.
	if steps, ok := defs.steps[row.PipelineVersion]; !ok || !slices.Equal(got.Steps, steps) {
		violate("drill %d (%s) bound to %q ran steps %v, want %v", j.i, j.id, row.PipelineVersion, got.Steps, steps)
	}
}

// runtimeCaused are the error codes an execution ends with only through a
// mistake of the runtime or its deployment, never because of its input:
// none may appear in a chaos run. (worker_lost is judged apart: kills may
// legitimately use up a step's attempts.)
var runtimeCaused = map[string]bool{
	engine.CodePipelineVersionUnavailable: true, engine.CodeReleaseLimit: true,
	engine.CodeOutputUnstorable: true, engine.CodePayloadUnreadable: true,
}

// chaosJobs draws the executions from seed, each with the outcome its
// input dictates (crashFree adds the results).
func chaosJobs(seed uint64, n int) ([]*job, error) {
	rng := rand.New(rand.NewPCG(seed, 0))
	jobs := make([]*job, n)
	for i := range jobs {
		j := &job{i: i, key: fmt.Sprintf("chaos-%d-%d", seed, i), status: "SUCCEEDED"}
		if rng.Float64() < 0.55 {
			j.pipelineID = DrillID
			d := Drill{ResultBytes: rng.IntN(200)}
			switch r := rng.Float64(); {
			case r < 0.05:
				d.SleepMs = 2000 + rng.IntN(1000) // long: killed more often
			case r < 0.30:
				d.SleepMs = 300 + rng.IntN(1200)
			default:
				d.SleepMs = rng.IntN(300)
			}
			if rng.Float64() < 0.2 {
				d.ResultBytes = 1500 + rng.IntN(3500) // above the inline budget: chunked
			}
			switch rng.IntN(3) {
			case 0:
				d.Echo = json.RawMessage(strconv.Quote(fmt.Sprintf("e-%d-%x", i, rng.Uint32())))
			case 1:
				d.Echo = json.RawMessage(strconv.FormatInt(rng.Int64N(1<<53), 10))
			default:
				d.Echo = json.RawMessage(fmt.Sprintf(`{"i":%d,"tag":"t%x","list":[1,2.5,"x"]}`, i, rng.Uint32()))
			}
			workAttempt := 1
			switch r := rng.Float64(); {
			case r < 0.2: // retried, then succeeds (one attempt to spare)
				d.FailAttempts = 1 + rng.IntN(chaosMaxAttempts-2)
				workAttempt = d.FailAttempts + 1
			case r < 0.3: // every attempt fails: retries exhausted
				d.FailAttempts = 9
				j.status, j.reason, j.code = "DLQ", store.ReasonRetryExhausted, DrillCodeFailure
			case r < 0.4: // fails without retry
				d.FailAttempts, d.FailMode = 9, DrillFailModeNonRetryable
				j.status, j.reason, j.code = "DLQ", store.ReasonNonRetryable, DrillCodeFailure
			}
			j.minAttempt = workAttempt
			body, err := json.Marshal(d)
			if err != nil {
				return nil, err
			}
			j.body = body
		} else {
			j.pipelineID = CheckoutID
			o := Order{OrderID: fmt.Sprintf("o-%d-%d", seed, i), AmountCents: 1 + rng.Int64N(100000)}
			for k := range 1 + rng.IntN(3) {
				o.Items = append(o.Items, Item{SKU: fmt.Sprintf("sku-%d-%d", k, rng.IntN(1000)), Qty: 1 + rng.IntN(5)})
			}
			if rng.Float64() < 0.05 {
				o.AmountCents = 0 // invalid: dead-lettered at once
				j.status, j.reason, j.code = "DLQ", store.ReasonNonRetryable, CheckoutCodeInvalidOrder
			}
			body, err := json.Marshal(o)
			if err != nil {
				return nil, err
			}
			j.body = body
		}
		jobs[i] = j
	}
	return jobs, nil
}

// definitions are the drill's definitions as reference processes serve
// them: each pipelineVersion's steps, and its short name for the report.
type definitions struct {
	steps map[string][]string
	names map[string]string
}

// name is a definition's short name for the report ("v1 <id>").
func (d definitions) name(version string) string {
	if n, ok := d.names[version]; ok {
		return n
	}
	return version
}

// referenceSettings adjust chaosTimings for the reference processes: the
// same retry limit and inline budget, but retries 1 ms apart (a
// crash-free run need not wait) and warn-level logs.
var referenceSettings = Settings{"retry-delay": "1ms", "retry-max-delay": "10ms", "log-level": "warn"}

// crashFree computes the crash-free expectations of the jobs without
// running any pipeline in this process: reference `qasync serve`
// processes of the same binary (memory providers, no faults, no kills)
// run them. One, serving drill definition 1, runs every job once (drills
// without their sleep) under the chaos run's retry limit; its result
// becomes the job's expected result (checkout's bytes, the drill's echo
// and data), and its outcome must be the one the input dictates (status,
// terminal reason and code; the drill's work attempt), or the
// expectations themselves are wrong and the run stops. It and a second
// process, serving definition 2 only, each run a probe drill: the probe's
// result names the definition's steps, its status the pipelineVersion.
// The references log to dir (ref-v1.log, ref-v2.log) and are stopped
// before it returns.
func crashFree(jobs []*job, dir string) (definitions, error) {
	defs := definitions{steps: map[string][]string{}, names: map[string]string{}}
	var refs []*Server
	defer func() {
		for _, s := range refs {
			_ = s.Kill()
		}
	}()
	for _, v := range []string{"1", "2"} {
		ref, err := StartServer(MemoryEnv(chaosTimings, referenceSettings, Settings{"diag.drill-versions": v}), dir, "ref-v"+v)
		if err != nil {
			return defs, err
		}
		refs = append(refs, ref)
		st, body, err := runReference(ref.Addr, DrillID, "probe-v"+v, []byte(`{"echo":"probe"}`))
		var res DrillResult
		if err == nil && (st.Status != string(store.Succeeded) || json.Unmarshal(body, &res) != nil || len(res.Steps) == 0 || st.PipelineVersion == "") {
			err = fmt.Errorf("status %+v, result %s", st, body)
		}
		if err != nil {
			return defs, fmt.Errorf("crashtest: probe drill of definition %s on the reference: %w", v, err)
		}
		defs.steps[st.PipelineVersion] = res.Steps
		defs.names[st.PipelineVersion] = "v" + v + " " + st.PipelineVersion
	}
	if len(defs.steps) != 2 {
		return defs, fmt.Errorf("crashtest: the drill's two definitions report the same pipelineVersion: %v", defs.steps)
	}
	ref := refs[0]
	var mu sync.Mutex
	var errs []error
	parallel(jobs, 8, func(j *job) bool {
		body := j.body
		var err error
		if j.pipelineID == DrillID {
			var d Drill
			if err = json.Unmarshal(body, &d); err == nil {
				d.SleepMs = 0 // the crash-free run need not wait
				body, err = json.Marshal(d)
			}
		}
		var st Status
		var res []byte
		if err == nil {
			st, res, err = runReference(ref.Addr, j.pipelineID, j.key, body)
		}
		var drill DrillResult
		switch {
		case err != nil:
		case st.Status != j.status:
			err = fmt.Errorf("ended %s (error %+v), the input dictates %s %s", st.Status, st.Error, j.status, j.reason)
		case j.status == string(store.DLQ) && (st.Error == nil || st.Error.TerminalReason != j.reason || st.Error.Code != j.code):
			err = fmt.Errorf("DLQ with %+v, the input dictates %s %s", st.Error, j.code, j.reason)
		case j.status == string(store.Succeeded) && j.pipelineID == DrillID && (json.Unmarshal(res, &drill) != nil || drill.WorkAttempt != j.minAttempt):
			err = fmt.Errorf("result %s, the input dictates workAttempt %d", res, j.minAttempt)
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, fmt.Errorf("crashtest: reference run of %d (%s %s): %w", j.i, j.pipelineID, j.body, err))
		}
		j.result = res
		return false
	})
	return defs, errors.Join(errs...)
}

// runReference submits body to the reference at addr and waits (at most
// 30 s) until the execution is settled; it returns the status and, when
// it SUCCEEDED, the result bytes.
func runReference(addr, pipelineID, key string, body []byte) (Status, []byte, error) {
	code, sub, err := Submit(addr, pipelineID, key, body)
	if err != nil {
		return Status{}, nil, err
	}
	if code != http.StatusAccepted {
		return Status{}, nil, fmt.Errorf("submit answered %d, want 202 (a fresh reference)", code)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := GetStatus(addr, sub.ExecutionID)
		if err != nil {
			return st, nil, err
		}
		if Terminal(st.Status) {
			if st.Status != string(store.Succeeded) {
				return st, nil, nil
			}
			code, res, err := GetResult(addr, sub.ExecutionID)
			if err == nil && code != http.StatusOK {
				err = fmt.Errorf("the result: HTTP %d: %s", code, res)
			}
			return st, res, err
		}
		if time.Now().After(deadline) {
			return st, nil, fmt.Errorf("not settled after 30 s: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// submitRetrying submits j to random live workers until one answers 200
// or 202 (at most 30 tries), and returns the id and the number of retries.
func submitRetrying(fl *fleet, j *job) (string, int, error) {
	var last error
	for try := range 30 {
		code, s, err := Submit(fl.pick(), j.pipelineID, j.key, j.body)
		if err == nil && (code == http.StatusAccepted || code == http.StatusOK) {
			return s.ExecutionID, try, nil
		}
		if err == nil {
			err = fmt.Errorf("HTTP %d", code)
		}
		if code == http.StatusUnprocessableEntity || code == http.StatusBadRequest {
			return "", try, err // not a transient failure
		}
		last = err
		time.Sleep(200 * time.Millisecond)
	}
	return "", 30, fmt.Errorf("no worker accepted the submit: %w", last)
}

// parallel calls keep for each job, n at a time, and returns the jobs
// for which it returned true, in order.
func parallel(jobs []*job, n int, keep func(*job) bool) []*job {
	kept := make([]bool, len(jobs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, n)
	for i, j := range jobs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			kept[i] = keep(j)
		})
	}
	wg.Wait()
	var out []*job
	for i, j := range jobs {
		if kept[i] {
			out = append(out, j)
		}
	}
	return out
}

// fleet is the K worker slots of a chaos run.
type fleet struct {
	env   []string
	dir   string
	mu    sync.Mutex
	slots []*Server
	gen   []int
	extra []Settings // per slot: clock offset, drill versions
	// op serializes the replacements of a slot's process (the killer's
	// kill and restart, a redeploy), so a slot never runs two processes.
	op sync.Mutex
}

// restart starts a new process in slot i, with the slot's settings.
func (f *fleet) restart(i int) error {
	f.mu.Lock()
	f.gen[i]++
	name := fmt.Sprintf("w%d-%d", i, f.gen[i])
	env := slices.Clone(f.env)
	for _, k := range slices.Sorted(maps.Keys(f.extra[i])) {
		env = append(env, config.EnvName(config.FullKey(k))+"="+f.extra[i][k])
	}
	f.mu.Unlock()
	s, err := StartServer(env, f.dir, name)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.slots[i] = s
	f.mu.Unlock()
	return nil
}

// redeploy changes slot i's settings and replaces its process the way a
// deploy does: the old one is stopped (SIGTERM, draining), the new one
// started.
func (f *fleet) redeploy(i int, settings Settings) error {
	f.op.Lock()
	defer f.op.Unlock()
	f.mu.Lock()
	maps.Copy(f.extra[i], settings)
	s := f.slots[i]
	f.mu.Unlock()
	_ = s.Stop(30 * time.Second) // a process the killer took already is gone
	return f.restart(i)
}

// kill SIGKILLs the process in slot i.
func (f *fleet) kill(i int) error {
	f.mu.Lock()
	s := f.slots[i]
	f.mu.Unlock()
	return s.Kill()
}

// pick returns the address of a random live worker (any worker if none
// is live at the moment).
func (f *fleet) pick() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var live []*Server
	for _, s := range f.slots {
		if s != nil && !s.Exited() {
			live = append(live, s)
		}
	}
	if len(live) == 0 {
		return f.slots[rand.IntN(len(f.slots))].Addr
	}
	return live[rand.IntN(len(live))].Addr
}

// stopAll stops every worker with SIGTERM.
func (f *fleet) stopAll(report func(error)) {
	f.mu.Lock()
	slots := slices.Clone(f.slots)
	f.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range slots {
		if s != nil {
			wg.Go(func() {
				if err := s.Stop(30 * time.Second); err != nil {
					report(err)
				}
			})
		}
	}
	wg.Wait()
}

// killAll kills whatever still runs (test cleanup).
func (f *fleet) killAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.slots {
		if s != nil {
			_ = s.Kill()
		}
	}
}

// ChaosOptionsFromEnv reads the chaos knobs from the environment on top of
// base: CHAOS_EXECUTIONS, CHAOS_WORKERS, CHAOS_KILL_EVERY (a duration),
// CHAOS_MIN_KILLS, CHAOS_SEED, CHAOS_RATE (submits per second),
// CHAOS_DYNAMO_ERROR_RATE, CHAOS_DUPLICATE_RATE, CHAOS_DROP_RATE,
// CHAOS_COMMIT_ERROR_RATE, CHAOS_DLQ_OUTAGE and CHAOS_CLOCK_SKEW
// (durations), CHAOS_ROLLING_DEPLOY=0 (off),
// CHAOS_QUIESCE_TIMEOUT (a duration) and CHAOS_LOG_DIR.
func ChaosOptionsFromEnv(base ChaosOptions) (ChaosOptions, error) {
	o := base
	var errs []error
	num := func(name string, set func(string) error) {
		if v := os.Getenv(name); v != "" {
			if err := set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", name, v, err))
			}
		}
	}
	intVar := func(p *int) func(string) error {
		return func(s string) (err error) { *p, err = strconv.Atoi(s); return err }
	}
	floatVar := func(p *float64) func(string) error {
		return func(s string) (err error) { *p, err = strconv.ParseFloat(s, 64); return err }
	}
	durVar := func(p *time.Duration) func(string) error {
		return func(s string) (err error) { *p, err = time.ParseDuration(s); return err }
	}
	num("CHAOS_EXECUTIONS", intVar(&o.Executions))
	num("CHAOS_WORKERS", intVar(&o.Workers))
	num("CHAOS_KILL_EVERY", durVar(&o.KillEvery))
	num("CHAOS_MIN_KILLS", intVar(&o.MinKills))
	num("CHAOS_SEED", func(s string) (err error) { o.Seed, err = strconv.ParseUint(s, 10, 64); return err })
	num("CHAOS_RATE", floatVar(&o.SubmitRate))
	num("CHAOS_DYNAMO_ERROR_RATE", floatVar(&o.DynamoErrorRate))
	num("CHAOS_DUPLICATE_RATE", floatVar(&o.DuplicateRate))
	num("CHAOS_DROP_RATE", floatVar(&o.DropRate))
	num("CHAOS_COMMIT_ERROR_RATE", floatVar(&o.CommitErrorRate))
	num("CHAOS_DLQ_OUTAGE", durVar(&o.DLQOutage))
	num("CHAOS_CLOCK_SKEW", durVar(&o.ClockSkew))
	if v := os.Getenv("CHAOS_ROLLING_DEPLOY"); v == "0" || v == "false" {
		o.NoRollingDeploy = true
	}
	num("CHAOS_QUIESCE_TIMEOUT", durVar(&o.QuiesceTimeout))
	if v := os.Getenv("CHAOS_LOG_DIR"); v != "" {
		o.LogDir = v
	}
	return o, errors.Join(errs...)
}
