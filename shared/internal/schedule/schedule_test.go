package schedule

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func mustParse(t *testing.T, spec, tz string) *Cron {
	t.Helper()
	c, err := Parse(spec, tz)
	if err != nil {
		t.Fatalf("Parse(%q, %q): %v", spec, tz, err)
	}
	return c
}

// fires lists the fire times in (from, to], in loc, as "01-02 15:04 MST".
func fires(c *Cron, from, to time.Time) []string {
	var out []string
	for t := c.Next(from); !t.IsZero() && !t.After(to); t = c.Next(t) {
		out = append(out, t.In(c.Location()).Format("01-02 15:04 MST"))
	}
	return out
}

func TestParseRefusesWhatItCannotRun(t *testing.T) {
	for _, tc := range []struct{ spec, tz string }{
		{"", ""}, {"* * *", ""}, {"61 * * * *", ""}, {"0 0 30 2 *", ""}, {"@every 10s", ""},
		{"CRON_TZ=Europe/Paris 0 * * * *", ""}, {"0 * * * *", "Mars/Olympus"}, {"0 * * * *", "Local"}, {"0 0 * * * *", ""},
	} {
		if _, err := Parse(tc.spec, tc.tz); !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q, %q) = %v, want ErrInvalid", tc.spec, tc.tz, err)
		}
	}
	for _, spec := range []string{"*/5 * * * *", "0 9 * * MON-FRI", "@hourly", "@daily", "@every 15m", "@every 1h30m"} {
		mustParse(t, spec, "Europe/Berlin")
	}
}

func TestNextInTheTimeZone(t *testing.T) {
	c := mustParse(t, "0 9 * * MON-FRI", "Asia/Tokyo")
	from := time.Date(2024, 6, 7, 0, 0, 0, 0, time.UTC) // Friday 09:00 JST
	got := fires(c, from, from.Add(4*24*time.Hour))
	want := []string{"06-10 09:00 JST", "06-11 09:00 JST"}
	if !slices.Equal(got, want) {
		t.Fatalf("fires = %v, want %v", got, want)
	}
	if n := c.Next(from); n != time.Date(2024, 6, 10, 0, 0, 0, 0, time.UTC) || n.Location() != time.UTC {
		t.Fatalf("Next = %v, want Monday 00:00 UTC", n)
	}
}

func TestIntervalIsAnchoredToTheEpoch(t *testing.T) {
	c := mustParse(t, "@every 15m", "America/New_York")
	a := c.Next(time.Date(2024, 1, 1, 10, 7, 31, 0, time.UTC))
	b := c.Next(time.Date(2024, 1, 1, 10, 14, 59, 0, time.UTC))
	want := time.Date(2024, 1, 1, 10, 15, 0, 0, time.UTC)
	if a != want || b != want {
		t.Fatalf("Next = %v and %v, want %v from either look", a, b, want)
	}
	if n := c.Next(want); n != want.Add(15*time.Minute) {
		t.Fatalf("Next(%v) = %v", want, n)
	}
}

// A local time skipped when clocks go forward fires once, at the end of
// the gap; the other days fire at their time.
func TestSkippedLocalTimeFiresOnceAtTheNextValidInstant(t *testing.T) {
	ny := mustParse(t, "30 2 * * *", "America/New_York")
	from := time.Date(2024, 3, 9, 12, 0, 0, 0, time.UTC)
	got := fires(ny, from, from.Add(72*time.Hour))
	want := []string{"03-10 03:00 EDT", "03-11 02:30 EDT", "03-12 02:30 EDT"}
	if !slices.Equal(got, want) {
		t.Fatalf("fires = %v, want %v", got, want)
	}
	// Several matching times in one gap fire once.
	half := mustParse(t, "*/30 1-3 * * *", "America/New_York")
	got = fires(half, time.Date(2024, 3, 10, 0, 0, 0, 0, time.UTC), time.Date(2024, 3, 10, 12, 0, 0, 0, time.UTC))
	want = []string{"03-10 01:00 EST", "03-10 01:30 EST", "03-10 03:00 EDT", "03-10 03:30 EDT"}
	if !slices.Equal(got, want) {
		t.Fatalf("fires = %v, want %v", got, want)
	}
}

// A local time repeated when clocks go back fires once, at its first
// occurrence.
func TestRepeatedLocalTimeFiresOnce(t *testing.T) {
	c := mustParse(t, "30 1 * * *", "America/New_York")
	from := time.Date(2024, 11, 2, 12, 0, 0, 0, time.UTC)
	got := fires(c, from, from.Add(72*time.Hour))
	want := []string{"11-03 01:30 EDT", "11-04 01:30 EST", "11-05 01:30 EST"}
	if !slices.Equal(got, want) {
		t.Fatalf("fires = %v, want %v", got, want)
	}
	eu := mustParse(t, "15 2 * * *", "Europe/Berlin")
	got = fires(eu, time.Date(2024, 10, 26, 12, 0, 0, 0, time.UTC), time.Date(2024, 10, 27, 12, 0, 0, 0, time.UTC))
	if want := []string{"10-27 02:15 CEST"}; !slices.Equal(got, want) {
		t.Fatalf("fires = %v, want %v", got, want)
	}
}

func TestFirstIncludesAnExactFireTime(t *testing.T) {
	c := mustParse(t, "@hourly", "")
	at := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	if f := c.First(at); f != at {
		t.Fatalf("First(%v) = %v", at, f)
	}
	if f := c.First(at.Add(time.Millisecond)); f != at.Add(time.Hour) {
		t.Fatalf("First(just after) = %v", f)
	}
}

// After an outage the newest 1+limit due fire times are started; the
// older ones are counted skipped.
func TestDueTimesCatchesUpTheNewestWithinTheLimit(t *testing.T) {
	c := mustParse(t, "*/10 * * * *", "")
	next := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	now := next.Add(95 * time.Minute) // 10:00 .. 11:30 due: 10 times
	due, skipped, after := c.DueTimes(next, now, 2)
	want := []time.Time{next.Add(70 * time.Minute), next.Add(80 * time.Minute), next.Add(90 * time.Minute)}
	if !slices.Equal(due, want) || skipped != 7 || after != next.Add(100*time.Minute) {
		t.Fatalf("DueTimes = %v, %d, %v; want %v, 7, 11:40", due, skipped, after, want)
	}
	due, skipped, after = c.DueTimes(next, next.Add(-time.Second), 2)
	if len(due) != 0 || skipped != 0 || after != next {
		t.Fatalf("DueTimes before next = %v, %d, %v", due, skipped, after)
	}
	due, skipped, _ = c.DueTimes(next, next, 0)
	if !slices.Equal(due, []time.Time{next}) || skipped != 0 {
		t.Fatalf("DueTimes at next = %v, %d", due, skipped)
	}
}

func TestDecideAppliesTheOverlapPolicy(t *testing.T) {
	t1 := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	t2, t3 := t1.Add(time.Hour), t1.Add(2*time.Hour)
	for _, tc := range []struct {
		name    string
		o       Overlap
		due     []time.Time
		pending time.Time
		running bool
		want    Decision
	}{
		{"skip while running", Skip, []time.Time{t1, t2}, time.Time{}, true, Decision{Skipped: 2}},
		{"skip starts the newest", Skip, []time.Time{t1, t2}, time.Time{}, false, Decision{Start: []time.Time{t2}, Skipped: 1}},
		{"skip nothing due", Skip, nil, time.Time{}, false, Decision{}},
		{"buffer while running", BufferOne, []time.Time{t1}, time.Time{}, true, Decision{Pending: t1}},
		{"buffer replaces the older", BufferOne, []time.Time{t2}, t1, true, Decision{Pending: t2, Skipped: 1}},
		{"buffer starts the pending", BufferOne, nil, t1, false, Decision{Start: []time.Time{t1}}},
		{"buffer starts pending, buffers newest", BufferOne, []time.Time{t2, t3}, t1, false, Decision{Start: []time.Time{t1}, Pending: t3, Skipped: 1}},
		{"allow all", AllowAll, []time.Time{t1, t2}, time.Time{}, true, Decision{Start: []time.Time{t1, t2}}},
	} {
		got := Decide(tc.o, tc.due, tc.pending, tc.running)
		if !slices.Equal(got.Start, tc.want.Start) || got.Pending != tc.want.Pending || got.Skipped != tc.want.Skipped {
			t.Errorf("%s: Decide = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestIdempotencyKeyIsPerFireTime(t *testing.T) {
	at := time.Date(2024, 5, 1, 12, 0, 0, 0, time.FixedZone("X", 2*3600))
	if k := IdempotencyKey("sch-1", at); k != "schedule:sch-1:2024-05-01T10:00:00Z" {
		t.Fatalf("key = %q", k)
	}
}
