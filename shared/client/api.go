package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/qasync/qasync/shared/payload"
)

// ErrMissingArgument is returned, before any request, for an empty id,
// pipeline id or reason.
var ErrMissingArgument = errors.New("client: missing argument")

func missing(what string) error { return fmt.Errorf("%w: %s is required", ErrMissingArgument, what) }

func executionPath(id string) string { return "/v1/executions/" + url.PathEscape(id) }

// Submit submits an execution. A new execution answers 202, a duplicate
// (same idempotency key and body) 200 with Duplicate set; both return the
// submission.
func (c *Client) Submit(ctx context.Context, req SubmitRequest) (Submission, error) {
	if req.PipelineID == "" {
		return Submission{}, missing("the pipeline id")
	}
	k := call{method: http.MethodPost, path: "/v1/pipelines/" + url.PathEscape(req.PipelineID) + "/executions",
		body: req.Body, contentType: req.ContentType, header: http.Header{}}
	if k.body == nil {
		k.body = []byte{}
	}
	if k.contentType == "" {
		k.contentType = payload.ContentTypeJSON
	}
	if req.IdempotencyKey != "" {
		k.header.Set(IdempotencyKeyHeader, req.IdempotencyKey)
	}
	if req.MessageType != "" {
		k.header.Set(MessageTypeHeader, req.MessageType)
	}
	if req.Priority != 0 {
		k.query = url.Values{"priority": {strconv.Itoa(req.Priority)}}
	}
	var s Submission
	_, err := c.doJSON(ctx, k, nil, &s)
	return s, err
}

// Status returns an execution's status document. An unknown id (or
// another tenant's) is a 404 *Error (IsNotFound).
func (c *Client) Status(ctx context.Context, executionID string) (Execution, error) {
	if executionID == "" {
		return Execution{}, missing("the execution id")
	}
	var e Execution
	_, err := c.doJSON(ctx, call{method: http.MethodGet, path: executionPath(executionID)}, nil, &e)
	return e, err
}

// Result returns a succeeded execution's result. Before success it is a
// 409 *Error (IsConflict) whose problem names the ExecutionStatus. It
// reads at most MaxDocumentBytes (ErrResponseTooLarge beyond): ResultTo
// streams a larger one.
func (c *Client) Result(ctx context.Context, executionID string) (Result, error) {
	if executionID == "" {
		return Result{}, missing("the execution id")
	}
	_, h, b, err := c.do(ctx, call{method: http.MethodGet, path: executionPath(executionID) + "/result"})
	if err != nil {
		return Result{}, err
	}
	return Result{ContentType: h.Get("Content-Type"), MessageType: h.Get(MessageTypeHeader), Data: b}, nil
}

// Redrive sends a DLQ or FAILED execution (or a REMOTE_OUTCOME_UNKNOWN one,
// with ConfirmedNoRemoteEffect) back to its failed step for one more
// attempt. An operator route: the admin token locally, its own IAM
// permission behind API Gateway. Another status, or a version that moved,
// is a 409 *Error.
func (c *Client) Redrive(ctx context.Context, executionID string, req RedriveRequest) (Execution, error) {
	if executionID == "" {
		return Execution{}, missing("the execution id")
	}
	if strings.TrimSpace(req.Reason) == "" {
		return Execution{}, missing("the reason")
	}
	var e Execution
	_, err := c.doJSON(ctx, call{method: http.MethodPost, path: executionPath(executionID) + "/redrive", operator: true}, req, &e)
	return e, err
}

// CompleteAwait completes an execution's external await with body (of
// contentType, default application/json): the await step's resume token
// authorizes it, so the request is neither signed nor sent the admin
// token or tenant. A repeat with the same body changes nothing (200).
func (c *Client) CompleteAwait(ctx context.Context, executionID, awaitID, resumeToken string, body []byte, contentType string) (Execution, error) {
	switch {
	case executionID == "":
		return Execution{}, missing("the execution id")
	case awaitID == "":
		return Execution{}, missing("the await id")
	}
	if contentType == "" {
		contentType = payload.ContentTypeJSON
	}
	if body == nil {
		body = []byte{}
	}
	k := call{method: http.MethodPost, path: executionPath(executionID) + "/awaits/" + url.PathEscape(awaitID) + "/complete",
		body: body, contentType: contentType, header: http.Header{}, unauthenticated: true}
	if resumeToken != "" {
		k.header.Set(ResumeTokenHeader, resumeToken)
	}
	var e Execution
	_, err := c.doJSON(ctx, k, nil, &e)
	return e, err
}

// List returns one page of the caller's executions, newest first. A bad
// status, limit or cursor is a 400 *Error (IsBadRequest). With
// q.IdempotencyKey it returns the key's live execution (a page of one, or
// of none).
func (c *Client) List(ctx context.Context, q ListQuery) (ExecutionPage, error) {
	v := url.Values{}
	if q.PipelineID != "" {
		v.Set("pipelineId", q.PipelineID)
	}
	if len(q.Statuses) > 0 {
		s := make([]string, len(q.Statuses))
		for i, st := range q.Statuses {
			s[i] = string(st)
		}
		v.Set("status", strings.Join(s, ","))
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Cursor != "" {
		v.Set("cursor", q.Cursor)
	}
	if q.IdempotencyKey != "" {
		v.Set("idempotencyKey", q.IdempotencyKey)
	}
	var p ExecutionPage
	_, err := c.doJSON(ctx, call{method: http.MethodGet, path: "/v1/executions", query: v}, nil, &p)
	return p, err
}

// ListAll yields every execution q selects, following the cursors from
// q.Cursor on (q.Limit is the page size). It stops at the first error,
// which it yields.
func (c *Client) ListAll(ctx context.Context, q ListQuery) iter.Seq2[Execution, error] {
	return pages(func(cursor string) ([]Execution, string, error) {
		q.Cursor = cursor
		p, err := c.List(ctx, q)
		return p.Executions, p.NextCursor, err
	}, q.Cursor)
}

// pages yields the items of the pages fetch returns, from cursor on,
// until a page has no next cursor.
func pages[T any](fetch func(cursor string) ([]T, string, error), cursor string) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		for {
			items, next, err := fetch(cursor)
			if err != nil {
				var zero T
				yield(zero, err)
				return
			}
			for _, it := range items {
				if !yield(it, nil) {
					return
				}
			}
			if next == "" || next == cursor {
				return
			}
			cursor = next
		}
	}
}

// History returns an execution's whole history, in commit order: it
// follows every page (of MaxHistoryPage events each), so a long history
// takes a request per thousand events; HistoryPage reads one page. The
// answer's EndCursor continues it later (HistoryAfter). A server that
// hands out the same cursor twice ends it with an error, not a loop.
func (c *Client) History(ctx context.Context, executionID string) (History, error) {
	return c.HistoryAfter(ctx, executionID, "")
}

// HistoryAfter returns the events of an execution's history after cursor
// (a previous answer's EndCursor or NextCursor; "": all of them),
// following every page, as History does. A poller keeps the answer's
// EndCursor and passes it next time, to read only the events that joined
// since. A server that predates paging ignores the cursor and answers
// the whole history (EndCursor ""): a poller drops the events whose Seq
// it has seen.
func (c *Client) HistoryAfter(ctx context.Context, executionID, cursor string) (History, error) {
	seen := map[string]bool{cursor: true}
	var all History
	for {
		h, err := c.HistoryPage(ctx, executionID, HistoryPageOptions{Limit: MaxHistoryPage, Cursor: cursor})
		if err != nil {
			return History{}, err
		}
		all.ExecutionID = h.ExecutionID
		all.Events = append(all.Events, h.Events...)
		if h.EndCursor != "" {
			all.EndCursor = h.EndCursor
		}
		if h.NextCursor == "" {
			if all.Events == nil {
				all.Events = []Event{}
			}
			return all, nil
		}
		if seen[h.NextCursor] {
			return History{}, fmt.Errorf("client: GET %s/history: the server gave cursor %q twice", executionPath(executionID), h.NextCursor)
		}
		seen[h.NextCursor] = true
		cursor = h.NextCursor
	}
}

// HistoryPage returns one page of an execution's history: at most
// o.Limit events after o.Cursor, with NextCursor ("" on the last page)
// and EndCursor. A bad limit is a 400 *Error (IsBadRequest), kind
// invalid-request; a cursor that is not one of this execution's history
// a 400 of kind invalid-cursor.
func (c *Client) HistoryPage(ctx context.Context, executionID string, o HistoryPageOptions) (History, error) {
	if executionID == "" {
		return History{}, missing("the execution id")
	}
	v := url.Values{}
	if o.Limit != 0 {
		v.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Cursor != "" {
		v.Set("cursor", o.Cursor)
	}
	var h History
	_, err := c.doJSON(ctx, call{method: http.MethodGet, path: executionPath(executionID) + "/history", query: v}, nil, &h)
	return h, err
}

// Cancel cancels an execution: a queued, waiting or parked one becomes
// CANCELLED at once, a running one at its step's next lease renewal. An
// operator route (as Redrive). Cancelling a CANCELLED execution changes
// nothing; a SUCCEEDED, FAILED or DLQ one is a 409 *Error.
func (c *Client) Cancel(ctx context.Context, executionID string, req CancelRequest) (Execution, error) {
	if executionID == "" {
		return Execution{}, missing("the execution id")
	}
	if strings.TrimSpace(req.Reason) == "" {
		return Execution{}, missing("the reason")
	}
	var e Execution
	_, err := c.doJSON(ctx, call{method: http.MethodPost, path: executionPath(executionID) + "/cancel", operator: true}, req, &e)
	return e, err
}

// StartRedrives starts a durable, rate-limited bulk re-drive of the
// executions req.Filter selects (or, with DryRun, only counts them). An
// operator route (as Redrive). A new job answers 202; with
// req.IdempotencyKey, a retry of a start whose answer was lost answers
// the job it started (200, Duplicate set) instead of starting another.
func (c *Client) StartRedrives(ctx context.Context, req BulkRedriveRequest) (BulkRedrive, error) {
	if strings.TrimSpace(req.Reason) == "" {
		return BulkRedrive{}, missing("the reason")
	}
	k := call{method: http.MethodPost, path: "/v1/redrives", operator: true}
	if req.IdempotencyKey != "" {
		k.header = http.Header{IdempotencyKeyHeader: {req.IdempotencyKey}}
	}
	var r BulkRedrive
	_, err := c.doJSON(ctx, k, req, &r)
	return r, err
}

// NewIdempotencyKey returns a random idempotency key (32 hex digits): make
// one per operation and send it with every retry of that operation.
func NewIdempotencyKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// RedriveProgress returns a bulk re-drive's progress. An operator route
// (as Redrive).
func (c *Client) RedriveProgress(ctx context.Context, redriveID string) (RedriveProgress, error) {
	if redriveID == "" {
		return RedriveProgress{}, missing("the redrive id")
	}
	var p RedriveProgress
	_, err := c.doJSON(ctx, call{method: http.MethodGet, path: "/v1/redrives/" + url.PathEscape(redriveID), operator: true}, nil, &p)
	return p, err
}

// DeadLetters returns one page of the caller's dead-letter records,
// newest first.
func (c *Client) DeadLetters(ctx context.Context, q DeadLetterQuery) (DeadLetterPage, error) {
	v := url.Values{}
	if q.PipelineID != "" {
		v.Set("pipelineId", q.PipelineID)
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Cursor != "" {
		v.Set("cursor", q.Cursor)
	}
	if q.OutstandingOnly {
		v.Set("outstanding", "true")
	}
	var p DeadLetterPage
	_, err := c.doJSON(ctx, call{method: http.MethodGet, path: "/v1/dead-letters", query: v}, nil, &p)
	return p, err
}

// DeadLettersAll yields every dead-letter record q selects, following the
// cursors (q.Limit is the page size). It stops at the first error, which
// it yields.
func (c *Client) DeadLettersAll(ctx context.Context, q DeadLetterQuery) iter.Seq2[DeadLetter, error] {
	return pages(func(cursor string) ([]DeadLetter, string, error) {
		q.Cursor = cursor
		p, err := c.DeadLetters(ctx, q)
		return p.DeadLetters, p.NextCursor, err
	}, q.Cursor)
}

// OpenAPI returns the API's OpenAPI 3.1 document (GET /openapi.json).
func (c *Client) OpenAPI(ctx context.Context) (json.RawMessage, error) {
	_, _, b, err := c.do(ctx, call{method: http.MethodGet, path: "/openapi.json"})
	if err != nil {
		return nil, err
	}
	if !json.Valid(b) {
		return nil, errors.New("client: GET /openapi.json: the answer is not JSON")
	}
	return b, nil
}

// WaitOptions tune Wait.
type WaitOptions struct {
	// MinInterval is the first pause between polls, and the pause after a
	// poll that saw a change (default 200 ms).
	MinInterval time.Duration
	// MaxInterval caps the pause, which grows by half after each poll that
	// saw no change (default 5 s).
	MaxInterval time.Duration
	// OnChange, when set, is called with the first status and each status
	// whose version differs from the one before; an error it returns ends
	// Wait with that error.
	OnChange func(Execution) error
}

// Wait polls an execution's status, with backoff, until it is terminal
// (SUCCEEDED, FAILED, DLQ or CANCELLED) or ctx ends, and returns the last
// status. A failed poll ends it with the error.
func (c *Client) Wait(ctx context.Context, executionID string, o WaitOptions) (Execution, error) {
	if o.MinInterval <= 0 {
		o.MinInterval = 200 * time.Millisecond
	}
	if o.MaxInterval < o.MinInterval {
		o.MaxInterval = max(5*time.Second, o.MinInterval)
	}
	pause := o.MinInterval
	var last Execution
	for first := true; ; first = false {
		e, err := c.Status(ctx, executionID)
		if err != nil {
			return last, err
		}
		if first || e.Version != last.Version || e.Status != last.Status {
			if o.OnChange != nil {
				if err := o.OnChange(e); err != nil {
					return e, err
				}
			}
			pause = o.MinInterval
		} else {
			pause = min(pause+pause/2, o.MaxInterval)
		}
		last = e
		if e.Status.Terminal() {
			return e, nil
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return last, ctx.Err()
		case <-t.C:
		}
	}
}

// DeadLetterCounts counts the caller's dead-letter records by error code,
// all and outstanding ones, of one pipeline ("" for all): over the newest
// records up to the server's bound (DeadLetterCounts.Complete).
func (c *Client) DeadLetterCounts(ctx context.Context, pipelineID string) (DeadLetterCounts, error) {
	v := url.Values{}
	if pipelineID != "" {
		v.Set("pipelineId", pipelineID)
	}
	var n DeadLetterCounts
	_, err := c.doJSON(ctx, call{method: http.MethodGet, path: "/v1/dead-letters/counts", query: v}, nil, &n)
	return n, err
}

// InputContentTypeHeader names the media type an execution's input was
// submitted with, on GET /v1/inputs/{executionId} (whose Content-Type is
// application/json or application/octet-stream).
const InputContentTypeHeader = "X-Input-Content-Type"

// Input returns an execution's input, the bytes it was submitted with,
// in any status: ContentType is the type it was submitted with
// (InputContentTypeHeader), MessageType the protobuf message of a
// protobuf input. An operator route (as Redrive): the input can hold
// personal data, so the server logs every view. An input larger than the
// server's cap (1 MiB) is a 413 *Error whose detail names its size.
func (c *Client) Input(ctx context.Context, executionID string) (Result, error) {
	if executionID == "" {
		return Result{}, missing("the execution id")
	}
	_, h, b, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/inputs/" + url.PathEscape(executionID), operator: true})
	if err != nil {
		return Result{}, err
	}
	ct := h.Get(InputContentTypeHeader)
	if ct == "" {
		ct = h.Get("Content-Type")
	}
	return Result{ContentType: ct, MessageType: h.Get(MessageTypeHeader), Data: b}, nil
}
