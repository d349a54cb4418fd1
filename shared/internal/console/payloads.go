package console

// An execution's input and result, for an operator only: on its page
// (the first payloadShowCap bytes, pretty JSON when it is JSON, on
// request: ?show=input, ?show=result) and as a download. A payload is
// whatever a caller submitted or a step produced, so a download is an
// attachment that no browser renders or runs, and no page shows bytes
// that are not JSON. Every view and download is logged
// (payload_viewed: who and what, never the bytes).

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/store"
)

// payloadShowCap is the most bytes of a payload a page shows (its
// download has them all).
const payloadShowCap = 64 << 10

// Which payload of an execution.
const (
	whichInput  = "input"
	whichResult = "result"
)

// isJSON reports whether p is JSON: a JSON content type (application/json
// or a +json type) and bytes that parse.
func isJSON(p payload.Payload) bool {
	mt, _, err := mime.ParseMediaType(p.ContentType)
	if err != nil || (mt != payload.ContentTypeJSON && !strings.HasSuffix(mt, "+json")) {
		return false
	}
	return json.Valid(p.Data)
}

// payloadView is a payload as an execution's page shows it.
type payloadView struct {
	Which       string
	Bytes       int
	ContentType string
	// JSON: Text is the payload, indented, at most payloadShowCap bytes
	// of it (Truncated when it is longer).
	JSON      bool
	Text      string
	Truncated bool
	// DownloadURL has the whole payload, as an attachment.
	DownloadURL string
	// Notice says why the payload is not shown ("" when it is).
	Notice string
}

// viewPayload shows p: indented and capped when it is JSON; otherwise
// not at all (the page links its download).
func viewPayload(which string, p payload.Payload, downloadURL string) payloadView {
	v := payloadView{Which: which, Bytes: len(p.Data), ContentType: p.ContentType, DownloadURL: downloadURL}
	if v.ContentType == "" {
		v.ContentType = payload.ContentTypeOctet
	}
	if !isJSON(p) {
		return v
	}
	var b bytes.Buffer
	text := p.Data
	if json.Indent(&b, p.Data, "", "  ") == nil {
		text = b.Bytes()
	}
	if len(text) > payloadShowCap {
		cut := payloadShowCap
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		text, v.Truncated = text[:cut], true
	}
	v.JSON, v.Text = true, string(text)
	return v
}

// payloadURL is the download address of an execution's payload.
func payloadURL(id, which string) string { return executionURL(id) + "/" + which }

// readPayload reads an execution's input or result.
func (c *Console) readPayload(r *http.Request, key store.Key, which string) (store.Execution, payload.Payload, error) {
	if which == whichInput {
		return c.b.Input(r.Context(), key)
	}
	return c.b.Result(r.Context(), key)
}

// logPayloadView logs an operator's view or download of a payload: which
// execution, which payload, its size and the client's address (never its
// bytes).
func (c *Console) logPayloadView(r *http.Request, key store.Key, which, via string, n int) {
	c.logAction(r, slog.LevelInfo, "payload_viewed", slog.String("tenant", key.TenantID), slog.String("execution_id", key.ExecutionID),
		slog.String("which", which), slog.String("via", via), slog.Int("bytes", n), slog.String("client_address", r.RemoteAddr))
}

// shownPayloads reads the payloads an execution's page was asked to show
// (?show=input, ?show=result; operator only, the page checks) and logs
// each view.
func (c *Console) shownPayloads(r *http.Request, e *store.Execution, which []string) []payloadView {
	var out []payloadView
	for _, w := range which {
		key := e.Key()
		if w == whichResult && e.Status != store.Succeeded {
			out = append(out, payloadView{Which: w, Notice: fmt.Sprintf("The execution is %s; its result is available once it is %s.", e.Status, store.Succeeded)})
			continue
		}
		_, p, err := c.readPayload(r, key, w)
		switch {
		case err == nil:
			c.logPayloadView(r, key, w, "page", len(p.Data))
			out = append(out, viewPayload(w, p, payloadURL(e.ExecutionID, w)))
		case errors.Is(err, ErrNotSupported):
			out = append(out, payloadView{Which: w, Notice: "Reading the " + w + " is not available on this deployment."})
		case errors.Is(err, engine.ErrNotSucceeded):
			out = append(out, payloadView{Which: w, Notice: "The execution has no result (it is no longer SUCCEEDED)."})
		default:
			c.logAction(r, slog.LevelError, "console_payload_failed", slog.String("execution_id", e.ExecutionID), slog.String("which", w),
				slog.String("error", err.Error()))
			out = append(out, payloadView{Which: w, Notice: "The " + w + " could not be read. Reload the page."})
		}
	}
	return out
}

// parseShow reads the payloads an execution's page is asked to show
// (?show=input&show=result, or comma-separated), the input first; ok is
// false for any other value.
func parseShow(values []string) (which []string, ok bool) {
	input, result := false, false
	for _, s := range strings.Split(strings.Join(values, ","), ",") {
		switch strings.TrimSpace(s) {
		case "":
		case whichInput:
			input = true
		case whichResult:
			result = true
		default:
			return nil, false
		}
	}
	if input {
		which = append(which, whichInput)
	}
	if result {
		which = append(which, whichResult)
	}
	return which, true
}

// inputBytes handles GET /console/executions/{id}/input (payloadBytes).
func (c *Console) inputBytes(w http.ResponseWriter, r *http.Request) {
	c.payloadBytes(w, r, whichInput)
}

// resultBytes handles GET /console/executions/{id}/result (payloadBytes).
func (c *Console) resultBytes(w http.ResponseWriter, r *http.Request) {
	c.payloadBytes(w, r, whichResult)
}

// payloadBytes serves an execution's input or result (which), for an
// operator, as an attachment that a browser saves and never renders or
// runs from the console's origin (so the console's CSP, which trusts its
// own origin, never covers them): Content-Disposition attachment,
// application/json when the payload is JSON and application/octet-stream
// otherwise (never its own content type), nosniff, and a sandbox CSP.
func (c *Console) payloadBytes(w http.ResponseWriter, r *http.Request, which string) {
	if !c.operatorGet(w, r) {
		return
	}
	key, ok := c.executionKey(w, r)
	if !ok {
		return
	}
	e, p, err := c.readPayload(r, key, which)
	if errors.Is(err, engine.ErrNotSucceeded) {
		c.errorPage(w, r, http.StatusConflict, "No result yet",
			fmt.Sprintf("The execution is %s; its result is available once it is %s.", e.Status, store.Succeeded))
		return
	}
	if err != nil {
		c.backendError(w, r, "Reading the "+which, err)
		return
	}
	c.logPayloadView(r, key, which, "download", len(p.Data))
	ct, ext := payload.ContentTypeOctet, ".bin"
	if isJSON(p) {
		ct, ext = payload.ContentTypeJSON, ".json"
	}
	h := w.Header()
	h.Set("Content-Type", ct)
	// The id is A-Z, a-z, 0-9, '.', '_' and '-' (validID): a safe file
	// name as it is, quoted as is.
	h.Set("Content-Disposition", `attachment; filename="`+key.ExecutionID+"-"+which+ext+`"`)
	h.Set("Content-Length", strconv.Itoa(len(p.Data)))
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "sandbox; default-src 'none'")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(p.Data)
}
