// Command engines measures the candidate engines of qasync's embedded
// store (go.etcd.io/bbolt, github.com/cockroachdb/pebble/v2 and
// modernc.org/sqlite, all pure Go) on the write the runtime makes on every
// step: read an execution row, check its version, write it back at the
// next version and move its work-queue entry (one insert, one delete), all
// in one transaction that is fsync'd before the caller is answered.
//
// Each engine runs the same op through the same group commit: concurrent
// writers hand their ops to one committer, which applies every op pending
// at that moment in one transaction and fsyncs once (no timer: a lone
// writer commits at once). Pebble is also measured with its own commit
// pipeline (each writer commits its own synced batch; pebble shares the
// WAL fsync between concurrent batches), the conditional check then held
// by a per-row lock.
//
// Phases per engine, each on a fresh directory with 20,000 rows:
// 1 writer (the latency of one acknowledged commit), then 32 writers (the
// throughput of group commit). It prints one Markdown table: commits/s,
// p50/p99 latency and CPU µs per op. `make bench-engines` runs it.
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// op is one step commit: row id, the version the writer read, the queue
// entry it adds and the one it removes.
type op struct {
	row     int
	version uint64
	enqueue []byte
	dequeue []byte
	err     error
	done    chan struct{}
}

// engine is one candidate.
type engine interface {
	// open creates a store under dir holding rows rows at version 1.
	open(dir string, rows int) error
	// commit applies ops in one fsync'd transaction; an op whose row is not
	// at its version fails alone (op.err).
	commit(ops []*op) error
	// version reads a row's version (outside any write).
	version(row int) (uint64, error)
	close() error
}

// direct is implemented by an engine that can commit one op on its own,
// concurrently with others (pebble's commit pipeline).
type direct interface {
	commitOne(o *op) error
}

const rowBytes = 450 // an execution row with small inline payloads

func rowKey(i int) []byte { return fmt.Appendf(nil, "r/tenant-a#%032d", i) }

func rowValue(version uint64) []byte {
	v := make([]byte, rowBytes)
	binary.BigEndian.PutUint64(v, version)
	for i := 8; i < len(v); i++ {
		v[i] = byte('a' + i%26)
	}
	return v
}

func queueKey(due int64, row int) []byte {
	k := make([]byte, 0, 48)
	k = append(k, 'q', '/')
	k = binary.BigEndian.AppendUint64(k, uint64(due))
	return append(k, rowKey(row)[2:]...)
}

type result struct {
	engine, mode string
	writers      int
	ops          int
	seconds      float64
	p50, p99     time.Duration
	cpuPerOp     time.Duration
	fileBytes    int64
	readsPerS    float64
}

func main() {
	var (
		dur     = flag.Duration("duration", 3*time.Second, "length of each phase")
		rows    = flag.Int("rows", 20000, "rows per store")
		only    = flag.String("engines", "bbolt,pebble,pebble-pipeline,sqlite", "engines to run")
		writers = flag.String("writers", "1,32", "writer counts")
		dir     = flag.String("dir", "", "parent of the stores' directories (default: a temp dir)")
	)
	flag.Parse()
	parent, err := os.MkdirTemp(*dir, "qasync-engines-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(parent)
	var results []result
	for _, name := range strings.Split(*only, ",") {
		for _, w := range strings.Split(*writers, ",") {
			var n int
			fmt.Sscan(w, &n)
			r, err := run(name, n, *rows, *dur, filepath.Join(parent, fmt.Sprintf("%s-%d", name, n)))
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s with %d writers: %v\n", name, n, err)
				continue
			}
			results = append(results, r)
			fmt.Fprintf(os.Stderr, "%-16s %2d writers: %8.0f commits/s p50 %v p99 %v cpu/op %v\n",
				r.engine, r.writers, float64(r.ops)/r.seconds, r.p50, r.p99, r.cpuPerOp)
		}
	}
	fmt.Println("| engine | writers | commits/s | p50 | p99 | CPU µs/commit | row reads/s (as many readers) | files after |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		fmt.Printf("| %s | %d | %.0f | %.2f ms | %.2f ms | %.0f | %.0f | %.1f MiB |\n", r.engine, r.writers, float64(r.ops)/r.seconds,
			ms(r.p50), ms(r.p99), float64(r.cpuPerOp)/float64(time.Microsecond), r.readsPerS, float64(r.fileBytes)/(1<<20))
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func newEngine(name string) (engine, bool, error) {
	switch name {
	case "bbolt":
		return &boltEngine{}, false, nil
	case "pebble":
		return &pebbleEngine{}, false, nil
	case "pebble-pipeline":
		return &pebbleEngine{}, true, nil
	case "sqlite":
		return &sqliteEngine{}, false, nil
	}
	return nil, false, fmt.Errorf("unknown engine %q", name)
}

// run measures one engine with n writers for d.
func run(name string, n, rows int, d time.Duration, dir string) (result, error) {
	e, pipeline, err := newEngine(name)
	if err != nil {
		return result{}, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return result{}, err
	}
	if err := e.open(dir, rows); err != nil {
		return result{}, err
	}
	defer e.close()

	var submit func(o *op) error
	var stop func()
	if pipeline {
		de := e.(direct)
		submit = de.commitOne
		stop = func() {}
	} else {
		gc := newGroupCommit(e)
		submit, stop = gc.submit, gc.stop
	}

	var (
		count atomic.Int64
		lat   = make([][]time.Duration, n)
		wg    sync.WaitGroup
		errs  atomic.Value
	)
	before := cpu()
	start := time.Now()
	deadline := start.Add(d)
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			versions := map[int]uint64{}
			for time.Now().Before(deadline) {
				// Each writer owns the rows i with i%n == w: one worker per
				// execution, as the lease guarantees.
				row := rng.IntN(rows/n)*n + w
				v, ok := versions[row]
				if !ok {
					var err error
					if v, err = e.version(row); err != nil {
						errs.Store(err)
						return
					}
				}
				now := time.Now().UnixNano()
				o := &op{row: row, version: v, enqueue: queueKey(now, row), dequeue: queueKey(now-1, row), done: make(chan struct{})}
				t0 := time.Now()
				if err := submit(o); err != nil {
					errs.Store(err)
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
				versions[row] = v + 1
				count.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	used := cpu() - before
	stop()
	if err, _ := errs.Load().(error); err != nil {
		return result{}, err
	}
	reads := measureReads(e, n, rows, min(d, time.Second))
	all := slices.Concat(lat...)
	slices.Sort(all)
	r := result{engine: name, writers: n, ops: int(count.Load()), seconds: elapsed.Seconds(), fileBytes: dirBytes(dir), readsPerS: reads}
	if len(all) > 0 {
		r.p50, r.p99 = all[len(all)/2], all[len(all)*99/100]
		r.cpuPerOp = used / time.Duration(len(all))
	}
	return r, nil
}

// measureReads reads random rows from n goroutines for d (the worker's
// read of the row before its claim, a status query) and returns reads/s.
func measureReads(e engine, n, rows int, d time.Duration) float64 {
	var count atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			for time.Now().Before(deadline) {
				if _, err := e.version(rng.IntN(rows)); err != nil {
					return
				}
				count.Add(1)
			}
		}()
	}
	wg.Wait()
	return float64(count.Load()) / time.Since(start).Seconds()
}

// groupCommit is the committer every engine shares: it takes every op
// pending when the previous commit ends and applies them in one
// transaction.
type groupCommit struct {
	e    engine
	ch   chan *op
	quit chan struct{}
	wg   sync.WaitGroup
}

func newGroupCommit(e engine) *groupCommit {
	g := &groupCommit{e: e, ch: make(chan *op, 1024), quit: make(chan struct{})}
	g.wg.Add(1)
	go g.loop()
	return g
}

func (g *groupCommit) submit(o *op) error {
	g.ch <- o
	<-o.done
	return o.err
}

func (g *groupCommit) stop() { close(g.quit); g.wg.Wait() }

func (g *groupCommit) loop() {
	defer g.wg.Done()
	for {
		var batch []*op
		select {
		case o := <-g.ch:
			batch = append(batch, o)
		case <-g.quit:
			return
		}
	more:
		for len(batch) < 1000 {
			select {
			case o := <-g.ch:
				batch = append(batch, o)
			default:
				break more
			}
		}
		err := g.e.commit(batch)
		for _, o := range batch {
			if o.err == nil {
				o.err = err
			}
			close(o.done)
		}
	}
}

// cpu is the process's user+system CPU time.
func cpu() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

var errVersion = fmt.Errorf("version moved")
