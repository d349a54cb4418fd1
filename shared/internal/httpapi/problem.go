package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/qasync/qasync/shared/client"
)

// ProblemTypePrefix begins the "type" of every problem document this API
// writes (client.ProblemTypePrefix); the kind follows it, e.g.
// "urn:qasync:problem:invalid-json". The kinds are listed in the package
// documentation.
const ProblemTypePrefix = client.ProblemTypePrefix

// ContentTypeProblem is the media type of every error response (RFC 9457).
const ContentTypeProblem = "application/problem+json"

// Problem is the body of every error response: an RFC 9457 problem
// document, client.Problem (with its two extension members on
// execution-state conflicts). Its Detail never quotes request bodies,
// header values or internal errors.
type Problem = client.Problem

// kind is one problem kind: its HTTP status and fixed title.
type kind struct {
	name   string
	status int
	title  string
}

// The problem kinds. Each has one status and one title, so a client can
// switch on the type alone.
var (
	kindInvalidRequest     = kind{"invalid-request", http.StatusBadRequest, "Invalid request"}
	kindInvalidPipelineID  = kind{"invalid-pipeline-id", http.StatusBadRequest, "Invalid pipeline id"}
	kindInvalidTenant      = kind{"invalid-tenant", http.StatusBadRequest, "Invalid tenant"}
	kindInvalidKey         = kind{"invalid-idempotency-key", http.StatusBadRequest, "Invalid idempotency key"}
	kindKeyRequired        = kind{"idempotency-key-required", http.StatusBadRequest, "Idempotency key required"}
	kindInvalidContentType = kind{"invalid-content-type", http.StatusBadRequest, "Invalid content type"}
	kindInvalidJSON        = kind{"invalid-json", http.StatusBadRequest, "Invalid JSON body"}
	kindUnauthorized       = kind{"unauthorized", http.StatusUnauthorized, "Unauthorized"}
	kindForbidden          = kind{"forbidden", http.StatusForbidden, "Forbidden"}
	kindNotFound           = kind{"not-found", http.StatusNotFound, "Not found"}
	kindPipelineNotFound   = kind{"pipeline-not-found", http.StatusNotFound, "Pipeline not found"}
	kindExecutionNotFound  = kind{"execution-not-found", http.StatusNotFound, "Execution not found"}
	kindMethodNotAllowed   = kind{"method-not-allowed", http.StatusMethodNotAllowed, "Method not allowed"}
	kindNotSucceeded       = kind{"execution-not-succeeded", http.StatusConflict, "Execution has not succeeded"}
	kindNotRedrivable      = kind{"execution-not-redrivable", http.StatusConflict, "Execution cannot be re-driven"}
	kindVersionMismatch    = kind{"version-mismatch", http.StatusConflict, "Execution version mismatch"}
	kindAwaitConflict      = kind{"await-conflict", http.StatusConflict, "Await cannot be completed"}
	kindNotCancellable     = kind{"execution-not-cancellable", http.StatusConflict, "Execution cannot be cancelled"}
	kindInvalidCursor      = kind{"invalid-cursor", http.StatusBadRequest, "Invalid cursor"}
	kindRedriveNotFound    = kind{"redrive-not-found", http.StatusNotFound, "Bulk re-drive not found"}
	kindHistoryUnavailable = kind{"history-unavailable", http.StatusNotFound, "Execution history not available"}
	// The providers of the deployment offer no such records.
	kindDeadLettersUnavailable = kind{"dead-letters-unavailable", http.StatusServiceUnavailable, "Dead letters not available"}
	kindRedrivesUnavailable    = kind{"redrives-unavailable", http.StatusServiceUnavailable, "Bulk re-drive not available"}
	kindAwaitsDisabled         = kind{"awaits-disabled", http.StatusServiceUnavailable, "Await completion not configured"}
	kindTooLarge               = kind{"payload-too-large", http.StatusRequestEntityTooLarge, "Request body too large"}
	kindUnsupportedType        = kind{"unsupported-media-type", http.StatusUnsupportedMediaType, "Unsupported media type"}
	kindKeyMismatch            = kind{"idempotency-key-mismatch", http.StatusUnprocessableEntity, "Idempotency key reused with a different request"}
	kindInvalidInput           = kind{"invalid-input", http.StatusBadRequest, "Input refused by the pipeline's first step"}
	kindOperatorDisabled       = kind{"operator-routes-disabled", http.StatusForbidden, "Operator routes disabled"}
	kindTooManyAttempts        = kind{"too-many-attempts", http.StatusTooManyRequests, "Too many failed authentication attempts"}
	kindHeadersTooLarge        = kind{"headers-too-large", http.StatusRequestHeaderFieldsTooLarge, "Request headers too large"}
	kindInternal               = kind{"internal", http.StatusInternalServerError, "Internal server error"}
	kindUnavailable            = kind{"unavailable", http.StatusServiceUnavailable, "Service unavailable"}
)

// problem builds the document of kind k with detail.
func (k kind) problem(detail string) Problem {
	return Problem{Type: ProblemTypePrefix + k.name, Title: k.title, Status: k.status, Detail: detail}
}

// writeProblem writes p as application/problem+json with status p.Status.
func writeProblem(w http.ResponseWriter, p Problem) {
	writeDocument(w, p.Status, ContentTypeProblem, p)
}

// writeJSON writes v as application/json.
func writeJSON(w http.ResponseWriter, status int, v any) {
	writeDocument(w, status, "application/json", v)
}

func writeDocument(w http.ResponseWriter, status int, contentType string, v any) {
	b, err := json.Marshal(v)
	if err != nil { // the documents are plain structs: cannot happen
		status, contentType = http.StatusInternalServerError, ContentTypeProblem
		b, _ = json.Marshal(kindInternal.problem("The response could not be encoded."))
	}
	b = append(b, '\n')
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
