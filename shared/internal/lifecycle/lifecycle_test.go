package lifecycle_test

import (
	"context"
	"encoding/json"
	"io"
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

	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/lifecycle"
	"github.com/qasync/qasync/shared/internal/outbox"
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
		var out []string
		for range in.Entries {
			out = append(out, `{"EventId":"evt-0001"}`)
		}
		_, _ = io.WriteString(w, `{"FailedEntryCount":0,"Entries":[`+strings.Join(out, ",")+`]}`)
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

var created = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

// terminal returns the lifecycle event of a row that ended in status
// (its history event typ), the row holding inline payload bytes with the
// marker in its input and result.
func terminal(t *testing.T, status store.Status, failure *store.Failure, typ history.Type) outbox.Event {
	t.Helper()
	inline := []byte(`{"secret":"` + marker + `"}`)
	ref := payload.Ref{Encoding: "json", ContentType: "application/json", Length: int64(len(inline)), SHA256: "ab12", Inline: inline}
	old := store.Execution{
		TenantID: "tenant-a", ExecutionID: "exec-1.inc", PipelineID: "orders.fulfil", Status: store.Running, Version: 6,
		StepIndex: 2, StepName: "charge", Attempt: 3, IdempotencyKey: "idem-" + marker, CreateToken: "tok",
		Input: ref, CreatedAt: created, UpdatedAt: created.Add(time.Second), ExpiresAt: created.Add(24 * time.Hour),
	}
	cur := old
	cur.Status, cur.Version, cur.Error, cur.Result, cur.Note = status, 7, failure, ref, "note "+marker
	cur.UpdatedAt = created.Add(1500 * time.Millisecond)
	if status == store.Cancelled {
		cur.CancelReason, cur.CancelRequestedAt = "duplicate order, OPS-7", cur.UpdatedAt
	}
	evs := outbox.Derive(&old, &cur, outbox.Types{typ: true})
	if len(evs) != 1 {
		t.Fatalf("%s: %d events, want 1", typ, len(evs))
	}
	return evs[0]
}

// TestSinkPutsEachEvent: each event is one entry on the bus, with the
// source, the detail type of its type, its time, and a detail carrying
// its id and no payload bytes.
func TestSinkPutsEachEvent(t *testing.T) {
	failure := &store.Failure{Code: "card_declined", Message: "declined — ünïcode", TerminalReason: store.ReasonRetryExhausted}
	for _, tc := range []struct {
		status     store.Status
		failure    *store.Failure
		typ        history.Type
		detailType string
	}{
		{store.Succeeded, nil, history.Succeeded, lifecycle.DetailTypeSucceeded},
		{store.DLQ, failure, history.DeadLettered, lifecycle.DetailTypeDeadLettered},
		{store.Failed, &store.Failure{Code: "bad_item", Message: "no sku", TerminalReason: store.ReasonRejected}, outbox.Rejected, lifecycle.DetailTypeRejected},
		{store.RemoteOutcomeUnknown, &store.Failure{Code: "timeout", Message: "no answer"}, history.OutcomeUnknown, lifecycle.DetailTypeOutcomeUnknown},
		{store.Cancelled, nil, history.Cancelled, lifecycle.DetailTypeCancelled},
	} {
		t.Run(string(tc.typ), func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, nil)
			ev := terminal(t, tc.status, tc.failure, tc.typ)
			if err := lifecycle.NewSink(srv.client(), bus).Send(context.Background(), []outbox.Event{ev}); err != nil {
				t.Fatal(err)
			}
			reqs := srv.requests()
			if len(reqs) != 1 || len(reqs[0].Entries) != 1 {
				t.Fatalf("requests %+v, want one of one entry", reqs)
			}
			req := reqs[0]
			if req.Target != "AWSEvents.PutEvents" || req.ContentType != "application/x-amz-json-1.1" {
				t.Errorf("X-Amz-Target %q, Content-Type %q", req.Target, req.ContentType)
			}
			if strings.Contains(req.Body, marker) {
				t.Errorf("request carries payload bytes:\n%s", req.Body)
			}
			e := req.Entries[0]
			if e.EventBusName != bus || e.Source != lifecycle.Source || e.DetailType != tc.detailType {
				t.Errorf("entry bus=%q source=%q detail-type=%q, want %q %q %q", e.EventBusName, e.Source, e.DetailType, bus, lifecycle.Source, tc.detailType)
			}
			if sec, _ := e.Time.Float64(); int64(sec) != created.Add(1500*time.Millisecond).Unix() {
				t.Errorf("Time = %s", e.Time)
			}
			var d lifecycle.Detail
			if err := json.Unmarshal([]byte(e.Detail), &d); err != nil {
				t.Fatal(err)
			}
			want := outbox.ID("tenant-a", "exec-1.inc", 7, tc.typ)
			if d.EventID != want || d.EventID != ev.ID || d.EventType != tc.typ || d.Status != string(tc.status) ||
				d.ExecutionID != "exec-1.inc" || d.Version != 7 || d.LatencyMs != 1500 || d.StepName != "charge" {
				t.Errorf("detail %+v, want event id %s", d, want)
			}
			if (tc.failure == nil) != (d.Error == nil) || (d.Error != nil && (d.Error.Code != tc.failure.Code || d.Error.TerminalReason != tc.failure.TerminalReason)) {
				t.Errorf("detail error %+v, want %+v", d.Error, tc.failure)
			}
			if tc.status == store.Cancelled && d.CancelReason != "duplicate order, OPS-7" {
				t.Errorf("cancel reason %q", d.CancelReason)
			}
		})
	}
}

// TestSinkBatchesTenEntriesARequest: 23 events take three requests of
// 10, 10 and 3 entries, in order.
func TestSinkBatchesTenEntriesARequest(t *testing.T) {
	t.Parallel()
	srv := newServer(t, nil)
	var evs []outbox.Event
	for i := range 23 {
		ev := terminal(t, store.Succeeded, nil, history.Succeeded)
		ev.ID = strings.Repeat("0", 30) + string(rune('a'+i))
		evs = append(evs, ev)
	}
	if err := lifecycle.NewSink(srv.client(), bus).Send(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	var sizes []int
	for _, r := range srv.requests() {
		sizes = append(sizes, len(r.Entries))
	}
	if !slices.Equal(sizes, []int{10, 10, 3}) {
		t.Errorf("entries per request %v, want [10 10 3]", sizes)
	}
}

// TestSinkReportsTheEntriesNotTaken: an entry EventBridge failed
// (FailedEntryCount) is reported, transient unless its code says it will
// never be taken; the others are acknowledged.
func TestSinkReportsTheEntriesNotTaken(t *testing.T) {
	t.Parallel()
	srv := newServer(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		_, _ = io.WriteString(w, `{"FailedEntryCount":2,"Entries":[{"EventId":"e1"},{"ErrorCode":"ThrottlingException","ErrorMessage":"slow down"},{"ErrorCode":"MalformedDetail","ErrorMessage":"bad"}]}`)
	})
	ev := terminal(t, store.Succeeded, nil, history.Succeeded)
	err := lifecycle.NewSink(srv.client(), bus).Send(context.Background(), []outbox.Event{ev, ev, ev})
	acked, retry, dead := outbox.Outcome(3, err)
	if !slices.Equal(acked, []int{0}) || !slices.Equal(retry, []int{1}) || len(dead) != 1 || dead[0].Index != 2 {
		t.Errorf("acked %v, retry %v, dead %+v (error %v)", acked, retry, dead, err)
	}
}

// TestSinkReportsEveryEntryOfAFailedRequest: an unavailable EventBridge
// fails every entry, for a retry.
func TestSinkReportsEveryEntryOfAFailedRequest(t *testing.T) {
	t.Parallel()
	srv := newServer(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"__type":"ServiceUnavailable","message":"down"}`)
	})
	ev := terminal(t, store.Succeeded, nil, history.Succeeded)
	err := lifecycle.NewSink(srv.client(), bus).Send(context.Background(), []outbox.Event{ev, ev})
	acked, retry, dead := outbox.Outcome(2, err)
	if len(acked) != 0 || !slices.Equal(retry, []int{0, 1}) || len(dead) != 0 {
		t.Errorf("acked %v, retry %v, dead %+v (error %v)", acked, retry, dead, err)
	}
}
