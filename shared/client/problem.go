package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"

	"github.com/qasync/qasync/shared/store"
)

// ProblemTypePrefix begins the type of every problem document the API
// writes; the problem kind follows it ("urn:qasync:problem:execution-not-found").
const ProblemTypePrefix = "urn:qasync:problem:"

// Problem is an RFC 9457 problem document: the body of every error answer
// of the API.
type Problem struct {
	// Type is ProblemTypePrefix followed by the problem kind.
	Type string `json:"type"`
	// Title is the kind's fixed summary.
	Title string `json:"title"`
	// Status is the HTTP status of the answer.
	Status int `json:"status"`
	// Detail explains this occurrence.
	Detail string `json:"detail"`
	// ExecutionID is set on problems about one execution's state.
	ExecutionID string `json:"executionId,omitempty"`
	// ExecutionStatus is the execution's status on a 409.
	ExecutionStatus store.Status `json:"executionStatus,omitempty"`
	// CurrentVersion is the execution's version on a re-drive's
	// version-mismatch 409.
	CurrentVersion int64 `json:"currentVersion,omitempty"`
}

// Kind is the problem kind: Type without ProblemTypePrefix
// ("execution-not-found"), or Type itself for a foreign type.
func (p Problem) Kind() string { return strings.TrimPrefix(p.Type, ProblemTypePrefix) }

// Error is a non-2xx answer of the API.
type Error struct {
	// Method and Path are the request's ("GET", "/v1/executions/x").
	Method, Path string
	// StatusCode is the HTTP status of the answer.
	StatusCode int
	// Problem is the answer's problem document. An answer that was not
	// one (a proxy's or API Gateway's own error) gets a problem with the
	// status, the status text as title, and its message as detail.
	Problem Problem
}

// Error returns "<METHOD> <path>: <status> <kind>: <detail>".
func (e *Error) Error() string {
	s := fmt.Sprintf("%s %s: %d %s", e.Method, e.Path, e.StatusCode, e.Problem.Kind())
	if e.Problem.Detail != "" {
		s += ": " + e.Problem.Detail
	}
	return s
}

// newError builds the *Error of a non-2xx response with body b.
func newError(method, path string, resp *http.Response, b []byte) *Error {
	e := &Error{Method: method, Path: path, StatusCode: resp.StatusCode}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if (mt == "application/problem+json" || mt == "application/json") && json.Unmarshal(b, &e.Problem) == nil && e.Problem.Type != "" {
		if e.Problem.Status == 0 {
			e.Problem.Status = resp.StatusCode
		}
		return e
	}
	// Not a problem document: API Gateway answers {"message":"Forbidden"}.
	e.Problem = Problem{Type: "about:blank", Title: http.StatusText(resp.StatusCode), Status: resp.StatusCode}
	var gw struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &gw) == nil && gw.Message != "" {
		e.Problem.Detail = gw.Message
	} else if t := strings.TrimSpace(string(b)); t != "" && len(t) <= 512 && !strings.ContainsAny(t, "<\x00") {
		e.Problem.Detail = t
	}
	return e
}

// statusOf is the HTTP status of err's *Error, 0 when it has none.
func statusOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.StatusCode
	}
	return 0
}

// IsNotFound reports whether err is a 404 answer: an unknown execution
// (or another tenant's), pipeline, re-drive, or route.
func IsNotFound(err error) bool { return statusOf(err) == http.StatusNotFound }

// IsConflict reports whether err is a 409 answer: the execution's state
// forbids the request (a result before success, a re-drive of a running
// execution, a cancel of a finished one, a version that moved).
func IsConflict(err error) bool { return statusOf(err) == http.StatusConflict }

// IsBadRequest reports whether err is a 400 answer: a malformed request
// (a bad filter, limit, cursor, key or body).
func IsBadRequest(err error) bool { return statusOf(err) == http.StatusBadRequest }

// IsUnauthorized reports whether err is a 401 or 403 answer: a missing or
// wrong admin token, or a signature or IAM permission API Gateway refused.
func IsUnauthorized(err error) bool {
	s := statusOf(err)
	return s == http.StatusUnauthorized || s == http.StatusForbidden
}
