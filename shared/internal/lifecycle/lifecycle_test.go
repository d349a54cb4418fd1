package lifecycle_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"

	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/lifecycle"
	"github.com/qasync/qasync/shared/internal/logtest"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/store"
)

const (
	bus    = "qasync-lifecycle"
	marker = "PAYLOAD-MARKER-7f3a"
)

// request is one PutEvents call as the loopback server saw it.
type request struct {
	Target      string
	ContentType string
	Body        string
	Entries     []entry
}

// entry is a PutEvents request entry on the wire (AWS JSON 1.1).
type entry struct {
	EventBusName string
	Source       string
	DetailType   string
	Detail       string
	Time         json.Number
	Resources    []string
}

// server is a loopback EventBridge speaking PutEvents.
type server struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []request
}

// newServer starts a server answering with respond (nil: success).
func newServer(t *testing.T, respond func(w http.ResponseWriter, r *http.Request)) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := request{Target: r.Header.Get("X-Amz-Target"), ContentType: r.Header.Get("Content-Type"), Body: string(body)}
		var in struct{ Entries []entry }
		dec := json.NewDecoder(strings.NewReader(req.Body))
		dec.UseNumber()
		if err := dec.Decode(&in); err != nil {
			t.Errorf("server: decode request %q: %v", body, err)
		}
		req.Entries = in.Entries
		s.mu.Lock()
		s.reqs = append(s.reqs, req)
		s.mu.Unlock()
		if respond != nil {
			respond(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		_, _ = io.WriteString(w, `{"FailedEntryCount":0,"Entries":[{"EventId":"evt-0001"}]}`)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) requests() []request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqs)
}

// client returns an EventBridge client on s with quick retries.
func (s *server) client() *eventbridge.Client {
	return eventbridge.New(eventbridge.Options{
		BaseEndpoint: aws.String(s.URL), Region: "us-east-1", Credentials: aws.AnonymousCredentials{},
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = 2
			o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return 0, nil })
		}),
	})
}

var (
	created = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	at      = created.Add(1500 * time.Millisecond)
)

// event is a terminal event whose row holds inline payload bytes with the
// marker in both its input and result.
func event(kind engine.EventKind, status store.Status, failure *store.Failure) engine.Event {
	inline := []byte(`{"secret":"` + marker + `"}`)
	ref := payload.Ref{Encoding: "json", ContentType: "application/json", Length: int64(len(inline)), SHA256: "ab12", Inline: inline}
	return engine.Event{
		Kind: kind,
		Execution: store.Execution{
			TenantID: "tenant-a", ExecutionID: "exec-1", PipelineID: "orders.fulfil", Status: status, Version: 7,
			StepIndex: 2, StepName: "charge", Attempt: 3, IdempotencyKey: "idem-" + marker,
			Input: ref, Result: ref, Error: failure, Note: "note " + marker,
			CreatedAt: created, UpdatedAt: at, ExpiresAt: created.Add(24 * time.Hour),
		},
		Latency: at.Sub(created),
		At:      at,
	}
}

// logLines decodes the captured JSON log lines.
func logLines(t *testing.T, b *logtest.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range b.Lines() {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// findLog returns the first log line with msg.
func findLog(t *testing.T, b *logtest.Buffer, msg string) map[string]any {
	t.Helper()
	for _, m := range logLines(t, b) {
		if m["msg"] == msg {
			return m
		}
	}
	t.Fatalf("no %s log line in:\n%s", msg, b.String())
	return nil
}

func TestTerminalEventsArePublished(t *testing.T) {
	failure := &store.Failure{Code: "card_declined", Message: "declined — ünïcode", TerminalReason: store.ReasonNonRetryable}
	for _, tc := range []struct {
		kind       engine.EventKind
		status     store.Status
		failure    *store.Failure
		detailType string
	}{
		{engine.EventSucceeded, store.Succeeded, nil, lifecycle.DetailTypeSucceeded},
		{engine.EventDeadLettered, store.DLQ, failure, lifecycle.DetailTypeDeadLettered},
		{engine.EventOutcomeUnknown, store.RemoteOutcomeUnknown, &store.Failure{Code: "timeout", Message: "no answer"}, lifecycle.DetailTypeOutcomeUnknown},
		{engine.EventCancelled, store.Cancelled, nil, lifecycle.DetailTypeCancelled},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, nil)
			logs, log := logtest.New()
			p := lifecycle.New(srv.client(), bus, lifecycle.WithLogger(log))
			ev := event(tc.kind, tc.status, tc.failure)
			if tc.kind == engine.EventCancelled {
				ev.Execution.CancelReason = "duplicate order, OPS-7"
			}
			p.Observe(context.Background(), ev)

			reqs := srv.requests()
			if len(reqs) != 1 {
				t.Fatalf("%d PutEvents requests, want 1", len(reqs))
			}
			req := reqs[0]
			if req.Target != "AWSEvents.PutEvents" {
				t.Errorf("X-Amz-Target = %q", req.Target)
			}
			if req.ContentType != "application/x-amz-json-1.1" {
				t.Errorf("Content-Type = %q", req.ContentType)
			}
			for _, leak := range []string{marker, base64.StdEncoding.EncodeToString(ev.Execution.Input.Inline)} {
				if strings.Contains(req.Body, leak) {
					t.Errorf("request carries payload bytes (%q):\n%s", leak, req.Body)
				}
			}
			if len(req.Entries) != 1 {
				t.Fatalf("%d entries, want 1", len(req.Entries))
			}
			e := req.Entries[0]
			if e.EventBusName != bus || e.Source != "qasync" || e.DetailType != tc.detailType {
				t.Errorf("entry bus=%q source=%q detail-type=%q, want %q %q %q", e.EventBusName, e.Source, e.DetailType, bus, "qasync", tc.detailType)
			}
			if len(e.Resources) != 0 {
				t.Errorf("Resources = %v, want none", e.Resources)
			}
			if secs, err := e.Time.Float64(); err != nil || time.UnixMilli(int64(secs*1000)).UTC() != at {
				t.Errorf("Time = %s, want %v", e.Time, at)
			}

			// The detail has exactly the documented keys.
			var raw map[string]json.RawMessage
			if err := json.Unmarshal([]byte(e.Detail), &raw); err != nil {
				t.Fatalf("detail %q: %v", e.Detail, err)
			}
			keys := []string{"tenantId", "executionId", "pipelineId", "status", "stepIndex", "stepName", "attempt",
				"version", "submittedAt", "finishedAt", "latencyMs"}
			if tc.failure != nil {
				keys = append(keys, "error")
			}
			if tc.kind == engine.EventCancelled {
				keys = append(keys, "cancelReason")
			}
			var got []string
			for k := range raw {
				got = append(got, k)
			}
			slices.Sort(got)
			slices.Sort(keys)
			if !slices.Equal(got, keys) {
				t.Errorf("detail keys %v, want %v", got, keys)
			}

			var d lifecycle.Detail
			if err := json.Unmarshal([]byte(e.Detail), &d); err != nil {
				t.Fatal(err)
			}
			want := lifecycle.Detail{
				TenantID: "tenant-a", ExecutionID: "exec-1", PipelineID: "orders.fulfil", Status: string(tc.status),
				StepIndex: 2, StepName: "charge", Attempt: 3, Version: 7,
				SubmittedAt: created, FinishedAt: at, LatencyMs: 1500,
			}
			if tc.failure != nil {
				want.Error = &lifecycle.ErrorDetail{Code: tc.failure.Code, Message: tc.failure.Message, TerminalReason: tc.failure.TerminalReason}
			}
			want.CancelReason = ev.Execution.CancelReason
			if !d.SubmittedAt.Equal(want.SubmittedAt) || !d.FinishedAt.Equal(want.FinishedAt) {
				t.Errorf("times submitted=%v finished=%v, want %v %v", d.SubmittedAt, d.FinishedAt, want.SubmittedAt, want.FinishedAt)
			}
			d.SubmittedAt, d.FinishedAt, want.SubmittedAt, want.FinishedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
			if (d.Error == nil) != (want.Error == nil) || (d.Error != nil && *d.Error != *want.Error) {
				t.Errorf("error %+v, want %+v", d.Error, want.Error)
			}
			d.Error, want.Error = nil, nil
			if d != want {
				t.Errorf("detail\n got  %+v\n want %+v", d, want)
			}
			if tc.failure != nil && tc.failure.TerminalReason == "" && strings.Contains(e.Detail, "terminalReason") {
				t.Errorf("empty terminalReason sent: %s", e.Detail)
			}

			line := findLog(t, logs, lifecycle.LogPublished)
			if line["level"] != "DEBUG" || line["event"] != lifecycle.LogPublished || line["event_id"] != "evt-0001" ||
				line["execution_id"] != "exec-1" || line["detail_type"] != tc.detailType {
				t.Errorf("published log line %v", line)
			}
		})
	}
}

func TestNonTerminalEventsSendNothing(t *testing.T) {
	srv := newServer(t, nil)
	logs, log := logtest.New()
	p := lifecycle.New(srv.client(), bus, lifecycle.WithLogger(log))
	for _, kind := range []engine.EventKind{engine.EventTransitionCommitted, engine.EventRetryScheduled,
		engine.EventLeaseTakeover, engine.EventSweepCompleted, "something_new"} {
		p.Observe(context.Background(), event(kind, store.Running, nil))
	}
	if n := len(srv.requests()); n != 0 {
		t.Fatalf("%d PutEvents requests for non-terminal events, want 0", n)
	}
	if s := logs.String(); s != "" {
		t.Fatalf("logged for non-terminal events:\n%s", s)
	}
}

func TestCancelledContextStillPublishes(t *testing.T) {
	srv := newServer(t, nil)
	p := lifecycle.New(srv.client(), bus, lifecycle.WithLogger(slog.New(slog.DiscardHandler)))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p.Observe(ctx, event(engine.EventSucceeded, store.Succeeded, nil))
	if n := len(srv.requests()); n != 1 {
		t.Fatalf("%d PutEvents requests, want 1: the committed state is reported even when the caller's context ended", n)
	}
}

func TestFailuresAreLoggedNotReturned(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		respond func(w http.ResponseWriter, r *http.Request)
		attr    string
		value   string
	}{
		{"failed entry", 0, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/x-amz-json-1.1")
			_, _ = io.WriteString(w, `{"FailedEntryCount":1,"Entries":[{"ErrorCode":"InternalFailure","ErrorMessage":"try later"}]}`)
		}, "error_code", "InternalFailure"},
		{"http 500", 0, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/x-amz-json-1.1")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, `{"__type":"InternalException","message":"boom"}`)
		}, "error", "InternalException"},
		{"slow server", 150 * time.Millisecond, func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
		}, "error", "deadline exceeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, tc.respond)
			logs, log := logtest.New()
			opts := []lifecycle.Option{lifecycle.WithLogger(log)}
			if tc.timeout > 0 {
				opts = append(opts, lifecycle.WithTimeout(tc.timeout))
			}
			p := lifecycle.New(srv.client(), bus, opts...)
			// Observe returns; with the slow server, because its timeout
			// cut the call (the log says deadline exceeded, not the
			// server's answer 10 s later).
			p.Observe(context.Background(), event(engine.EventDeadLettered, store.DLQ, nil))
			if len(srv.requests()) == 0 && tc.timeout == 0 { // a loaded machine may time out before the request arrives
				t.Fatal("no PutEvents request reached the server")
			}
			line := findLog(t, logs, lifecycle.LogPublishFailed)
			if line["level"] != "WARN" || line["event"] != lifecycle.LogPublishFailed || line["execution_id"] != "exec-1" ||
				line["detail_type"] != lifecycle.DetailTypeDeadLettered {
				t.Errorf("failure log line %v", line)
			}
			if v, _ := line[tc.attr].(string); !strings.Contains(v, tc.value) {
				t.Errorf("failure log %s = %q, want it to mention %q", tc.attr, v, tc.value)
			}
			for _, m := range logLines(t, logs) {
				if m["msg"] == lifecycle.LogPublished {
					t.Errorf("a failed publish logged %s", lifecycle.LogPublished)
				}
			}
		})
	}
}

func TestSourceConstant(t *testing.T) {
	if lifecycle.Source != "qasync" {
		t.Fatalf("Source = %q", lifecycle.Source)
	}
}

func TestNilPublisherIgnoresEvents(t *testing.T) {
	var p *lifecycle.Publisher
	p.Observe(context.Background(), event(engine.EventSucceeded, store.Succeeded, nil))
}
