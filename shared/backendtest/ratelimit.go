package backendtest

// The rate limit cases of the state store suite (store.RateStore): a
// bucket's burst, the spacing of reservations past it, a refusal beyond
// the horizon that changes nothing, a quiet bucket refilling, buckets
// scoped by tenant, limit and key, concurrent reservations that never
// exceed the rate, and the row's rate limit fields (the name and key
// fixed at create, the reservation kept and cleared by updates).

import (
	"sort"
	"sync"
	"time"

	"github.com/qasync/qasync/shared/store"
)

// rateCases are the rate limit cases, run by runState on every store.
var rateCases = []struct {
	name string
	fn   func(*stateEnv, store.RateStore)
}{
	{"RateBurstThenRefused", testRateBurst},
	{"RateReservationsSpaced", testRateSpacing},
	{"RateRefusalBeyondHorizonWritesNothing", testRateHorizon},
	{"RateQuietBucketRefills", testRateRefill},
	{"RateBucketsScoped", testRateScoped},
	{"RateConcurrentReservationsKeepTheRate", testRateRace},
	{"RateFieldsOnTheRow", testRateRow},
}

func (e *stateEnv) rateScope(key string) store.RateScope {
	return store.RateScope{TenantID: e.tenant, Limit: "api", Key: key}
}

// reserve reserves at the fake clock's now.
func (e *stateEnv) reserve(rs store.RateStore, sc store.RateScope, interval time.Duration, burst int, horizon time.Duration) (time.Time, bool) {
	e.t.Helper()
	at, ok, err := rs.Reserve(e.ctx, sc, interval, burst, horizon, e.clock.Now())
	if err != nil {
		e.t.Fatalf("Reserve: %v", err)
	}
	return at, ok
}

func (e *stateEnv) wantAt(got time.Time, want time.Duration, what string) {
	e.t.Helper()
	if d := got.Sub(e.clock.Now()); d != want {
		e.t.Fatalf("%s: reserved now+%s, want now+%s", what, d, want)
	}
}

func testRateBurst(e *stateEnv, rs store.RateStore) {
	sc := e.rateScope("k")
	for i := range 3 {
		at, ok := e.reserve(rs, sc, time.Second, 3, 0)
		if !ok {
			e.t.Fatalf("reservation %d of a burst of 3 refused", i+1)
		}
		e.wantAt(at, 0, "within the burst")
	}
	at, ok := e.reserve(rs, sc, time.Second, 3, 0)
	if ok {
		e.t.Fatalf("a 4th start at once within a burst of 3 granted (at %s)", at)
	}
	e.wantAt(at, time.Second, "the refused 4th")
}

func testRateSpacing(e *stateEnv, rs store.RateStore) {
	sc := e.rateScope("k")
	for i := range 5 {
		at, ok := e.reserve(rs, sc, 250*time.Millisecond, 1, time.Hour)
		if !ok {
			e.t.Fatalf("reservation %d refused within the horizon", i+1)
		}
		e.wantAt(at, time.Duration(i)*250*time.Millisecond, "spaced")
	}
}

func testRateHorizon(e *stateEnv, rs store.RateStore) {
	sc := e.rateScope("k")
	for range 3 {
		e.reserve(rs, sc, time.Second, 1, time.Hour)
	}
	at, ok := e.reserve(rs, sc, time.Second, 1, time.Second)
	if ok {
		e.t.Fatalf("a reservation 3s out granted within a 1s horizon")
	}
	e.wantAt(at, 3*time.Second, "the refused reservation")
	at, ok = e.reserve(rs, sc, time.Second, 1, time.Hour)
	if !ok {
		e.t.Fatalf("refused within the horizon")
	}
	e.wantAt(at, 3*time.Second, "after a refusal (it must have written nothing)")
}

func testRateRefill(e *stateEnv, rs store.RateStore) {
	sc := e.rateScope("k")
	for range 2 {
		e.reserve(rs, sc, time.Second, 2, time.Hour)
	}
	at, _ := e.reserve(rs, sc, time.Second, 2, time.Hour)
	e.wantAt(at, time.Second, "past the burst")
	e.clock.Advance(time.Minute)
	for range 2 {
		at, ok := e.reserve(rs, sc, time.Second, 2, 0)
		if !ok {
			e.t.Fatalf("a quiet bucket's burst refused")
		}
		e.wantAt(at, 0, "a quiet bucket")
	}
}

func testRateScoped(e *stateEnv, rs store.RateStore) {
	scopes := []store.RateScope{e.rateScope("k"), e.rateScope("k2"), e.rateScope(""),
		{TenantID: e.tenant, Limit: "other", Key: "k"}, {TenantID: e.tenant + "x", Limit: "api", Key: "k"}}
	for _, sc := range scopes {
		at, ok := e.reserve(rs, sc, time.Second, 1, 0)
		if !ok {
			e.t.Fatalf("bucket %+v: its first start refused: the buckets are not scoped", sc)
		}
		e.wantAt(at, 0, "a bucket's first start")
	}
}

func testRateRace(e *stateEnv, rs store.RateStore) {
	sc := e.rateScope("k")
	const n, burst = 16, 2
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ats []time.Duration
	now := e.clock.Now()
	for range n {
		wg.Go(func() {
			at, ok, err := rs.Reserve(e.ctx, sc, time.Second, burst, time.Hour, now)
			mu.Lock()
			defer mu.Unlock()
			if err != nil || !ok {
				e.t.Errorf("concurrent Reserve: ok %v err %v", ok, err)
				return
			}
			ats = append(ats, at.Sub(now))
		})
	}
	wg.Wait()
	if e.t.Failed() {
		return
	}
	sort.Slice(ats, func(i, j int) bool { return ats[i] < ats[j] })
	// Exactly the GCRA schedule: burst at once, then one a second.
	for i, d := range ats {
		want := time.Duration(max(0, i-burst+1)) * time.Second
		if d != want {
			e.t.Fatalf("concurrent reservations %v: the %dth is at +%s, want +%s", ats, i+1, d, want)
		}
	}
}

func testRateRow(e *stateEnv, _ store.RateStore) {
	r := e.row("a.1")
	r.RateLimit, r.RateKey = "api", "acct-7"
	x, created, err := e.s.CreateOrGet(e.ctx, store.CreateRequest{Execution: r})
	if err != nil || !created {
		e.e(err, "create: created %v", created)
	}
	at := e.clock.Now().Add(1500 * time.Millisecond)
	next := x
	next.RateLimit, next.RateKey = "api", "changed"
	next.RateReservedAt, next.RateReservedVersion, next.NextDueAt = at, x.Version+1, at
	got, err := e.s.Update(e.ctx, store.Guard{Key: x.Key(), Version: x.Version}, next)
	if err != nil {
		e.t.Fatalf("Update: %v", err)
	}
	read, err := e.s.Get(e.ctx, x.Key())
	if err != nil || read.RateLimit != "api" || read.RateKey != "acct-7" || got.RateKey != "acct-7" {
		e.e(err, "rate limit after an update = %q/%q (returned key %q), want api/acct-7 fixed at create", read.RateLimit, read.RateKey, got.RateKey)
	}
	if !read.RateReservedAt.Equal(at) || read.RateReservedVersion != x.Version+1 {
		e.t.Fatalf("reservation read back %s version %d, want %s version %d", read.RateReservedAt, read.RateReservedVersion, at, x.Version+1)
	}
	next = read
	next.RateReservedAt, next.RateReservedVersion = time.Time{}, 0
	if _, err := e.s.Update(e.ctx, store.Guard{Key: x.Key(), Version: read.Version}, next); err != nil {
		e.t.Fatalf("Update: %v", err)
	}
	if read, err = e.s.Get(e.ctx, x.Key()); err != nil || !read.RateReservedAt.IsZero() || read.RateReservedVersion != 0 {
		e.e(err, "a cleared reservation reads %s version %d", read.RateReservedAt, read.RateReservedVersion)
	}
	if plain := e.create("b.1"); plain.RateLimit != "" || plain.RateKey != "" || !plain.RateReservedAt.IsZero() {
		e.t.Fatalf("a row without a rate limit reads %+v", plain)
	}
}
