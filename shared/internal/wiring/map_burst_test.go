package wiring_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/internal/awsclient"
	"github.com/qasync/qasync/shared/internal/ddbmodel"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/logtest"
	"github.com/qasync/qasync/shared/internal/wiring"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/schema"
	"github.com/qasync/qasync/shared/store"
)

// The burst of a map (issue 19): one map of n one-step children, k in
// flight, end to end on one backend, its loops run as qasync serve runs
// them (the sweeper, the work queue's poller or the in-process
// dispatcher, worker-concurrency 8 workers). On DynamoDB every write
// request is recorded per item (awsclient.ItemMeter), so that the
// parent's row, each group row and the finished set show how often they
// were written and their busiest second: DynamoDB serves one item at
// most 1,000 write units a second.

// The burst's pipelines and tenant.
const (
	burstParent = "b.map"
	burstKid    = "b.kid"
	burstTenant = "t1"
)

// burstPipelines are the parent, which maps its input list onto
// burstKid (inFlight at a time, 0 for the map default) and then runs one
// step on the map's result, and the child, one step with a 10-byte
// output.
func burstPipelines(inFlight int) []pipeline.Pipeline {
	kid := costPipeline(1, 10)
	kid.ID = burstKid
	parent := pipeline.Pipeline{ID: burstParent, Steps: []pipeline.Step{
		pipeline.Map("fan", burstKid, pipeline.MapOptions{MaxInFlight: inFlight}),
		costPipeline(1, 10).Steps[0],
	}}
	return []pipeline.Pipeline{parent, kid}
}

// burstWatch observes the runtime's events of one burst.
type burstWatch struct {
	mu      sync.Mutex
	created time.Time   // the children's CreatedAt: the fan-out's start
	parked  time.Time   // the parent's commit WAITING_CHILDREN
	ended   []time.Time // each child's terminal event
	notOK   int         // children that ended other than SUCCEEDED
	done    time.Time   // the parent's terminal event
	status  store.Status

	once     sync.Once
	finished chan struct{} // closed at the parent's terminal event
}

func newBurstWatch() *burstWatch { return &burstWatch{finished: make(chan struct{})} }

// Observe implements engine.Observer.
func (w *burstWatch) Observe(_ context.Context, ev engine.Event) {
	e := ev.Execution
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case e.PipelineID == burstKid && ev.Terminal():
		w.ended = append(w.ended, ev.At)
		if w.created.IsZero() || e.CreatedAt.Before(w.created) {
			w.created = e.CreatedAt
		}
		if ev.Kind != engine.EventSucceeded {
			w.notOK++
		}
	case e.PipelineID == burstParent && ev.Kind == engine.EventTransitionCommitted && e.Status == store.WaitingChildren:
		w.parked = ev.At
	case e.PipelineID == burstParent && ev.Terminal():
		w.done, w.status = ev.At, e.Status
		w.once.Do(func() { close(w.finished) })
	}
}

// burstSpec is one measured map.
type burstSpec struct {
	backend     string // memory, embedded or dynamo
	n, inFlight int    // inFlight 0: the map default
	// adjust changes the DynamoDB deployment's configuration (openDurable's
	// short test timings otherwise).
	adjust func(*config.Config)
	within time.Duration
	// log receives the runtime's logs (discarded when nil).
	log *slog.Logger
}

// burstResult is what one burst measured.
type burstResult struct {
	spec                   burstSpec
	fanOut, wall           time.Duration // first child created -> parent parked, -> parent SUCCEEDED
	perSecond              float64       // children completed per second over wall
	peakEnds               int           // children ended within the busiest second
	dynamo                 bool          // the fields below are set
	parent, finished       awsclient.ItemLoad
	groups                 []awsclient.ItemLoad // in group order
	hottest                awsclient.ItemLoad   // the item of any table with the busiest second
	mostWritten            awsclient.ItemLoad   // the item of any table written most
	items                  int                  // items written
	sizes                  map[string]int       // bytes at the end: "parent", "group" (the largest), "finished"
	requests               map[string]int       // AWS requests by operation
	tableUnits, indexUnits float64              // write units on tables and on indexes
}

// serveTimings is the configuration change that gives a DynamoDB
// deployment qasync serve's timings (openDurable shortens them for the
// tests); the history stream feed stays off, as it runs apart in AWS (the
// history function): its writes go to the history table and would only
// share DynamoDB Local's one process with the burst.
func serveTimings(c *config.Config) {
	d := config.Default()
	c.Lease, c.MaxRetries, c.RetryDelay, c.SweepGrace = d.Lease, d.MaxRetries, d.RetryDelay, d.SweepGrace
	c.SQSWaitSeconds, c.SQSVisibility, c.SweepInterval = d.SQSWaitSeconds, d.SQSVisibility, d.SweepInterval
	c.HistoryStreamPoller = false
}

// runBurst runs one map end to end and measures it.
func runBurst(t *testing.T, s burstSpec) burstResult {
	t.Helper()
	ps := burstPipelines(s.inFlight)
	watch := newBurstWatch()
	opts := []option{withObserver(watch)}
	if s.log != nil {
		opts = append(opts, withLogger(s.log))
	}
	var (
		set      *wiring.Process
		capacity *awsclient.CapacityMeter
		items    *awsclient.ItemMeter
		d        *durable
	)
	switch s.backend {
	case "memory", "embedded":
		c := config.Default()
		if s.backend == "memory" {
			c.StateProvider = "memory"
		} else {
			c.EmbeddedDataDir = t.TempDir()
		}
		reg, err := pipeline.NewRegistry(ps...)
		if err != nil {
			t.Fatal(err)
		}
		if set, err = open(context.Background(), c, reg, slog.New(slog.DiscardHandler), opts...); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = set.Close(context.Background()) })
	case "dynamo":
		capacity, items = awsclient.NewCapacityMeter(), awsclient.NewItemMeter()
		d = openDurableWith(t, s.adjust, []func(*middleware.Stack) error{capacity.APIOption, items.APIOption}, opts, ps...)
		for _, tb := range schema.Tables(d.names) {
			items.SetKeys(tb.Name, tb.PartitionKey.Name)
			if tb.SortKey.Name != "" {
				items.SetKeys(tb.Name, tb.PartitionKey.Name, tb.SortKey.Name)
			}
		}
		d.warmUp(burstParent)
		set = d.set
	default:
		t.Fatalf("burst backend %q: want memory, embedded or dynamo", s.backend)
	}
	elems := make([]map[string]int, s.n)
	for i := range elems {
		elems[i] = map[string]int{"i": i}
	}
	in, err := payload.JSON(elems)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	stop := func() {
		cancel()
		<-stopped
	}
	res, err := set.Runtime.Submit(context.Background(), engine.SubmitRequest{TenantID: burstTenant, PipelineID: burstParent, IdempotencyKey: "burst", Input: in})
	if err != nil {
		t.Fatal(err)
	}
	if d != nil {
		capacity.Reset()
		items.Reset()
		d.counter.Reset()
		d.stop = stop // the test's cleanup stops the loops on every path
	} else {
		t.Cleanup(stop)
	}
	go func() { defer close(stopped); set.Run(ctx) }()
	select {
	case <-watch.finished:
	case <-time.After(s.within):
	}
	stop()
	watch.mu.Lock()
	defer watch.mu.Unlock()
	if watch.done.IsZero() || watch.status != store.Succeeded || watch.notOK > 0 {
		got, _ := set.Runtime.Status(context.Background(), res.Execution.Key())
		t.Fatalf("%s, %d children (%d in flight): the parent is %s after %s (%d children ended, %d not SUCCEEDED), want SUCCEEDED",
			s.backend, s.n, s.inFlight, got.Status, s.within, len(watch.ended), watch.notOK)
	}
	r := burstResult{spec: s, fanOut: watch.parked.Sub(watch.created), wall: watch.done.Sub(watch.created),
		peakEnds: awsclient.PeakInWindow(watch.ended, time.Second)}
	r.perSecond = float64(s.n) / r.wall.Seconds()
	if d == nil {
		return r
	}
	r.dynamo = true
	r.requests = d.counter.Snapshot()
	r.tableUnits, r.indexUnits = capacity.Snapshot().Writes()
	loads := awsclient.Loads(items.Writes(), time.Second)
	r.items = len(loads)
	if len(loads) > 0 {
		r.hottest = loads[0]
	}
	for _, l := range loads {
		if l.Writes > r.mostWritten.Writes {
			r.mostWritten = l
		}
	}
	parentID := res.Execution.ExecutionID
	keys := burstKeys(parentID, s.n)
	byKey := map[string]awsclient.ItemLoad{}
	for _, l := range loads {
		if l.Table == d.names.ExecutionTable {
			byKey[l.Key] = l
		}
	}
	r.parent, r.finished = byKey["pk="+keys.parent], byKey["pk="+keys.finished]
	for _, g := range keys.groups {
		r.groups = append(r.groups, byKey["pk="+g])
	}
	r.sizes = map[string]int{"parent": itemBytes(t, d, keys.parent), "finished": itemBytes(t, d, keys.finished)}
	for _, g := range keys.groups {
		r.sizes["group"] = max(r.sizes["group"], itemBytes(t, d, g))
	}
	return r
}

// mapKeys are the partition keys of a map's items in the execution
// table, as package dynamo writes them: the parent's row (tenant '#'
// slot), each group item and the finished set ("#map#<tenant>#<parent
// id>#<step>#<group>", "...#f").
type mapKeys struct {
	parent, finished string
	groups           []string
}

func burstKeys(parentID string, n int) mapKeys {
	prefix := "#map#" + burstTenant + "#" + parentID + "#0#"
	k := mapKeys{parent: burstTenant + "#" + store.Slot(parentID), finished: prefix + "f"}
	for g := range store.Groups(n) {
		k.groups = append(k.groups, prefix+strconv.Itoa(g))
	}
	return k
}

// itemBytes is the size of the execution table's item pk as DynamoDB
// bills it (0 when absent).
func itemBytes(t *testing.T, d *durable, pk string) int {
	t.Helper()
	out, err := d.clients.DynamoDB.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(d.names.ExecutionTable),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}}, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	if out.Item == nil {
		return 0
	}
	n, err := ddbmodel.ItemSizeOf(out.Item)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// groupSpread is the fewest and the most writes of any group item and
// the busiest second of any.
func (r burstResult) groupSpread() (least, most, peak int) {
	least = -1
	for _, g := range r.groups {
		if least < 0 || g.Writes < least {
			least = g.Writes
		}
		most, peak = max(most, g.Writes), max(peak, g.PeakWrites)
	}
	return least, most, peak
}

// kind names what a key of the execution table is for the report.
func (r burstResult) kind(l awsclient.ItemLoad) string {
	switch {
	case l.Key == r.parent.Key:
		return "parent row"
	case l.Key == r.finished.Key:
		return "finished set"
	case strings.HasPrefix(l.Key, "pk=#map#"):
		return "group row"
	case strings.HasPrefix(l.Key, "pk="+burstTenant+"#"):
		return "child row"
	}
	return l.Table
}

// burstHeader and row print the results as one Markdown table.
const burstHeader = "| backend | children | in flight | fan-out | first create -> parent SUCCEEDED | children/s | peak child ends/s " +
	"| parent row: writes, peak/s | group rows: writes, peak/s | finished set: writes, peak/s | hottest item: writes, peak/s " +
	"| per child: write requests, write units, SQS sends+deletes, SQS requests |\n" +
	"|---|---:|---:|---:|---:|---:|---:|---|---|---|---|---|\n"

// inFlight is the map's in-flight limit.
func (r burstResult) inFlight() int {
	if r.spec.inFlight == 0 {
		return pipeline.DefaultMaxInFlight
	}
	return r.spec.inFlight
}

func (r burstResult) row() string {
	b := fmt.Sprintf("| %s | %d | %d | %.2f s | %.2f s | %.0f | %d |", r.spec.backend, r.spec.n, r.inFlight(),
		r.fanOut.Seconds(), r.wall.Seconds(), r.perSecond, r.peakEnds)
	if !r.dynamo {
		return b + " - | - | - | - | - |\n"
	}
	least, most, peak := r.groupSpread()
	n := float64(r.spec.n)
	return b + fmt.Sprintf(" %d, %d | %d-%d, %d | %d, %d | %d, %d (%s) | %.2f, %.2f, %.2f, %.2f |\n",
		r.parent.Writes, r.parent.PeakWrites, least, most, peak, r.finished.Writes, r.finished.PeakWrites,
		r.hottest.Writes, r.hottest.PeakWrites, r.kind(r.hottest),
		float64(dynamoWrites(r.requests))/n, (r.tableUnits+r.indexUnits)/n, float64(handOvers(r.requests))/n, float64(requestsOf(r.requests, "SQS"))/n)
}

// detail is the DynamoDB figures a table row leaves out.
func (r burstResult) detail() string {
	if !r.dynamo {
		return ""
	}
	refused := 0
	for _, g := range r.groups {
		refused += g.Refused
	}
	return fmt.Sprintf("%s %d (%d in flight): %d items written; parent row %d writes (%d refused, at most %.0f unit each, %d B at the end); "+
		"%d group rows, %d of their writes refused, at most %.0f unit a write, the largest %d B; finished set %d writes (%d refused, at most %.0f unit each, %d B); "+
		"most written: %s (%d writes); %.0f table + %.0f index write units; requests %v\n",
		r.spec.backend, r.spec.n, r.inFlight(), r.items, r.parent.Writes, r.parent.Refused, r.parent.MaxUnits, r.sizes["parent"],
		len(r.groups), refused, maxUnits(r.groups), r.sizes["group"], r.finished.Writes, r.finished.Refused, r.finished.MaxUnits, r.sizes["finished"],
		r.kind(r.mostWritten), r.mostWritten.Writes, r.tableUnits, r.indexUnits, r.requests)
}

func maxUnits(ls []awsclient.ItemLoad) float64 {
	m := 0.0
	for _, l := range ls {
		m = max(m, l.MaxUnits)
	}
	return m
}

// TestMapBurst is make bench-map: with QASYNC_MAP_BURST=<children> it
// runs one map of that many one-step children for each in-flight limit
// of QASYNC_MAP_IN_FLIGHT (default 100, e.g. "100,1000") on each backend
// of QASYNC_MAP_BACKENDS (default memory,embedded,dynamo; dynamo needs
// the local stack), and prints one Markdown table: the burst rate, and on
// DynamoDB each item's writes and busiest second and what a child
// costs (make bench-map gives each DynamoDB run a stack of its own:
// DynamoDB Local slows down with the stream records an earlier run left).
// Each run's row is logged as it ends too. QASYNC_MAP_OUT=<file>
// appends the rows to that file (the header first when it is new);
// QASYNC_MAP_LOG=<file> appends the runtime's logs of level warn and
// above to that file (JSON).
// It fails only when a run breaks, never on a figure.
func TestMapBurst(t *testing.T) {
	nv := os.Getenv("QASYNC_MAP_BURST")
	if nv == "" {
		t.Skip("the map burst runs with QASYNC_MAP_BURST=<children> (make bench-map)")
	}
	n, err := strconv.Atoi(nv)
	if err != nil || n < 1 || n > pipeline.MaxChildren {
		t.Fatalf("QASYNC_MAP_BURST=%q: want 1 to %d children", nv, pipeline.MaxChildren)
	}
	list := func(key, def string) []string {
		v := os.Getenv(key)
		if v == "" {
			v = def
		}
		return strings.Split(v, ",")
	}
	var inFlights []int
	for _, v := range list("QASYNC_MAP_IN_FLIGHT", strconv.Itoa(pipeline.DefaultMaxInFlight)) {
		k, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || k < 1 || k > pipeline.MaxInFlightLimit {
			t.Fatalf("QASYNC_MAP_IN_FLIGHT: %q is not an in-flight limit (1 to %d)", v, pipeline.MaxInFlightLimit)
		}
		inFlights = append(inFlights, k)
	}
	backends := list("QASYNC_MAP_BACKENDS", "memory,embedded,dynamo")
	var log *slog.Logger
	if path := os.Getenv("QASYNC_MAP_LOG"); path != "" {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		log = slog.New(slog.NewJSONHandler(f, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	var results []burstResult
	for _, b := range backends {
		for _, k := range inFlights {
			b := strings.TrimSpace(b)
			t.Run(fmt.Sprintf("%s-%d-%d", b, n, k), func(t *testing.T) {
				r := runBurst(t, burstSpec{backend: b, n: n, inFlight: k, adjust: serveTimings, within: 90 * time.Minute, log: log})
				t.Logf("%s%s", burstHeader, r.row())
				if r.dynamo {
					t.Logf("%s", strings.TrimSpace(r.detail()))
				}
				results = append(results, r)
			})
		}
	}
	var out strings.Builder
	out.WriteString(burstHeader)
	for _, r := range results {
		out.WriteString(r.row())
	}
	for _, r := range results {
		out.WriteString(r.detail())
	}
	fmt.Printf("\n%s\n", out.String())
	if path := os.Getenv("QASYNC_MAP_OUT"); path != "" {
		appendRows(t, path, results)
	}
}

// appendRows appends the results' table rows to the file at path,
// writing the table's header first when the file is new or empty: make
// bench-map runs each DynamoDB measurement on a stack of its own and
// gathers their rows there.
func appendRows(t *testing.T, path string, results []burstResult) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b strings.Builder
	if st, err := f.Stat(); err == nil && st.Size() == 0 {
		b.WriteString(burstHeader)
	}
	for _, r := range results {
		b.WriteString(r.row())
	}
	if _, err := f.WriteString(b.String()); err != nil {
		t.Fatal(err)
	}
}

// burstSlack is what the parent's row may take beyond parentRowWrites:
// refused writes retried (the wake-up by the last group's count racing
// the parent's own check right after its park: the loser's guarded
// update is refused, it reads the row again and leaves it).
const burstSlack = 3

// countWrites is the most write requests one count takes: a child's
// count in its group row (and a group's in the finished set) is one
// UpdateItem that adds the index and moves the item's TTL up to the
// count's; when the item holds a later TTL (a child that ended a second
// later counted first: a child's row, and so its count's TTL, expires a
// retention after its end), that update is refused and a second one adds
// the index without moving the TTL. The third path (a put) replaces an
// expired item, which a map's items are not while it runs.
const countWrites = 2

// parentRowWrites is how often a map's parent row is written from its
// first claim to SUCCEEDED, whatever the number of children: the claim of
// the map step, the park (WAITING_CHILDREN), the wake-up (QUEUED), the
// claim of the map step's second run, its commit (the join's result),
// which claims the next step in the same write, and that step's commit.
// Lease renewals (one a third of the lease while the fan-out or the join
// runs) and the sweeper's looks (at a running row's lease expiry + skew
// + grace, at a parked one's children look, 5 minutes) come with time,
// not with children: TestMapBurstBounds's lease and grace leave none in
// a run of seconds.
const parentRowWrites = 6

// TestMapBurstBounds is the map burst at CI size on DynamoDB Local: two
// maps (a partial group of 50 children; 350 children in 4 groups, the
// last partial, 100 in flight), each asserted for bounds that do not depend on the machine's
// speed. The parent's row takes parentRowWrites writes whatever the
// number of children (plus at most burstSlack refused); each group row
// one successful write per child of its group and the finished set one
// per group, each count at most countWrites requests; so no item takes
// more than countWrites x GroupSize = 200 write requests for one map, and
// none more than one write unit a write (each stays under 1 KB: the
// parent row by TestRowFitsOneWriteUnit and measured here, the map's
// items measured here and bounded below at their largest; a refused
// write is charged as a write of the item). So even if every write a map
// makes to one item landed in the same second, the item would take at
// most 200 write units that second, a fifth of DynamoDB's 1,000 per item,
// at any in-flight limit: the limit changes how fast the writes come, not
// how many an item gets. The busiest second of each item is logged, not
// asserted.
func TestMapBurstBounds(t *testing.T) {
	t.Parallel()
	// A 5-minute lease and sweep grace: no renewal and no sweep look,
	// which come with time, falls into the counts of a run of seconds.
	long := func(c *config.Config) {
		serveTimings(c)
		c.Lease, c.SweepGrace = 5*time.Minute, 5*time.Minute
	}
	for _, n := range []int{50, 350} {
		logs := &logtest.Buffer{}
		r := runBurst(t, burstSpec{backend: "dynamo", n: n, adjust: long, within: 3 * time.Minute,
			log: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
		t.Logf("%s%s", burstHeader, r.row())
		t.Logf("%s", strings.TrimSpace(r.detail()))
		// Off the happy path, a backend failure hands the map step back
		// (lease_released: the step runs again, its creates finding what
		// exists): each hand-back adds two writes, its own and the next
		// claim.
		released, err := logtest.Events[struct {
			Pipeline string `json:"pipeline"`
		}](logs, "lease_released")
		if err != nil {
			t.Fatal(err)
		}
		want := parentRowWrites
		for _, e := range released {
			if e.Pipeline == burstParent {
				want += 2
				t.Logf("%d children: the map step was handed back once (a backend failed): 2 more writes of the parent's row", n)
			}
		}
		if got := r.parent.Writes - r.parent.Refused; got != want || r.parent.Refused > burstSlack {
			t.Errorf("%d children: the parent's row took %d writes (%d refused), want %d (+ at most %d refused) whatever the children",
				n, r.parent.Writes, r.parent.Refused, want, burstSlack)
		}
		if len(r.groups) != store.Groups(n) {
			t.Fatalf("%d children: %d group rows, want %d", n, len(r.groups), store.Groups(n))
		}
		for g, l := range r.groups {
			if want := store.GroupLen(n, g); l.Writes-l.Refused != want || l.Writes > countWrites*want {
				t.Errorf("%d children: group row %d took %d writes (%d refused), want %d, one per child of the group, each at most %d requests",
					n, g, l.Writes, l.Refused, want, countWrites)
			}
		}
		if want := store.Groups(n); r.finished.Writes-r.finished.Refused != want || r.finished.Writes > countWrites*want {
			t.Errorf("%d children: the finished set took %d writes (%d refused), want %d, one per group, each at most %d requests",
				n, r.finished.Writes, r.finished.Refused, want, countWrites)
		}
		if m := r.mostWritten; m.Writes > countWrites*store.GroupSize {
			t.Errorf("%d children: item %s of %s took %d writes for one map, over %d x GroupSize", n, m.Key, m.Table, m.Writes, countWrites)
		}
		for _, l := range append([]awsclient.ItemLoad{r.parent, r.finished}, r.groups...) {
			if l.MaxUnits != 1 {
				t.Errorf("%d children: a write of %s consumed %.0f write units, want 1 (an item under 1 KB)", n, l.Key, l.MaxUnits)
			}
		}
		for what, size := range r.sizes {
			if size == 0 || size >= 1024 {
				t.Errorf("%d children: the %s item is %d B at the end, want 1 to 1023", n, what, size)
			}
		}
	}
	// The largest a group item can be: the longest tenant id (128), a
	// parent id nested three maps deep, every one of 100 indexes of four
	// digits in both its sets (all failed), its TTL. Under 1 KB, so each
	// of its writes is one unit whatever the map.
	worst := map[string]types.AttributeValue{
		"pk":  &types.AttributeValueMemberS{Value: "#map#" + strings.Repeat("t", 128) + "#" + nestedParentID(3) + "#99#99"},
		"me":  &types.AttributeValueMemberNS{Value: indexes(9900, store.GroupSize)},
		"mf":  &types.AttributeValueMemberNS{Value: indexes(9900, store.GroupSize)},
		"ttl": &types.AttributeValueMemberN{Value: strconv.FormatInt(time.Now().AddDate(0, 2, 0).Unix(), 10)},
	}
	size, err := ddbmodel.ItemSizeOf(worst)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the largest group item possible: %d B", size)
	if size >= 1024 {
		t.Errorf("the largest group item possible is %d B, over 1 KB: its writes would cost 2 units", size)
	}
}

// nestedParentID is the id of a child depth maps deep under a submitted
// execution, as engine.ChildID names them.
func nestedParentID(depth int) string {
	id, token := "0f5e8c4a-6b1d-8e2f-9a3b-4c5d6e7f8091.bbbbbbbbbbbbbbbb", "bbbbbbbbbbbbbbbb"
	for range depth {
		id, token = engine.ChildID(id, token, 99, pipeline.MaxChildren-1)
	}
	return id
}

// indexes are n consecutive indexes from first, as a number set holds
// them.
func indexes(first, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = strconv.Itoa(first + i)
	}
	return out
}
