package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ParseDuration parses a non-negative duration in Go syntax (250ms, 10s,
// 1m30s) or ISO-8601 (PT10S, PT0.5S, PT1M30S, P1D, P1DT2H, P2W), ignoring
// case and surrounding space. ISO years and months are refused because
// their length varies; use days instead.
func ParseDuration(s string) (time.Duration, error) {
	d, err := parseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("config: %w", err)
	}
	return d, nil
}

func parseDuration(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	switch {
	case strings.HasPrefix(t, "-"):
		return 0, fmt.Errorf("%q: negative durations are not allowed", s)
	case strings.HasPrefix(t, "P"), strings.HasPrefix(t, "p"):
		d, err := parseISO(strings.ToUpper(t[1:]))
		if err != nil {
			return 0, fmt.Errorf("%q is not a valid ISO-8601 duration: %w", s, err)
		}
		return d, nil
	}
	d, err := time.ParseDuration(t)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (use Go syntax like 10s or ISO-8601 like PT10S)", s)
	}
	return d, nil
}

var errOverflow = errors.New("too large")

// parseISO parses the part of an upper-case ISO-8601 duration after "P".
func parseISO(s string) (time.Duration, error) {
	if s == "" {
		return 0, errors.New("no components")
	}
	const day = 24 * time.Hour
	var total time.Duration
	inTime, rank := false, -1
	for s != "" {
		if s[0] == 'T' {
			if inTime || len(s) == 1 {
				return 0, errors.New("misplaced T")
			}
			inTime, s = true, s[1:]
			continue
		}
		n := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' && r != ',' })
		if n < 0 {
			return 0, fmt.Errorf("missing designator after %q", s)
		} else if n == 0 {
			return 0, fmt.Errorf("expected a number before %q", s)
		}
		num, unit := strings.ReplaceAll(s[:n], ",", "."), s[n]
		s = s[n+1:]
		var size time.Duration
		r := strings.IndexByte("WDHMS", unit)
		switch {
		case !inTime && (unit == 'Y' || unit == 'M'):
			return 0, errors.New("years and months are not supported because their length varies; use days (e.g. P30D)")
		case !inTime && unit == 'W':
			size = 7 * day
		case !inTime && unit == 'D':
			size = day
		case inTime && unit == 'H':
			size = time.Hour
		case inTime && unit == 'M':
			size = time.Minute
		case inTime && unit == 'S':
			size = time.Second
		default:
			return 0, fmt.Errorf("unexpected designator %q", unit)
		}
		if r <= rank {
			return 0, errors.New("components out of order or repeated")
		}
		rank = r
		d, err := scale(num, size)
		if err != nil {
			return 0, err
		}
		if total += d; total < 0 {
			return 0, errOverflow
		}
	}
	return total, nil
}

// scale returns the decimal number num (digits, optionally a fraction)
// times unit, truncated to the nanosecond.
func scale(num string, unit time.Duration) (time.Duration, error) {
	whole, frac, _ := strings.Cut(num, ".")
	if whole == "" || strings.Contains(frac, ".") {
		return 0, fmt.Errorf("malformed number %q", num)
	}
	n, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || n > math.MaxInt64/int64(unit) {
		return 0, errOverflow
	}
	d := time.Duration(n) * unit
	for _, c := range frac {
		unit /= 10
		d += time.Duration(c-'0') * unit
	}
	if d < 0 {
		return 0, errOverflow
	}
	return d, nil
}
