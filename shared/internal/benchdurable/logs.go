package benchdurable

import (
	"bytes"
	"io"
	"os"
	"time"

	"github.com/qasync/qasync/shared/internal/crashtest"
)

// tail reads a growing JSON log file incrementally: each poll parses the
// complete lines written since the last one. Reading the serve process's
// log costs the stack nothing, unlike polling each execution's status.
type tail struct {
	path string
	off  int64
	rest []byte
}

// poll returns the events of the lines completed since the last poll.
func (t *tail) poll() ([]crashtest.Event, error) {
	f, err := os.Open(t.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(t.off, io.SeekStart); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	t.off += int64(len(b))
	b = append(t.rest, b...)
	i := bytes.LastIndexByte(b, '\n')
	if i < 0 {
		t.rest = b
		return nil, nil
	}
	t.rest = append([]byte(nil), b[i+1:]...)
	return crashtest.ParseEvents(b[:i+1]), nil
}

// eventTime is the event's "time" (slog writes RFC 3339 with
// milliseconds); ok is false when it is missing or malformed.
func eventTime(e crashtest.Event) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339Nano, e.Str("time"))
	return t, err == nil
}

// latencyField is execution_succeeded's "latency": slog's JSON handler
// writes a time.Duration as integer nanoseconds, its text handler as a
// Go duration string; both are accepted.
func latencyField(e crashtest.Event) (time.Duration, bool) {
	switch v := e["latency"].(type) {
	case float64:
		return time.Duration(v), true
	case string:
		d, err := time.ParseDuration(v)
		return d, err == nil
	}
	return 0, false
}
