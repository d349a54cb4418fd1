package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/pipeline"
)

// settings are the deployment's configuration and the fault rates, drawn
// from the seed.
type settings struct {
	ttl           time.Duration
	lease         time.Duration
	tolerance     time.Duration
	grace         time.Duration
	sweepInterval time.Duration
	visibility    time.Duration // the work queue's visibility timeout
	poisonAfter   int           // the work queue's maxReceiveCount
	policy        engine.IdempotencyPolicy
	procs         int           // worker processes (memory, dynamo; embedded: 1)
	concurrency   int           // the embedded process's deliveries in flight at once
	chainMax      int           // engine ChainMaxSteps: 1 hands every step over through the queue
	deployWindow  time.Duration // how long a rolling deploy takes
	dueShards     int           // DynamoDB: the sweep and list indexes' shards
	// The flaky step's own retry policy: long delays, possibly beyond
	// the retention (what a configuration may ask for).
	longRetry pipeline.RetryPolicy
	// awaitTimeout is the approval step's timeout (0: none).
	awaitTimeout time.Duration
	// mapInFlight and mapTolerated are the map pipeline's in-flight limit
	// and tolerated child failures.
	mapInFlight, mapTolerated int

	rates rates
}

// rates are the probabilities of the faults and events.
type rates struct {
	crashAtIO      float64 // a worker process dies at an I/O call
	crashAfterIO   float64 // ... after the call landed (its answer lost)
	crashInStep    float64 // a worker dies inside a step (before or after its effect)
	commitFail     float64 // a commit write fails before it lands
	commitLost     float64 // a commit write lands and its answer is lost
	storeError     float64 // any other store call fails
	drop           float64 // a work item is lost
	duplicate      float64 // a work item is delivered twice
	delay          float64 // a work item is delayed
	pause          float64 // a worker process freezes for a while (per invocation)
	slowStep       float64 // a step takes long (per step run)
	handBack       float64 // a step hands itself back unfinished (per step run)
	skew           time.Duration
	diskFull       float64 // embedded: the disk fills up for a while (per hour)
	backupStall    float64 // embedded: a backup reader stalls (per hour)
	cancel         float64
	redrive        float64
	clientRetry    float64 // a submit is sent again (a client retry)
	keyReuse       float64 // a submission reuses an earlier key
	bodyResubmit   float64 // a key-less submission repeats an earlier body
	deploysPerRun  int
	bulkRedriveDay float64 // bulk re-drives per virtual day
	feedError      float64 // DynamoDB: a history feed request is throttled
}

func drawSettings(rng *rand.Rand, o Options) settings {
	day := 24 * time.Hour
	pick := func(weights []int) int {
		total := 0
		for _, w := range weights {
			total += w
		}
		n := rng.IntN(total)
		for i, w := range weights {
			if n < w {
				return i
			}
			n -= w
		}
		return len(weights) - 1
	}
	s := settings{
		ttl:           []time.Duration{day, 2 * day, 7 * day, 30 * day}[pick([]int{45, 25, 20, 10})],
		lease:         []time.Duration{30 * time.Second, 90 * time.Second}[pick([]int{70, 30})],
		tolerance:     2 * time.Second,
		grace:         10 * time.Second,
		sweepInterval: time.Minute,
		visibility:    60 * time.Second,
		poisonAfter:   5,
		policy:        []engine.IdempotencyPolicy{engine.OptionalClientKey, engine.ServerKeyOnly, engine.ClientKeyRequired}[pick([]int{80, 10, 10})],
		procs:         3,
		concurrency:   4,
		chainMax:      []int{16, 1}[pick([]int{60, 40})],
		deployWindow:  []time.Duration{10 * time.Minute, time.Hour, 3 * time.Hour}[pick([]int{40, 40, 20})],
		dueShards:     []int{1, 4}[pick([]int{50, 50})],
	}
	// A long retry: hours apart, and a cap that may exceed the retention
	// (a configuration the runtime must refuse or survive).
	s.longRetry = pipeline.RetryPolicy{MaxRetries: 3, Delay: time.Hour, Multiplier: 6, MaxDelay: []time.Duration{s.ttl / 2, 2 * s.ttl}[pick([]int{40, 60})]}
	s.awaitTimeout = []time.Duration{0, s.ttl / 2, s.ttl}[pick([]int{20, 40, 40})]
	// The in-flight limit stays below the largest maps (a limit no map
	// reaches checks nothing): 1 to 10, and up to half of maxKids in a
	// short run.
	s.mapInFlight, s.mapTolerated = 1+rng.IntN(min(10, maxKids(o.Executions)/2)), rng.IntN(4)
	s.rates = rates{
		crashAtIO: 0.002, crashAfterIO: 0.002, crashInStep: 0.01,
		commitFail: 0.01, commitLost: 0.01, storeError: 0.002,
		drop: []float64{0.02, 0.05, 0.15}[pick([]int{30, 40, 30})], duplicate: 0.03, delay: 0.05,
		pause: 0.01, slowStep: 0.03, handBack: []float64{0.01, 0.05}[pick([]int{50, 50})],
		skew:     s.tolerance * 3 / 4,
		diskFull: 0.02, backupStall: 0.02,
		cancel: 0.03, redrive: 0.7, clientRetry: 0.1, keyReuse: 0.15, bodyResubmit: 0.1,
		deploysPerRun: 1 + rng.IntN(3), bulkRedriveDay: 0.2, feedError: 0.05,
	}
	return s
}

func (s settings) String() string {
	return fmt.Sprintf("ttl=%s lease=%s tolerance=%s grace=%s sweep_interval=%s policy=%s processes=%d long_retry_max_delay=%s await_timeout=%s deploys=%d work_item_loss=%.2f chain_max_steps=%d map_in_flight=%d map_tolerated=%d",
		s.ttl, s.lease, s.tolerance, s.grace, s.sweepInterval, s.policy, s.procs, s.longRetry.MaxDelay, s.awaitTimeout, s.rates.deploysPerRun, s.rates.drop, s.chainMax, s.mapInFlight, s.mapTolerated)
}

// mapOptions are the map pipeline's limits (its fan step's).
func (s settings) mapOptions() pipeline.MapOptions {
	return pipeline.MapOptions{MaxInFlight: s.mapInFlight, ToleratedFailures: s.mapTolerated}
}

// mapTolerates is how many of a map's total children may fail or be
// cancelled with the map still succeeding, as the runtime counts it.
func (s settings) mapTolerates(total int) int {
	return (&pipeline.MapSpec{Options: s.mapOptions()}).Tolerated(total)
}

// engineConfig is the runtime configuration of every process.
func (s settings) engineConfig(workerID string) engine.Config {
	cfg := engine.DefaultConfig()
	cfg.Lease, cfg.ClockSkewTolerance, cfg.SweepGrace = s.lease, s.tolerance, s.grace
	cfg.ExecutionTTL, cfg.IdempotencyPolicy, cfg.WorkerID = s.ttl, s.policy, workerID
	cfg.AwaitSecret = "sim-await-secret"
	cfg.PipelineVersionWait = min(time.Hour, s.ttl)
	cfg.ChainMaxSteps = s.chainMax
	// One child create at a time: parallel creates woken at one virtual
	// instant would draw their faults in no set order (a seed must give
	// one run).
	cfg.FanOutParallel = 1
	return cfg
}
