package console

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/httpapi"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// maxReasonLen is the longest cancel or re-drive reason, in bytes (the
// HTTP API's limit).
const maxReasonLen = httpapi.MaxRedriveReasonLen

// pageLimits are the page sizes the list pages offer.
var pageLimits = []int{20, 50, 100, 200}

// base is what every page's layout shows.
type base struct {
	Title          string
	Nav            string // "executions" or "dead-letters"
	Tenant         string
	TenantEditable bool
	CSRF           string
	ActionsEnabled bool // an operator token is configured
	Operator       bool // the request carries an operator session
	Here           string
	Flash          string
	Status         int
}

// base builds the layout data of a page (and sets the CSRF cookie when
// the browser has none).
func (c *Console) base(w http.ResponseWriter, r *http.Request, title, nav, tenant string) base {
	_, editable := c.tenantRequest(r)
	return base{
		Title: title, Nav: nav, Tenant: tenant, TenantEditable: editable,
		CSRF: c.csrfToken(w, r), ActionsEnabled: c.adminHash != nil, Operator: c.operator(r),
		Here: r.URL.RequestURI(),
	}
}

// errorData is the error page.
type errorData struct {
	base
	Message string
	Back    string
}

// errorPage writes an error page: title and message are shown as text.
func (c *Console) errorPage(w http.ResponseWriter, r *http.Request, status int, title, message string) {
	tenant := ""
	if st, ok := r.Context().Value(reqStateKey{}).(*reqState); ok {
		tenant = st.tenant
	}
	b := c.base(w, r, title, "", tenant)
	b.Status = status
	back := Prefix
	switch id := r.PathValue("id"); {
	case id != "" && status != http.StatusNotFound && validID(id):
		back = executionURL(id)
	case r.URL.Path == Prefix+"/dead-letters", strings.HasPrefix(r.URL.Path, Prefix+"/redrives"):
		// The dead letters' first page, unfiltered (a bad filter's way
		// back; the bulk re-drive form is there).
		back = Prefix + "/dead-letters"
	}
	b.Here = back // a sign-in from this page returns to the page it came from
	d := &errorData{base: b, Message: message, Back: back}
	c.render(w, status, &d.base, d.content)
}

// backendError answers an error of the backend.
func (c *Console) backendError(w http.ResponseWriter, r *http.Request, what string, err error) {
	switch {
	case errors.Is(err, ErrNotSupported), errors.Is(err, engine.ErrDeadLettersUnavailable), errors.Is(err, engine.ErrRedrivesUnavailable):
		c.errorPage(w, r, http.StatusNotImplemented, "Not available", what+" is not available on this deployment.")
	case errors.Is(err, store.ErrNotFound):
		c.errorPage(w, r, http.StatusNotFound, "Execution not found", "No execution with this id exists for this tenant.")
	case errors.Is(err, store.ErrInvalidCursor), errors.Is(err, deadletter.ErrInvalidCursor):
		c.errorPage(w, r, http.StatusBadRequest, "Page link expired", "This page link does not belong to this list. Start again from the first page.")
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled), errors.Is(err, store.ErrUnavailable):
		c.logAction(r, slog.LevelError, "console_backend_unavailable", slog.String("route", r.Pattern), slog.String("error", err.Error()))
		c.errorPage(w, r, http.StatusServiceUnavailable, "Unavailable", "The state store did not answer in time. Reload the page.")
	default:
		c.logAction(r, slog.LevelError, "console_internal_error", slog.String("route", r.Pattern), slog.String("error", err.Error()))
		c.errorPage(w, r, http.StatusInternalServerError, "Internal error", "The page could not be shown.")
	}
}

// validID accepts the execution ids the HTTP API accepts.
func validID(id string) bool { return len(id) <= 128 && httpapi.ValidTenantID(id) }

func executionURL(id string) string { return Prefix + "/executions/" + url.PathEscape(id) }

// parentURL is the page of a child's parent, "" when its id is not one
// the console serves (then it is shown as text, not linked).
func parentURL(id string) string {
	if !validID(id) {
		return ""
	}
	return executionURL(id)
}

// executionKey returns the key of the page's execution, or writes the 404.
func (c *Console) executionKey(w http.ResponseWriter, r *http.Request) (store.Key, bool) {
	tenant, ok := c.tenant(w, r)
	if !ok {
		return store.Key{}, false
	}
	id := r.PathValue("id")
	if !validID(id) {
		c.errorPage(w, r, http.StatusNotFound, "Execution not found", "No execution with this id exists for this tenant.")
		return store.Key{}, false
	}
	return store.Key{TenantID: tenant, ExecutionID: id}, true
}

// statusOption is one checkbox of the status filter.
type statusOption struct {
	Name    store.Status
	Checked bool
}

// execRow is one row of the executions list.
type execRow struct {
	ID, URL, Pipeline string
	Status            store.Status
	StepIndex         int
	StepName          string
	Attempt           int
	Created, Updated  time.Time
	// Age is how long it ran (terminal) or has existed so far.
	Age       time.Duration
	Terminal  bool
	ErrorCode string
	// Children is a map parent's total of children (the list carries no
	// more of its counts: they are on the parent's page), 0 for none;
	// ChildrenDone says every group of them has ended.
	Children     int
	ChildrenDone bool
	// ParentID is a child's parent, ParentURL its page ("" when the id
	// is not one the console links), Index its element index.
	ParentID, ParentURL string
	Index               int
}

// listData is the executions page.
type listData struct {
	base
	Pipelines []string
	Pipeline  string
	Statuses  []statusOption
	// CreatedAfter and CreatedBefore are the time filters as the form's
	// fields show them ("" for none).
	CreatedAfter, CreatedBefore string
	Limit                       int
	Limits                      []int
	Rows                        []execRow
	Page                        int
	NextURL                     string
	FirstURL                    string
	Filtered                    bool
	// Bulk are the bulk pause and resume forms (pause.go).
	Bulk []bulkForm
}

// parseLimit reads the limit parameter (default store.DefaultListLimit).
func parseLimit(s string) (int, bool) {
	if s == "" {
		return store.DefaultListLimit, true
	}
	n, err := strconv.Atoi(s)
	return n, err == nil && n >= 1 && n <= store.MaxListLimit
}

// parsePage reads the page number shown beside the paging links.
func parsePage(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 1_000_000 {
		return 1
	}
	return n
}

// listPage handles GET /console. A filter that is not one (a pipeline
// id no pipeline can have, an unknown status, a time that is not one) is
// refused (400), as the HTTP API's list refuses it, with a way back to
// the unfiltered list, rather than answered with an empty list.
func (c *Console) listPage(w http.ResponseWriter, r *http.Request) {
	tenant, ok := c.tenant(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	pipelineID, ok := c.pipelineFilter(w, r, q)
	if !ok {
		return
	}
	var statuses []store.Status
	for _, v := range q["status"] {
		for s := range strings.SplitSeq(v, ",") {
			st := store.Status(strings.ToUpper(strings.TrimSpace(s)))
			if st == "" {
				continue
			}
			if !st.Valid() {
				c.errorPage(w, r, http.StatusBadRequest, "Unknown status", fmt.Sprintf("%q is not a status; the statuses are %s.", s, statusList()))
				return
			}
			if !slices.Contains(statuses, st) {
				statuses = append(statuses, st)
			}
		}
	}
	after, before, ok := c.timeFilters(w, r, q)
	if !ok {
		return
	}
	limit, ok := parseLimit(q.Get("limit"))
	if !ok {
		c.errorPage(w, r, http.StatusBadRequest, "Bad page size", fmt.Sprintf("The page size must be a number from 1 to %d.", store.MaxListLimit))
		return
	}
	cursor := q.Get("cursor")
	page, err := c.b.List(r.Context(), store.ListQuery{TenantID: tenant, PipelineID: pipelineID, Statuses: statuses,
		CreatedAfter: after, CreatedBefore: before, Limit: limit, Cursor: cursor})
	if err != nil {
		c.backendError(w, r, "Listing executions", err)
		return
	}
	now := c.now()
	d := listData{
		base: c.base(w, r, "Executions", "executions", tenant), Pipelines: c.pipelines, Pipeline: pipelineID,
		CreatedAfter: fieldTime(after), CreatedBefore: fieldTime(before),
		Limit: limit, Limits: pageLimits, Page: 1, Filtered: pipelineID != "" || len(statuses) > 0 || !after.IsZero() || !before.IsZero(),
	}
	d.Flash = flashMessage(q.Get("done"))
	d.Bulk = []bulkForm{newBulkForm(bulkPause, pipelineID), newBulkForm(bulkResume, pipelineID)}
	for _, s := range store.Statuses {
		d.Statuses = append(d.Statuses, statusOption{Name: s, Checked: slices.Contains(statuses, s)})
	}
	for _, e := range page.Executions {
		row := execRow{
			ID: e.ExecutionID, URL: executionURL(e.ExecutionID), Pipeline: e.PipelineID, Status: e.Status,
			StepIndex: e.StepIndex, StepName: e.StepName, Attempt: e.Attempt, Created: e.CreatedAt, Updated: e.UpdatedAt,
			Terminal: e.Status.Terminal(),
		}
		if row.Terminal {
			row.Age = e.UpdatedAt.Sub(e.CreatedAt)
		} else {
			row.Age = now.Sub(e.CreatedAt)
		}
		if e.Error != nil {
			row.ErrorCode = e.Error.Code
		}
		if ch := e.Children; ch != nil {
			row.Children, row.ChildrenDone = ch.Total, ch.Done
		}
		if p := e.Parent; p != nil {
			row.ParentID, row.ParentURL, row.Index = p.ExecutionID, parentURL(p.ExecutionID), p.Index
		}
		d.Rows = append(d.Rows, row)
	}
	filters := url.Values{}
	if pipelineID != "" {
		filters.Set("pipeline", pipelineID)
	}
	for _, s := range statuses {
		filters.Add("status", string(s))
	}
	setTimeFilter(filters, "createdAfter", after)
	setTimeFilter(filters, "createdBefore", before)
	if limit != store.DefaultListLimit {
		filters.Set("limit", strconv.Itoa(limit))
	}
	link := func(cur string, n int) string { return pageLink(Prefix, filters, cur, n) }
	if cursor != "" {
		d.Page = parsePage(q.Get("page"))
		d.FirstURL = link("", 1)
	}
	if page.Cursor != "" {
		d.NextURL = link(page.Cursor, d.Page+1)
	}
	c.render(w, http.StatusOK, &d.base, d.content)
}

// pipelineFilter reads a list's pipeline filter ("" for all): given at
// most once, a pipeline id (pipeline.ValidID); else it writes the 400.
func (c *Console) pipelineFilter(w http.ResponseWriter, r *http.Request, q url.Values) (string, bool) {
	vs := q["pipeline"]
	if len(vs) > 1 {
		c.errorPage(w, r, http.StatusBadRequest, "Bad pipeline filter", "The address names the pipeline filter more than once. Pick one pipeline.")
		return "", false
	}
	p := strings.TrimSpace(q.Get("pipeline"))
	if p != "" && !pipeline.ValidID(p) {
		c.errorPage(w, r, http.StatusBadRequest, "Bad pipeline filter", pipelineIDRule+" Clear the filter, or pick one of the registered pipelines.")
		return "", false
	}
	return p, true
}

// pipelineIDRule says what a pipeline id is.
const pipelineIDRule = "A pipeline id is 1-128 characters of A-Z, a-z, 0-9, '.', '_' and '-', starting with a letter or digit."

// Time filter layouts: an RFC 3339 time, or a time in UTC as a
// datetime-local field sends it (with or without seconds), or a date
// (its midnight, UTC).
var timeLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"}

// parseTime reads a time filter's value (zero for "").
func parseTime(s string) (time.Time, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, true
	}
	for _, l := range timeLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t.UTC(), true
		}
	}
	return time.Time{}, false
}

// fieldTime is t as a datetime-local field shows it, in UTC ("" for the
// zero time).
func fieldTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05")
}

// setTimeFilter carries a time filter in a page link.
func setTimeFilter(v url.Values, name string, t time.Time) {
	if !t.IsZero() {
		v.Set(name, t.UTC().Format(time.RFC3339Nano))
	}
}

// timeFilterLabels name the time filters in messages.
var timeFilterLabels = map[string]string{"createdAfter": "Created after", "createdBefore": "Created before"}

// readTimes reads the createdAfter and createdBefore values of a filter
// (a list's query, a form): given at most once, a time, after before
// before. It returns the problem ("" when there is none).
func readTimes(v url.Values) (after, before time.Time, problem string) {
	for _, name := range []string{"createdAfter", "createdBefore"} {
		if len(v[name]) > 1 {
			return after, before, fmt.Sprintf("“%s” is given more than once.", timeFilterLabels[name])
		}
		t, ok := parseTime(v.Get(name))
		if !ok {
			return after, before, fmt.Sprintf("“%s” must be a time in UTC such as 2026-03-04T15:30 (or an RFC 3339 time, or a date).", timeFilterLabels[name])
		}
		if name == "createdAfter" {
			after = t
		} else {
			before = t
		}
	}
	if !after.IsZero() && !before.IsZero() && !after.Before(before) {
		return after, before, "“Created after” must be earlier than “Created before”: no execution is created in that range."
	}
	return after, before, ""
}

// timeFilters reads a list's time filters, or writes the 400.
func (c *Console) timeFilters(w http.ResponseWriter, r *http.Request, q url.Values) (after, before time.Time, ok bool) {
	after, before, problem := readTimes(q)
	if problem != "" {
		c.errorPage(w, r, http.StatusBadRequest, "Bad time filter", problem)
		return time.Time{}, time.Time{}, false
	}
	return after, before, true
}

// search handles GET /console/search?q=: the execution whose id is q
// goes to its page; anything else is taken as an idempotency key, whose
// slot (engine.ExecutionSlot) names the live execution submitted with it
// (a read of a bare slot finds the execution living in it: store.Slot).
func (c *Console) search(w http.ResponseWriter, r *http.Request) {
	tenant, ok := c.tenant(w, r)
	if !ok {
		return
	}
	raw := r.URL.Query().Get("q")
	q := strings.TrimSpace(raw)
	if q == "" {
		http.Redirect(w, r, Prefix, http.StatusSeeOther)
		return
	}
	var tries []string
	if validID(q) {
		tries = append(tries, q)
	}
	for _, k := range []string{raw, q} {
		if validKey(k) && !slices.Contains(tries, engine.ExecutionSlot(tenant, k)) {
			tries = append(tries, engine.ExecutionSlot(tenant, k))
		}
	}
	if len(tries) == 0 {
		c.errorPage(w, r, http.StatusBadRequest, "Bad search",
			fmt.Sprintf("Search for an execution id, or an idempotency key: 1-%d printable ASCII characters.", httpapi.MaxIdempotencyKeyLen))
		return
	}
	for _, id := range tries {
		e, err := c.b.Status(r.Context(), store.Key{TenantID: tenant, ExecutionID: id})
		switch {
		case err == nil:
			http.Redirect(w, r, executionURL(e.ExecutionID), http.StatusSeeOther)
			return
		case !errors.Is(err, store.ErrNotFound):
			c.backendError(w, r, "Searching", err)
			return
		}
	}
	c.errorPage(w, r, http.StatusNotFound, "No execution found",
		"No execution of tenant "+tenant+" has the id “"+store.Truncate(q, 256)+"”, and no live execution of it was submitted with it as its idempotency key.")
}

// validKey accepts the idempotency keys the HTTP API accepts.
func validKey(k string) bool {
	if k == "" || len(k) > httpapi.MaxIdempotencyKeyLen {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// pageLink is the address of page n (at cursor cur; "" for the first)
// of a list at path with filters.
func pageLink(path string, filters url.Values, cur string, n int) string {
	v := url.Values{}
	for k, vs := range filters {
		v[k] = vs
	}
	if cur != "" {
		v.Set("cursor", cur)
		v.Set("page", strconv.Itoa(n))
	}
	if len(v) == 0 {
		return path
	}
	return path + "?" + v.Encode()
}

// statusList names every status, for error messages.
func statusList() string {
	names := make([]string, len(store.Statuses))
	for i, s := range store.Statuses {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// flashMessage is the note a page shows after an action redirected to
// it (a fixed text per outcome code: nothing from the URL is echoed).
func flashMessage(code string) string {
	switch code {
	case "cancelled":
		return "The execution is cancelled."
	case "cancel-requested":
		return "Cancel requested: the running step is stopped at its next lease renewal, then the execution ends CANCELLED."
	case "already-cancelled":
		return "The execution was already cancelled."
	case "redriven":
		return "The execution was re-driven: it is queued for one more attempt of its failed step."
	case "signed-in":
		return "Signed in as operator."
	}
	return pauseFlash(code)
}

// historyPageSize is the most history events an execution's page
// shows: a long history (a parent of thousands of children, an execution
// that ran for months) is shown a page at a time, so that its page stays
// a few hundred KB however long the history grows.
const historyPageSize = 200

// execData is one execution's page.
type execData struct {
	base
	E        store.Execution
	Terminal bool
	// Counts are the counts of the map the execution waits for (or last
	// waited for), nil when it has none or they could not be read;
	// CountsNotice says why a parent's counts are missing.
	Counts       *engine.ChildCounts
	CountsNotice string
	// ParentURL is a child's link to its parent's page ("": not linked).
	ParentURL     string
	Duration      time.Duration
	Timeline      timeline
	HistoryNotice string
	// Page numbers the page of history shown (from 1); FirstURL and
	// NextURL link the history's first page (when this is another) and
	// its next (when there is one).
	Page              int
	FirstURL, NextURL string
	CanCancel         bool
	CanRedrive        bool
	CanPause          bool // pause.go
	CanResume         bool
	NeedsConfirm      bool
	HasResult         bool
	ActionURL         string
	ReasonMax         int
	// ShowURL is the page asking to show a payload (then "input" or
	// "result" is appended); Shown are the payloads it shows (operator).
	ShowURL string
	Shown   []payloadView
}

// executionPage handles GET /console/executions/{id}.
func (c *Console) executionPage(w http.ResponseWriter, r *http.Request) {
	key, ok := c.executionKey(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	after, err := history.ParseCursor(q.Get("cursor"))
	if err != nil {
		c.errorPage(w, r, http.StatusBadRequest, "Bad page link", "This history page link is not one the console gave. Start again from the execution's first page.")
		return
	}
	show, ok := parseShow(q["show"])
	if !ok {
		c.errorPage(w, r, http.StatusBadRequest, "Bad page link", "The page can show the execution's input and its result, nothing else.")
		return
	}
	e, err := c.b.Status(r.Context(), key)
	if err != nil {
		c.backendError(w, r, "Reading an execution", err)
		return
	}
	now := c.now()
	d := execData{
		base: c.base(w, r, "Execution "+e.ExecutionID, "executions", key.TenantID), E: e, Terminal: e.Status.Terminal(),
		CanCancel:  !e.Status.Terminal(),
		CanRedrive: e.Status == store.DLQ || e.Status == store.Failed || e.Status == store.RemoteOutcomeUnknown,
		CanPause:   pausable(&e), CanResume: resumable(&e),
		HasResult: e.Status == store.Succeeded, ActionURL: executionURL(e.ExecutionID), ReasonMax: maxReasonLen,
		ShowURL: executionURL(e.ExecutionID) + "?show=",
	}
	if d.Operator {
		d.Shown = c.shownPayloads(r, &e, show)
	}
	d.NeedsConfirm = e.Status == store.RemoteOutcomeUnknown
	d.Flash = flashMessage(q.Get("done"))
	if d.Terminal {
		d.Duration = e.UpdatedAt.Sub(e.CreatedAt)
	} else {
		d.Duration = now.Sub(e.CreatedAt)
	}
	if p := e.Parent; p != nil {
		d.ParentURL = parentURL(p.ExecutionID)
	}
	if e.Children != nil {
		d.Counts, d.CountsNotice = c.childCounts(r, e)
	}
	// The cursor comes from the address: history.PageAfter checks that it
	// names an event of this history, as the HTTP API's history route
	// does, rather than read any cursor as a position.
	events, err := c.b.History(r.Context(), key)
	var hp history.Page
	if err == nil {
		hp, err = history.PageAfter(events, after, historyPageSize)
	}
	switch {
	case err == nil:
		d.Timeline = buildTimeline(hp.Events, &e, now, hp.Next != nil)
		d.Page = 1
		if after != (history.Cursor{}) {
			d.Page = parsePage(q.Get("page"))
			d.FirstURL = executionURL(e.ExecutionID)
		}
		if hp.Next != nil {
			d.NextURL = pageLink(executionURL(e.ExecutionID), nil, hp.Next.String(), d.Page+1)
		}
	case errors.Is(err, ErrNotSupported):
		d.HistoryNotice = "This deployment does not record execution histories; the summary above is the execution's current state."
	case errors.Is(err, store.ErrNotFound):
		d.HistoryNotice = "No history is recorded for this execution."
	case errors.Is(err, history.ErrCursor):
		c.errorPage(w, r, http.StatusBadRequest, "Bad page link", "This history page link names no event of this execution's history "+
			"(it is another execution's, or an earlier incarnation's). Start again from the execution's first page.")
		return
	default:
		c.backendError(w, r, "Reading the history", err)
		return
	}
	c.render(w, http.StatusOK, &d.base, d.content)
}

// childCounts reads the counts of the map e waits for (or last waited
// for). A failure does not fail the page: the summary and timeline are
// still worth showing, so the page says the counts are missing and the
// failure is logged.
func (c *Console) childCounts(r *http.Request, e store.Execution) (*engine.ChildCounts, string) {
	counts, err := c.b.ChildCounts(r.Context(), e)
	switch {
	case (err == nil && counts == nil) || errors.Is(err, ErrNotSupported):
		return nil, "This deployment keeps no counts of a map's children."
	case err != nil:
		c.logAction(r, slog.LevelError, "console_child_counts_failed", slog.String("execution_id", e.ExecutionID),
			slog.String("error", err.Error()))
		return nil, "The children's counts could not be read. Reload the page."
	}
	return counts, ""
}
