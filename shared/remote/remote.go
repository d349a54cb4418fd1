// Package remote builds remote REST steps: pipeline steps executed by a
// remote HTTP worker. The runtime keeps the execution record, lease,
// retry policy and re-drive; the worker is a stateless executor of one
// step.
//
// A remote step POSTs the step's input payload to Spec.URL, with the
// input's Content-Type (and X-Message-Type for protobuf) and these
// headers:
//
//	X-Qasync-Execution-Id   the execution id
//	X-Qasync-Tenant-Id      the tenant
//	X-Qasync-Transition-Key executionId:stepIndex:attempt
//	X-Qasync-Attempt        the attempt number, from 1
//	X-Qasync-Fencing-Token  the row version at claim
//	Idempotency-Key         stable across every attempt of this step
//
// A 2xx response's body is the step's output (its Content-Type decides
// the payload encoding: JSON, protobuf with X-Message-Type, raw
// otherwise). A 4xx fails the step non-retryably, a 5xx (or a transport
// error before the deadline) retryably; an error body {"code", "message"}
// (as Handler writes) gives the code, otherwise remote_http_<status>.
//
// At 75% of Spec.Deadline the step logs remote_transition_deadline_warning
// (execution_id, attempt, transition_key, protocol, target, elapsed_ms,
// deadline_ms; never payload data); the call goes on. When the deadline
// passes, or the worker cuts the call short after sending it (its own
// deadline, a shutdown), the step returns a
// *pipeline.OutcomeUnknownError: the runtime
// parks the execution as REMOTE_OUTCOME_UNKNOWN, logs
// remote_transition_outcome_unknown with decision=automatic_retry_suppressed
// and does not retry it. An operator re-drives it, once the remote
// invocation is known to make no more effects, with
// {"confirmedNoRemoteEffect": true}. A call is never started when the
// worker's own deadline (a Lambda invocation's time left) is nearer than
// Spec.Deadline: the step is handed back for another worker instead
// (CodeInsufficientTime).
package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
)

// Request headers a remote step sends.
const (
	HeaderExecutionID    = "X-Qasync-Execution-Id"
	HeaderTenantID       = "X-Qasync-Tenant-Id"
	HeaderTransitionKey  = "X-Qasync-Transition-Key"
	HeaderAttempt        = "X-Qasync-Attempt"
	HeaderFencingToken   = "X-Qasync-Fencing-Token"
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderMessageType names the protobuf message of a protobuf body.
	HeaderMessageType = "X-Message-Type"
)

// Protocol is the protocol name logged and recorded for REST steps.
const Protocol = "rest"

// DefaultDeadline is the request deadline when Spec.Deadline is zero.
const DefaultDeadline = 30 * time.Second

// MaxResponseBytes bounds the response body read from a remote worker.
const MaxResponseBytes = 64 << 20

// Error codes of remote steps.
const (
	// CodeTransport: the request failed before the deadline (connection
	// refused, reset). Retryable.
	CodeTransport = "remote_transport_error"
	// CodeBadResponse: a 2xx body could not be read or decoded. Retryable.
	CodeBadResponse = "remote_bad_response"
	// CodeBadSpec: the step's URL is not an absolute http(s) URL. Non-retryable.
	CodeBadSpec = "remote_bad_spec"
	// CodeInsufficientTime: the worker's own deadline (the Lambda
	// invocation's time left) is nearer than the call's deadline, so the
	// call was not started; the step is handed back for another worker
	// (pipeline.HandBack), and fails with this code only if that keeps
	// happening (the runtime's release limit).
	CodeInsufficientTime = "remote_insufficient_time"
)

// Spec configures a remote step.
type Spec struct {
	// URL is the remote worker's endpoint (http or https).
	URL string
	// Deadline bounds one call. Default DefaultDeadline. It may exceed
	// the lease: the lease is renewed while the call runs.
	Deadline time.Duration
	// Client sends the requests. Default: a client without timeout (the
	// deadline is the step's own).
	Client *http.Client
	// Header holds extra request headers (an API key, say); they never
	// override the headers above.
	Header http.Header
}

// Step returns a pipeline step run by the remote worker at spec.URL. Its
// input and output are payloads, passed through untouched.
func Step(name string, spec Spec, opts ...pipeline.StepOption) pipeline.Step {
	if spec.Deadline <= 0 {
		spec.Deadline = DefaultDeadline
	}
	if spec.Client == nil {
		spec.Client = &http.Client{}
	}
	target := redact(spec.URL)
	s := pipeline.Step{Name: name, Run: func(ctx context.Context, info pipeline.StepInfo, in payload.Payload) (payload.Payload, error) {
		return call(ctx, spec, target, info, in)
	}}
	for _, o := range opts {
		o(&s)
	}
	return s
}

// errDeadline is the cancellation cause of a call whose deadline passed.
var errDeadline = errors.New("remote: deadline passed")

func call(ctx context.Context, spec Spec, target string, info pipeline.StepInfo, in payload.Payload) (payload.Payload, error) {
	u, err := url.Parse(spec.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return payload.Payload{}, pipeline.NonRetryable(CodeBadSpec, fmt.Errorf("step %s: URL %q is not an absolute http(s) URL", info.StepName, target))
	}
	log := info.Logger
	if log == nil {
		log = slog.Default()
	}
	// Never start a call that cannot finish before the worker's own
	// deadline: cut short, its outcome would be unknown.
	if d, ok := ctx.Deadline(); ok && time.Until(d) < spec.Deadline {
		return payload.Payload{}, pipeline.HandBack(CodeInsufficientTime,
			fmt.Errorf("step %s: %s left before this worker's deadline, the call to %s may take %s", info.StepName,
				time.Until(d).Round(time.Millisecond), target, spec.Deadline))
	}
	start := time.Now()
	cctx, cancel := context.WithTimeoutCause(ctx, spec.Deadline, errDeadline)
	defer cancel()
	warned := make(chan struct{})
	warn := time.AfterFunc(spec.Deadline*3/4, func() {
		defer close(warned)
		log.LogAttrs(ctx, slog.LevelWarn, "remote_transition_deadline_warning",
			slog.String("event", "remote_transition_deadline_warning"),
			slog.String("execution_id", info.ExecutionID), slog.Int("attempt", info.Attempt),
			slog.String("transition_key", info.TransitionKey), slog.String("protocol", Protocol),
			slog.String("target", target), slog.Int64("elapsed_ms", time.Since(start).Milliseconds()),
			slog.Int64("deadline_ms", spec.Deadline.Milliseconds()))
	})
	defer func() {
		if !warn.Stop() {
			<-warned // the warning is being written: let it finish first
		}
	}()

	req, err := http.NewRequestWithContext(cctx, http.MethodPost, spec.URL, bytes.NewReader(in.Data))
	if err != nil {
		return payload.Payload{}, pipeline.NonRetryable(CodeBadSpec, fmt.Errorf("step %s: build request: %w", info.StepName, err))
	}
	for k, vs := range spec.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	ct := in.ContentType
	if ct == "" {
		ct = payload.ContentTypeOctet
	}
	req.Header.Set("Content-Type", ct)
	if in.Encoding == payload.EncodingProtobuf && in.Message != "" {
		req.Header.Set(HeaderMessageType, in.Message)
	}
	req.Header.Set(HeaderExecutionID, info.ExecutionID)
	req.Header.Set(HeaderTenantID, info.TenantID)
	req.Header.Set(HeaderTransitionKey, info.TransitionKey)
	req.Header.Set(HeaderAttempt, strconv.Itoa(info.Attempt))
	req.Header.Set(HeaderFencingToken, strconv.FormatInt(info.FencingToken, 10))
	req.Header.Set(HeaderIdempotencyKey, info.IdempotencyKey)

	unknown := func() error {
		return &pipeline.OutcomeUnknownError{Protocol: Protocol, Target: target, Deadline: spec.Deadline, Elapsed: time.Since(start)}
	}
	// wrote records that the request reached the wire: from then on a call
	// cut short has an unknown outcome.
	var wrote atomic.Bool
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { wrote.Store(true) },
	}))
	resp, err := spec.Client.Do(req)
	if err != nil {
		if context.Cause(cctx) == errDeadline && ctx.Err() == nil {
			return payload.Payload{}, unknown()
		}
		if ctx.Err() != nil && wrote.Load() {
			// Cut short by the worker (its deadline, a shutdown) after the
			// request was sent: as unknown as a passed deadline, never an
			// automatic retry. (A lost lease is the runtime's to tell: it
			// commits nothing then.)
			return payload.Payload{}, unknown()
		}
		if ctx.Err() != nil {
			return payload.Payload{}, context.Cause(ctx) // not sent: the runtime hands the step back
		}
		return payload.Payload{}, pipeline.Retryable(CodeTransport, fmt.Errorf("step %s: POST %s: %s", info.StepName, target, transportMessage(err)))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err != nil {
		// The worker answered but the body did not arrive: past the
		// deadline the outcome is as unknown as without an answer.
		if context.Cause(cctx) == errDeadline || ctx.Err() != nil {
			return payload.Payload{}, unknown()
		}
		return payload.Payload{}, pipeline.Retryable(CodeBadResponse, fmt.Errorf("step %s: read response: %s", info.StepName, transportMessage(err)))
	}
	if len(body) > MaxResponseBytes {
		return payload.Payload{}, pipeline.NonRetryable(CodeBadResponse, fmt.Errorf("step %s: response over %d bytes", info.StepName, MaxResponseBytes))
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		out, err := decode(resp.Header, body)
		if err != nil {
			return payload.Payload{}, pipeline.NonRetryable(CodeBadResponse, fmt.Errorf("step %s: %w", info.StepName, err))
		}
		return out, nil
	}
	code, msg := errorBody(resp, body)
	err = fmt.Errorf("step %s: remote worker answered %d: %s", info.StepName, resp.StatusCode, msg)
	if resp.StatusCode >= 400 && resp.StatusCode < 500 {
		return payload.Payload{}, pipeline.NonRetryable(code, err)
	}
	return payload.Payload{}, pipeline.Retryable(code, err)
}

// decode turns a 2xx response into the step's output payload.
func decode(h http.Header, body []byte) (payload.Payload, error) {
	ct := h.Get("Content-Type")
	mt, params, _ := mime.ParseMediaType(ct)
	switch {
	case mt == payload.ContentTypeJSON || strings.HasSuffix(mt, "+json"):
		p, err := payload.RawJSON(body)
		if err != nil {
			return p, errors.New("the response body is not valid JSON")
		}
		return p, nil
	case mt == payload.ContentTypeProtobuf:
		msg := h.Get(HeaderMessageType)
		if msg == "" {
			msg = params["messagetype"]
		}
		return payload.Payload{Encoding: payload.EncodingProtobuf, ContentType: payload.ContentTypeProtobuf, Message: msg, Data: body}, nil
	case ct == "":
		return payload.Raw(payload.ContentTypeOctet, body), nil
	}
	return payload.Raw(ct, body), nil
}

// errorBody reads the code and message of an error response: the JSON
// {"code", "message"} Handler writes, else remote_http_<status> and the
// status text (never the body: it may hold payload data).
func errorBody(resp *http.Response, body []byte) (code, msg string) {
	code, msg = "remote_http_"+strconv.Itoa(resp.StatusCode), http.StatusText(resp.StatusCode)
	var e struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &e) == nil && e.Code != "" && len(e.Code) <= 128 {
		code = e.Code
		if e.Message != "" {
			msg = e.Message
		}
	}
	return code, msg
}

// transportMessage is a transport error without the URL's query or user
// info (url.Error repeats the URL).
func transportMessage(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Op + ": " + ue.Err.Error()
	}
	return err.Error()
}

// redact is the URL as logged: scheme, host and path only.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "invalid-url"
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
}
