// Package schedule is the pure policy of schedules: parsing a schedule's
// spec (standard 5-field cron or a descriptor such as @hourly or
// @every 15m) in an IANA time zone, its fire times (with a defined
// behaviour across daylight-saving changes), the catch-up of fire times
// missed during an outage, the overlap policy, and the idempotency key
// of a fire. Nothing here reads a clock: every function takes now.
//
// Fire times across a daylight-saving change:
//
//   - A local time that does not exist (skipped when clocks go forward)
//     fires once, at the first valid instant after the gap (the instant
//     of the change). Several matching local times in one gap fire once.
//   - A local time that happens twice (repeated when clocks go back)
//     fires once, at its first occurrence.
//
// An interval (@every d) is anchored to the Unix epoch, not to whenever a
// driver last looked, so every driver computes the same fire times:
// @every 15m fires at :00, :15, :30 and :45 UTC.
package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Overlap is what a schedule does when a fire time comes while the
// execution it started last is not terminal.
type Overlap string

// The overlap policies.
const (
	// Skip starts nothing while the previous run is not terminal: the
	// fire time is counted skipped.
	Skip Overlap = "SKIP"
	// BufferOne remembers one fire time while the previous run is not
	// terminal (the newest; an older buffered one is counted skipped) and
	// starts it once the previous run ended.
	BufferOne Overlap = "BUFFER_ONE"
	// AllowAll starts every fire time, whatever runs.
	AllowAll Overlap = "ALLOW_ALL"
)

// Valid reports whether o is one of the policies.
func (o Overlap) Valid() bool { return o == Skip || o == BufferOne || o == AllowAll }

// Limits of a schedule.
const (
	// MinInterval is the shortest interval of @every (a schedule's
	// precision is the sweep period anyway).
	MinInterval = time.Minute
	// MaxCatchup is the largest catch-up limit.
	MaxCatchup = 100
	// MaxSpecLen bounds a spec's length.
	MaxSpecLen = 200
	// maxScan bounds the fire times one Due call walks (about a year of a
	// schedule firing every minute); beyond it the rest of an outage is
	// counted skipped in the next call.
	maxScan = 1 << 19
)

// ErrInvalid: a spec, time zone or setting is not acceptable (the message
// says which).
var ErrInvalid = errors.New("schedule: invalid schedule")

// Cron is a parsed spec in its time zone.
type Cron struct {
	spec  *cron.SpecSchedule // nil for an interval
	every time.Duration      // the interval of @every
	loc   *time.Location
}

var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Parse parses spec (5-field cron: minute hour day-of-month month
// day-of-week, or a descriptor: @yearly, @monthly, @weekly, @daily,
// @hourly, @every <duration>) in the IANA time zone tz ("" is UTC). A
// time zone inside the spec (CRON_TZ=) is refused: the zone is its own
// field.
func Parse(spec, tz string) (*Cron, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" || len(spec) > MaxSpecLen {
		return nil, fmt.Errorf("%w: spec must hold a cron expression or descriptor of at most %d bytes", ErrInvalid, MaxSpecLen)
	}
	if strings.HasPrefix(spec, "TZ=") || strings.HasPrefix(spec, "CRON_TZ=") {
		return nil, fmt.Errorf("%w: spec must not name a time zone (use timeZone)", ErrInvalid)
	}
	if tz == "" {
		tz = "UTC"
	}
	loc, err := time.LoadLocation(tz)
	if err != nil || tz == "Local" {
		return nil, fmt.Errorf("%w: timeZone %q is not an IANA time zone", ErrInvalid, tz)
	}
	s, err := parser.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("%w: spec %q: %v", ErrInvalid, spec, err)
	}
	switch s := s.(type) {
	case cron.ConstantDelaySchedule:
		if s.Delay < MinInterval || s.Delay%time.Second != 0 {
			return nil, fmt.Errorf("%w: spec %q: an interval must be whole seconds and at least %s", ErrInvalid, spec, MinInterval)
		}
		return &Cron{every: s.Delay, loc: loc}, nil
	case *cron.SpecSchedule:
		s.Location = loc
		c := &Cron{spec: s, loc: loc}
		if c.Next(time.Unix(0, 0)).IsZero() {
			return nil, fmt.Errorf("%w: spec %q never fires", ErrInvalid, spec)
		}
		return c, nil
	}
	return nil, fmt.Errorf("%w: spec %q", ErrInvalid, spec)
}

// Location is the schedule's time zone.
func (c *Cron) Location() *time.Location { return c.loc }

// Next returns the first fire time strictly after t (in UTC, to the
// second), or the zero time when there is none within five years.
func (c *Cron) Next(t time.Time) time.Time {
	t = t.UTC()
	if c.spec == nil {
		step := int64(c.every / time.Second)
		return time.Unix((t.Unix()/step+1)*step, 0).UTC()
	}
	for {
		n := c.spec.Next(t)
		if n.IsZero() {
			return n
		}
		// A gap (clocks forward) between t and n may hold local times
		// the spec matches: they fire once, at the gap's end.
		if g, ok := c.gapFire(t, n); ok {
			return g.UTC()
		}
		if c.repeated(n) {
			t = n // the second occurrence of a local time: fired already
			continue
		}
		return n.UTC()
	}
}

// repeated reports whether n is the second occurrence of its local time
// (clocks went back within the last hours and the same wall time was
// earlier).
func (c *Cron) repeated(n time.Time) bool {
	_, offNow := n.In(c.loc).Zone()
	_, offBefore := n.Add(-3 * time.Hour).In(c.loc).Zone()
	if offBefore <= offNow {
		return false
	}
	e := n.Add(-time.Duration(offBefore-offNow) * time.Second)
	return wall(e.In(c.loc)) == wall(n.In(c.loc))
}

func wall(t time.Time) [5]int {
	return [5]int{t.Year(), int(t.Month()), t.Day(), t.Hour()*60 + t.Minute(), t.Second()}
}

// gapFire looks for a forward change of the zone's offset in (t, n): when
// the spec matches a local time of the gap it opens, that fire happens at
// the change.
func (c *Cron) gapFire(t, n time.Time) (time.Time, bool) {
	for lo := t; lo.Before(n); {
		hi := lo.Add(24 * time.Hour)
		if hi.After(n) {
			hi = n
		}
		_, offLo := lo.In(c.loc).Zone()
		_, offHi := hi.In(c.loc).Zone()
		if offHi > offLo {
			change := c.change(lo, hi)
			if change.After(t) && change.Before(n) && c.gapMatches(change, offLo, offHi) {
				return change, true
			}
		}
		lo = hi
	}
	return time.Time{}, false
}

// change is the first instant of (lo, hi] with hi's offset (to the
// second; lo's offset differs from hi's).
func (c *Cron) change(lo, hi time.Time) time.Time {
	_, offHi := hi.In(c.loc).Zone()
	for hi.Sub(lo) > time.Second {
		mid := lo.Add(hi.Sub(lo) / 2).Truncate(time.Second)
		if !mid.After(lo) {
			break
		}
		if _, off := mid.In(c.loc).Zone(); off == offHi {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// gapMatches reports whether the spec matches a minute of the local times
// skipped at change (from offset before to after).
func (c *Cron) gapMatches(change time.Time, before, after int) bool {
	start := change.Add(time.Duration(before) * time.Second).UTC() // the gap's first wall time, as UTC fields
	for m := 0; m < (after-before)/60; m++ {
		w := start.Add(time.Duration(m) * time.Minute)
		if c.matches(w) {
			return true
		}
	}
	return false
}

const starBit = 1 << 63

// matches reports whether the wall time w (its fields) is one of the
// spec's (at second 0).
func (c *Cron) matches(w time.Time) bool {
	s := c.spec
	if w.Second() != 0 || 1<<uint(w.Minute())&s.Minute == 0 || 1<<uint(w.Hour())&s.Hour == 0 || 1<<uint(w.Month())&s.Month == 0 {
		return false
	}
	dom := 1<<uint(w.Day())&s.Dom > 0
	dow := 1<<uint(w.Weekday())&s.Dow > 0
	if s.Dom&starBit > 0 || s.Dow&starBit > 0 {
		return dom && dow
	}
	return dom || dow
}

// First returns the first fire time at or after t: a new or resumed
// schedule's next fire time.
func (c *Cron) First(t time.Time) time.Time {
	return c.Next(t.Add(-time.Nanosecond))
}

// Catch-up. A driver that finds a schedule late (an outage: the sweeper
// did not run, or the schedule's record could not be written) starts at
// most the newest 1+limit of the fire times that are due: the newest is
// the one on time, the limit more are the missed ones caught up. The
// older ones are counted skipped (and logged), never started.

// DueTimes returns the fire times at or before now, from next (the
// schedule's first unhandled fire time) on: the newest at most 1+limit of
// them, oldest first, how many older ones are skipped, and the fire time
// that follows the last one (the schedule's next fire time afterwards).
// When next is after now nothing is due and after is next.
func (c *Cron) DueTimes(next, now time.Time, limit int) (due []time.Time, skipped int, after time.Time) {
	limit = min(max(limit, 0), MaxCatchup)
	ring := make([]time.Time, 0, limit+1)
	t := next
	for n := 0; !t.IsZero() && !t.After(now); n++ {
		if n == maxScan {
			break
		}
		if len(ring) == limit+1 {
			ring = ring[1:]
			skipped++
		}
		ring = append(ring, t)
		t = c.Next(t)
	}
	return ring, skipped, t
}

// Decision is what a driver does with the due fire times of a schedule.
type Decision struct {
	// Start are the fire times to start now, oldest first.
	Start []time.Time
	// Pending is the fire time buffered for later (BufferOne; zero: none).
	Pending time.Time
	// Skipped counts the fire times dropped by the overlap policy.
	Skipped int
}

// Decide applies the overlap policy: due are the fire times due now
// (DueTimes), pending the one buffered before (zero: none), running
// whether the schedule's previous run is not terminal yet. Skip and
// BufferOne never start two runs at once: of several due fire times
// they start (or buffer) the newest; AllowAll starts every one.
func Decide(o Overlap, due []time.Time, pending time.Time, running bool) Decision {
	switch o {
	case AllowAll:
		return Decision{Start: due}
	case BufferOne:
		cands := due
		if !pending.IsZero() {
			cands = append([]time.Time{pending}, due...)
		}
		if len(cands) == 0 {
			return Decision{}
		}
		if running {
			return Decision{Pending: cands[len(cands)-1], Skipped: len(cands) - 1}
		}
		d := Decision{Start: cands[:1]}
		if len(cands) > 1 {
			d.Pending = cands[len(cands)-1]
			d.Skipped = len(cands) - 2
		}
		return d
	default: // Skip
		if len(due) == 0 {
			return Decision{}
		}
		if running {
			return Decision{Skipped: len(due)}
		}
		return Decision{Start: due[len(due)-1:], Skipped: len(due) - 1}
	}
}

// IdempotencyKey is the submit key of a schedule's fire time: two drivers
// (two serve processes, a retried sweeper invocation) that fire the same
// time submit the same key, so they resolve to one execution.
func IdempotencyKey(scheduleID string, fire time.Time) string {
	return "schedule:" + scheduleID + ":" + fire.UTC().Format(time.RFC3339)
}
