package remote_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/remote"
)

func info(log *slog.Logger) pipeline.StepInfo {
	return pipeline.StepInfo{ExecutionID: "e-1", TenantID: "t1", StepName: "s", Attempt: 3,
		TransitionKey: "e-1:0:3", IdempotencyKey: "t1:e-1:0", FencingToken: 7, Logger: log}
}

func TestErrorsClassified(t *testing.T) {
	for _, tc := range []struct {
		status    int
		body      string
		code      string
		retryable bool
	}{
		{400, `{"code":"bad_order","message":"no lines"}`, "bad_order", false},
		{404, `not json`, "remote_http_404", false},
		{500, ``, "remote_http_500", true},
		{503, `{"code":"busy"}`, "busy", true},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(tc.status)
			_, _ = w.Write([]byte(tc.body))
		}))
		in, _ := payload.JSON(map[string]string{"secret": "payload-bytes"})
		_, err := remote.Step("s", remote.Spec{URL: srv.URL}).Run(context.Background(), info(nil), in)
		srv.Close()
		code, msg, retryable := pipeline.Classify(err)
		if code != tc.code || retryable != tc.retryable || strings.Contains(msg, "payload-bytes") {
			t.Errorf("%d: code %s retryable %v msg %q", tc.status, code, retryable, msg)
		}
	}
}

func TestTransportErrorIsRetryable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL + "/x?token=hidden"
	srv.Close()
	in, _ := payload.JSON(1)
	_, err := remote.Step("s", remote.Spec{URL: url}).Run(context.Background(), info(nil), in)
	code, msg, retryable := pipeline.Classify(err)
	if code != remote.CodeTransport || !retryable || strings.Contains(msg, "hidden") {
		t.Fatalf("code %s retryable %v msg %q", code, retryable, msg)
	}
	if _, err := remote.Step("s", remote.Spec{URL: "ftp://x"}).Run(context.Background(), info(nil), in); err == nil {
		t.Fatal("ftp URL accepted")
	} else if code, _, retryable := pipeline.Classify(err); code != remote.CodeBadSpec || retryable {
		t.Fatalf("bad spec: %s %v", code, retryable)
	}
}

// TestDeadline: a worker that does not answer in time gives an
// OutcomeUnknownError, after one warning at 75% of the deadline.
func TestDeadline(t *testing.T) {
	release := make(chan struct{})
	abandoned := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // then the server notices the client going
		select {
		case <-release:
		case <-r.Context().Done():
			abandoned <- struct{}{}
		}
	}))
	defer srv.Close()
	defer close(release)
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	in, _ := payload.JSON(map[string]string{"secret": "payload-bytes"})
	_, err := remote.Step("s", remote.Spec{URL: srv.URL + "/w?k=v", Deadline: 400 * time.Millisecond}).Run(context.Background(), info(log), in)
	ou, ok := pipeline.AsOutcomeUnknown(err)
	if !ok || ou.Protocol != "rest" || ou.Deadline != 400*time.Millisecond || ou.Elapsed < 400*time.Millisecond || ou.Target != srv.URL+"/w" {
		t.Fatalf("err = %v (%+v)", err, ou)
	}
	// The call ended on its deadline, the worker still holding it (it
	// answers only when the test ends): the client gave the request up.
	select {
	case <-abandoned:
	case <-time.After(time.Minute):
		t.Fatal("the call returned, yet the worker's request was never abandoned")
	}
	logs := buf.String()
	if strings.Count(logs, `"msg":"remote_transition_deadline_warning"`) != 1 || strings.Contains(logs, "payload-bytes") ||
		!strings.Contains(logs, `"transition_key":"e-1:0:3"`) || !strings.Contains(logs, `"deadline_ms":400`) || strings.Contains(logs, "k=v") {
		t.Fatalf("logs: %s", logs)
	}
}

// TestCallCutShortByTheWorker: a call the worker cuts short after sending
// it (a shutdown, the Lambda deadline) has an unknown outcome, never an
// automatic retry; a call that could not finish before the worker's own
// deadline is not started at all (the step is handed back).
func TestCallCutShortByTheWorker(t *testing.T) {
	var calls atomic.Int32
	release := make(chan struct{})
	received := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		select {
		case received <- struct{}{}:
		default:
		}
		select { // hangs until the test ends
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	in, _ := payload.JSON(map[string]int{"n": 1})
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))

	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-received; cancel() }() // a shutdown while the call runs (the worker has it)
	_, err := remote.Step("s", remote.Spec{URL: srv.URL, Deadline: time.Minute}).Run(ctx, info(log), in)
	if _, ok := pipeline.AsOutcomeUnknown(err); !ok {
		t.Fatalf("call cut short after it was sent: err = %v, want an unknown outcome", err)
	}

	before := calls.Load()
	dctx, dcancel := context.WithTimeout(context.Background(), 2*time.Second) // the worker's own deadline
	defer dcancel()
	_, err = remote.Step("s", remote.Spec{URL: srv.URL, Deadline: 5 * time.Second}).Run(dctx, info(log), in)
	hb, ok := pipeline.AsHandBack(err)
	if !ok || hb.Code != remote.CodeInsufficientTime {
		t.Fatalf("call that cannot finish in time: err = %v, want a hand-back with %s", err, remote.CodeInsufficientTime)
	}
	if calls.Load() != before {
		t.Fatal("the call was started anyway")
	}
}

func TestHandler(t *testing.T) {
	var got pipeline.StepInfo
	h := remote.Handler(pipeline.NewStep("w", func(_ context.Context, info pipeline.StepInfo, in []int) ([]int, error) {
		got = info
		if len(in) == 0 {
			return nil, pipeline.NonRetryable("empty", errors.New("no numbers"))
		}
		return append(in, len(in)), nil
	}).Run)
	srv := httptest.NewServer(h)
	defer srv.Close()
	step := remote.Step("w", remote.Spec{URL: srv.URL})
	in, _ := payload.JSON([]int{4, 5})
	out, err := step.Run(context.Background(), info(nil), in)
	if err != nil || string(out.Data) != "[4,5,2]" || out.Encoding != payload.EncodingJSON {
		t.Fatalf("out %s %v", out.Data, err)
	}
	if got.ExecutionID != "e-1" || got.TenantID != "t1" || got.Attempt != 3 || got.TransitionKey != "e-1:0:3" || got.IdempotencyKey != "t1:e-1:0" || got.FencingToken != 7 {
		t.Fatalf("info = %+v", got)
	}
	empty, _ := payload.JSON([]int{})
	_, err = step.Run(context.Background(), info(nil), empty)
	if code, msg, retryable := pipeline.Classify(err); code != "empty" || retryable || !strings.Contains(msg, "no numbers") {
		t.Fatalf("non-retryable: %s %q %v", code, msg, retryable)
	}
	raw := payload.Raw("text/csv", []byte("a,b"))
	if _, err := remote.Step("w", remote.Spec{URL: srv.URL}).Run(context.Background(), info(nil), raw); err == nil {
		t.Fatal("csv decoded as JSON ints")
	}
}
