package remote

import (
	"encoding/json"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"

	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
)

// MaxRequestBytes bounds the request body Handler reads.
const MaxRequestBytes = 64 << 20

// ErrorResponse is the body of a remote worker's error answer.
type ErrorResponse struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Handler is a minimal remote worker: an http.Handler that runs fn (any
// pipeline step's Run, e.g. pipeline.NewStep(...).Run) for each POST. The
// StepInfo it passes is rebuilt from the request headers (no logger
// fields beyond them, no effect log). The output is answered with 200;
// an error with 422 when it is non-retryable (the caller's step fails
// without retry) and 503 when it is retryable, the body an ErrorResponse.
func Handler(fn pipeline.StepFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "POST only")
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
		if err != nil {
			writeError(w, http.StatusRequestEntityTooLarge, "request_too_large", "request body too large or unreadable")
			return
		}
		in, err := decode(r.Header, body)
		if err != nil {
			writeError(w, http.StatusBadRequest, "invalid_input", err.Error())
			return
		}
		attempt, _ := strconv.Atoi(r.Header.Get(HeaderAttempt))
		fence, _ := strconv.ParseInt(r.Header.Get(HeaderFencingToken), 10, 64)
		info := pipeline.StepInfo{
			ExecutionID: r.Header.Get(HeaderExecutionID), TenantID: r.Header.Get(HeaderTenantID),
			TransitionKey: r.Header.Get(HeaderTransitionKey), Attempt: attempt, FencingToken: fence,
			IdempotencyKey: r.Header.Get(HeaderIdempotencyKey),
		}
		info.Logger = slog.Default().With(slog.String("execution_id", info.ExecutionID),
			slog.String("transition_key", info.TransitionKey), slog.Int("attempt", attempt))
		out, err := run(fn, r, info, in)
		if err != nil {
			code, msg, retryable := pipeline.Classify(err)
			status := http.StatusUnprocessableEntity
			if retryable {
				status = http.StatusServiceUnavailable
			}
			writeError(w, status, code, msg)
			return
		}
		ct := out.ContentType
		if ct == "" {
			ct = payload.ContentTypeOctet
		}
		w.Header().Set("Content-Type", ct)
		if out.Encoding == payload.EncodingProtobuf && out.Message != "" {
			w.Header().Set(HeaderMessageType, out.Message)
		}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(out.Data)
	})
}

// run calls fn, turning a panic into a retryable error.
func run(fn pipeline.StepFunc, r *http.Request, info pipeline.StepInfo, in payload.Payload) (out payload.Payload, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = pipeline.Retryable(pipeline.CodeStepPanic, errPanic)
		}
	}()
	return fn(r.Context(), info, in)
}

type panicError struct{}

func (panicError) Error() string { return "remote step panicked" }

var errPanic = panicError{}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", mime.FormatMediaType(payload.ContentTypeJSON, nil))
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(ErrorResponse{Code: code, Message: msg})
}
