package ddbmodel

import (
	"math/rand/v2"
	"sync"
	"time"

	"github.com/qasync/qasync/shared/clock"
)

// Options configure a Model.
type Options struct {
	// Clock is the model's time: TTL expiry, stream record times, trimming
	// and iterator expiry. Default a clock fixed at 2026-01-01 UTC.
	Clock clock.Clock
	// Region and Account appear in ARNs and stream records. Defaults
	// "us-east-1" and "000000000000".
	Region, Account string
	// TTLLag chooses, once per expired item, how long after its expiry
	// TTL deletes it. Default: a draw in [0, MaxTTLLag] from Rand.
	TTLLag func(table string, key Item, expiredAt time.Time) time.Duration
	// MaxTTLLag bounds the default lag. Default 48 hours (AWS deletes
	// expired items "typically within a few days").
	MaxTTLLag time.Duration
	// Rand is the seeded source of the default TTL lag. Default a PCG
	// seeded with Seed.
	Rand *rand.Rand
	// Seed seeds the default Rand.
	Seed uint64
	// Fault, when set, is called once per request before it runs and may
	// refuse it or lose its answer (see Fault).
	Fault func(Request) Fault
	// ShardRecords closes a stream's open shard and opens a child after
	// this many records (0: no limit).
	ShardRecords int
	// ShardPeriod closes a stream's open shard and opens a child once the
	// shard is this old. Default 4 hours (as DynamoDB Streams does).
	ShardPeriod time.Duration
}

// Stream limits of DynamoDB Streams.
const (
	// StreamRetention is how long stream records are kept.
	StreamRetention = 24 * time.Hour
	// IteratorLifetime is how long a shard iterator can be used.
	IteratorLifetime = 15 * time.Minute
	// MaxItemSize is the largest item DynamoDB stores, in bytes.
	MaxItemSize = 400 * 1024
)

// Request is what the fault hook sees of a request: the operation
// ("PutItem", "GetRecords", ...), the tables it names (sorted) and the
// parsed input (a pointer to the operation's input type, such as
// *PutItemInput).
type Request struct {
	Op     string
	Tables []string
	Input  any
}

// Fault is the fault hook's answer. The zero Fault lets the request run.
type Fault struct {
	// Err is answered instead of the request's result: an *Error (such as
	// Throttled() or InternalServerError()) is sent as DynamoDB's error
	// answer; any other error is returned by the transport, as a lost
	// connection would be.
	Err error
	// AfterApply runs the request first, then answers Err: the change is
	// made but its answer is lost.
	AfterApply bool
}

// Model is the in-process DynamoDB. It is safe for concurrent use; its
// answers depend only on the requests, their order and the clock.
type Model struct {
	mu      sync.Mutex
	opts    Options
	tables  map[string]*table
	streams map[string]*stream // by ARN, kept after their table is gone
	rand    *rand.Rand
	// requests counts requests (request ids); seq numbers stream records
	// and shards.
	requests, seq, shards uint64
}

// New returns an empty model.
func New(opts Options) *Model {
	if opts.Clock == nil {
		opts.Clock = clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	}
	if opts.Region == "" {
		opts.Region = "us-east-1"
	}
	if opts.Account == "" {
		opts.Account = "000000000000"
	}
	if opts.MaxTTLLag <= 0 {
		opts.MaxTTLLag = 48 * time.Hour
	}
	if opts.ShardPeriod <= 0 {
		opts.ShardPeriod = 4 * time.Hour
	}
	r := opts.Rand
	if r == nil {
		r = rand.New(rand.NewPCG(opts.Seed, 0x9e3779b97f4a7c15))
	}
	return &Model{opts: opts, tables: map[string]*table{}, streams: map[string]*stream{}, rand: r}
}

func (m *Model) now() time.Time { return m.opts.Clock.Now().UTC() }

// Advance runs what time has made due (TTL deletions, shard rollover)
// without a request. Every request does the same first.
func (m *Model) Advance() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tick()
}

// tick applies the passage of time: TTL deletions and shard rollover.
func (m *Model) tick() {
	now := m.now()
	for _, name := range sortedNames(m.tables) {
		m.expire(m.tables[name], now)
	}
	for _, arn := range sortedNames(m.streams) {
		m.streams[arn].roll(m, now)
	}
}

// Counts are a table's items.
type Counts struct {
	// Items is every stored item; Expired those among them whose TTL has
	// passed (still readable until TTL deletes them).
	Items, Expired int
}

// Count reports a table's items (ok false when there is no such table).
func (m *Model) Count(tableName string) (c Counts, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.tables[tableName]
	if t == nil {
		return Counts{}, false
	}
	now := m.now()
	for _, r := range t.items {
		c.Items++
		if t.expired(r.item, now) {
			c.Expired++
		}
	}
	return c, true
}

// Dump returns copies of a table's items in key order (the model's scan
// order: partitions by their encoded key, then by range key).
func (m *Model) Dump(tableName string) []Item {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.tables[tableName]
	if t == nil {
		return nil
	}
	var out []Item
	for _, r := range t.allRecords() {
		out = append(out, cloneItem(r.item))
	}
	return out
}

// Tables returns the names of the tables, sorted.
func (m *Model) Tables() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return sortedNames(m.tables)
}

// IndexFirst returns the first entry, in the index's order, of the
// partition of a table's global secondary index whose hash key is hash
// (ok false when the partition is empty or there is no such index). It
// reads like a Query with Limit 1, without the request: the simulator
// asks it at every sweep interval whether the sweep index holds anything.
func (m *Model) IndexFirst(tableName, indexName string, hash Value) (Item, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tick()
	t := m.tables[tableName]
	if t == nil {
		return nil, false
	}
	for _, ix := range t.indexes {
		if ix.name != indexName {
			continue
		}
		p := ix.parts[encode(hash)]
		if p == nil || len(p.recs) == 0 {
			return nil, false
		}
		return t.entry(ix, p.recs[0].item), true
	}
	return nil, false
}

// StreamRecords counts the stream records written so far, over every
// stream (a number that only grows): a reader that is told of new
// records, as an event source mapping is, polls only when it moved.
func (m *Model) StreamRecords() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := uint64(0)
	for _, s := range m.streams {
		for _, sh := range s.shards {
			n += uint64(sh.written)
		}
	}
	return n
}
