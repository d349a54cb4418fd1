package crashtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"strconv"
)

// Event is one JSON log line of a process: slog's "time", "level" and
// "msg", and the runtime's snake_case attributes, "event" naming it.
type Event map[string]any

// Name is the event's "event" attribute.
func (e Event) Name() string { return e.Str("event") }

// Str returns attribute k as a string ("" when absent).
func (e Event) Str(k string) string {
	switch v := e[k].(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(v)
	}
	return ""
}

// Int returns attribute k as an int (0 when absent or not a number).
func (e Event) Int(k string) int {
	if v, ok := e[k].(float64); ok {
		return int(v)
	}
	return 0
}

// Bool returns attribute k as a bool (false when absent).
func (e Event) Bool(k string) bool {
	v, _ := e[k].(bool)
	return v
}

// ParseEvents parses JSON log lines, skipping lines that are not JSON
// objects (qasync serve's banner on stderr, or a line a kill cut short).
func ParseEvents(b []byte) []Event {
	var evs []Event
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var ev Event
		if json.Unmarshal(line, &ev) == nil {
			evs = append(evs, ev)
		}
	}
	return evs
}

// ReadEvents parses the JSON log lines of the files at paths, in order.
func ReadEvents(paths ...string) ([]Event, error) {
	var evs []Event
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return evs, err
		}
		evs = append(evs, ParseEvents(b)...)
	}
	return evs, nil
}

// Filter returns the events named name (and, when executionID is not
// empty, about that execution).
func Filter(evs []Event, name, executionID string) []Event {
	var out []Event
	for _, e := range evs {
		if e.Name() == name && (executionID == "" || e.Str("execution_id") == executionID) {
			out = append(out, e)
		}
	}
	return out
}

// DuplicateCommits returns the transition keys that more than one
// transition_committed event names, with their counts. See RunChaos for
// why an empty answer over every process's log proves that no transition
// was committed twice.
func DuplicateCommits(evs []Event) map[string]int {
	seen := map[string]int{}
	for _, e := range Filter(evs, "transition_committed", "") {
		seen[e.Str("transition_key")]++
	}
	dups := map[string]int{}
	for k, n := range seen {
		if n > 1 {
			dups[k] = n
		}
	}
	return dups
}
