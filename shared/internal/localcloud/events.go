package localcloud

import (
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// EventEntry is one event a function put on an event bus (EventBridge
// PutEvents), as the local event sink received it.
type EventEntry struct {
	// Function is the function that put it.
	Function   string
	Bus        string
	Source     string
	DetailType string
	// Detail is the event's detail document. It is kept in memory for
	// the caller (Events) and never logged.
	Detail json.RawMessage
	// At is when the sink received it.
	At time.Time
}

// eventSink stands for EventBridge: there is none on this machine, so the
// functions' AWS_ENDPOINT_URL_EVENTBRIDGE points here (through their IAM proxy
// when the template's policies are enforced, so PutEvents is checked
// like any other call), and every event is accepted and kept. It serves
// PutEvents only; the first path segment names the calling function.
type eventSink struct {
	URL string
	log *slog.Logger
	srv *http.Server

	mu      sync.Mutex
	entries []EventEntry
}

// maxSinkEntries bounds what the sink keeps: the oldest go first.
const maxSinkEntries = 10000

func startEventSink(log *slog.Logger) (*eventSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &eventSink{URL: "http://" + ln.Addr().String(), log: log}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *eventSink) close() { _ = s.srv.Close() }

// ServeHTTP answers PutEvents as EventBridge does (JSON 1.1).
func (s *eventSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	fn, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	if r.Header.Get("X-Amz-Target") != "AWSEvents.PutEvents" {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"__type":"UnknownOperationException","message":"local-cloud's event sink serves PutEvents only"}`))
		return
	}
	var in struct {
		Entries []struct {
			EventBusName, Source, DetailType, Detail string
		}
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err == nil {
		err = json.Unmarshal(body, &in)
	}
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"__type":"ValidationException","message":"the request is not a PutEvents document"}`))
		return
	}
	type result struct {
		EventID string `json:"EventId"`
	}
	out := struct {
		Entries          []result
		FailedEntryCount int
	}{}
	now := time.Now()
	s.mu.Lock()
	for _, e := range in.Entries {
		bus := e.EventBusName
		if bus == "" {
			bus = "default"
		}
		s.entries = append(s.entries, EventEntry{Function: fn, Bus: bus, Source: e.Source, DetailType: e.DetailType,
			Detail: json.RawMessage(e.Detail), At: now})
		out.Entries = append(out.Entries, result{EventID: uuid()})
		s.log.LogAttrs(r.Context(), slog.LevelDebug, "event_put", slog.String("event", "event_put"), slog.String("function", fn),
			slog.String("bus", bus), slog.String("source", e.Source), slog.String("detail_type", e.DetailType))
	}
	if over := len(s.entries) - maxSinkEntries; over > 0 {
		s.entries = slices.Delete(s.entries, 0, over)
	}
	s.mu.Unlock()
	b, _ := json.Marshal(out)
	_, _ = w.Write(b)
}

// Events returns the events the functions put on event buses, oldest
// first (at most the last 10,000).
func (c *Cloud) Events() []EventEntry {
	if c.sink == nil {
		return nil
	}
	c.sink.mu.Lock()
	defer c.sink.mu.Unlock()
	return slices.Clone(c.sink.entries)
}
