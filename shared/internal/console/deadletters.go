package console

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/store"
)

// dlRow is one row of the dead-letters page.
type dlRow struct {
	ID, ExecutionID, URL, Pipeline, StepName, Reason, ErrorCode, ErrorMessage, Kind string
	StepIndex, Attempt                                                              int
	FailedAt, RecordedAt                                                            time.Time
	// Now is the execution's status now ("" when its row is gone:
	// Gone); Redrives how often it was re-driven; Outstanding says it
	// still ends in this record's failure.
	Now         store.Status
	Gone        bool
	Redrives    int
	Outstanding bool
}

// codeCount is one row of the counts by error code.
type codeCount struct {
	Code                 string
	Records, Outstanding int
}

// dlData is the dead-letters page.
type dlData struct {
	base
	Pipelines []string
	Pipeline  string
	// OutstandingOnly is the filter that keeps the records whose failure
	// is outstanding.
	OutstandingOnly bool
	Limit           int
	Limits          []int
	Rows            []dlRow
	Page            int
	NextURL         string
	FirstURL        string
	// Counts are the records by error code (first page only), most first;
	// Scanned how many of the newest records they count, Complete that
	// those are all. CountsNotice says why they are missing.
	Counts       []codeCount
	Scanned      int
	Complete     bool
	CountsNotice string
	// The bulk re-drive form.
	Bulk bulkForm
}

// bulkForm is a bulk form's data (re-drive, pause, resume: Kind).
type bulkForm struct {
	Kind      bulkKind
	Pipeline  string
	Codes     []string // the re-drive's error codes offered
	ReasonMax int
	Rate      int
	RateMax   int
	Statuses  []store.Status // checked
}

// newBulkForm is kind k's form, for pipeline, with every status checked.
func newBulkForm(k bulkKind, pipeline string) bulkForm {
	return bulkForm{Kind: k, Pipeline: pipeline, ReasonMax: maxReasonLen, Rate: engine.DefaultRedriveRate, RateMax: engine.MaxRedriveRate, Statuses: k.Statuses}
}

// parseOutstanding reads the "outstanding only" filter: absent, or a
// checkbox's value.
func parseOutstanding(vs []string) (bool, bool) {
	switch {
	case len(vs) == 0:
		return false, true
	case len(vs) > 1:
		return false, false
	}
	switch strings.ToLower(vs[0]) {
	case "1", "on", "true", "yes":
		return true, true
	case "", "0", "off", "false", "no":
		return false, true
	}
	return false, false
}

// deadLettersPage handles GET /console/dead-letters: the tenant's
// dead-letter records with what became of their executions (the status
// now, re-drives, whether the failure is outstanding), filtered by
// pipeline and outstanding only; on the first page the counts by error
// code; for an operator the bulk re-drive form.
func (c *Console) deadLettersPage(w http.ResponseWriter, r *http.Request) {
	tenant, ok := c.tenant(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	pipelineID, ok := c.pipelineFilter(w, r, q)
	if !ok {
		return
	}
	outstanding, ok := parseOutstanding(q["outstanding"])
	if !ok {
		c.errorPage(w, r, http.StatusBadRequest, "Bad filter", "“Outstanding only” is a checkbox: on (1) or off.")
		return
	}
	limit, ok := parseLimit(q.Get("limit"))
	if !ok {
		c.errorPage(w, r, http.StatusBadRequest, "Bad page size", fmt.Sprintf("The page size must be a number from 1 to %d.", store.MaxListLimit))
		return
	}
	cursor := q.Get("cursor")
	lq := deadletter.ListQuery{TenantID: tenant, PipelineID: pipelineID, Limit: limit, Cursor: cursor}
	page, err := c.b.DeadLetterViews(r.Context(), engine.DeadLetterViewQuery{ListQuery: lq, OutstandingOnly: outstanding})
	if err != nil {
		c.backendError(w, r, "Listing dead letters", err)
		return
	}
	d := dlData{base: c.base(w, r, "Dead letters", "dead-letters", tenant), Pipelines: c.pipelines, Pipeline: pipelineID,
		OutstandingOnly: outstanding, Limit: limit, Limits: pageLimits, Page: 1,
		Bulk: newBulkForm(bulkRedrive, pipelineID)}
	for _, v := range page.DeadLetters {
		rec := v.Record
		row := dlRow{ID: rec.ID, ExecutionID: rec.ExecutionID, Kind: rec.Kind, RecordedAt: rec.RecordedAt, Outstanding: v.Outstanding}
		if rec.ExecutionID != "" && validID(rec.ExecutionID) {
			row.URL = executionURL(rec.ExecutionID)
		}
		if env := rec.Envelope; env != nil {
			row.Pipeline, row.StepIndex, row.StepName = env.PipelineID, env.StepIndex, env.StepName
			row.Reason, row.ErrorCode, row.ErrorMessage = env.TerminalReason, env.ErrorCode, env.ErrorMessage
			row.Attempt, row.FailedAt = env.RetriesObserved+1, env.FailedAt
		}
		if cur := v.Current; cur != nil {
			row.Now, row.Redrives = cur.Status, cur.RedriveCount
		} else {
			row.Gone = true
		}
		d.Rows = append(d.Rows, row)
	}
	if cursor == "" {
		c.deadLetterCounts(r, deadletter.ListQuery{TenantID: tenant, PipelineID: pipelineID}, &d)
	}
	filters := url.Values{}
	if pipelineID != "" {
		filters.Set("pipeline", pipelineID)
	}
	if outstanding {
		filters.Set("outstanding", "1")
	}
	if limit != store.DefaultListLimit {
		filters.Set("limit", strconv.Itoa(limit))
	}
	link := func(cur string, n int) string { return pageLink(Prefix+"/dead-letters", filters, cur, n) }
	if cursor != "" {
		d.Page = parsePage(q.Get("page"))
		d.FirstURL = link("", 1)
	}
	if page.Cursor != "" {
		d.NextURL = link(page.Cursor, d.Page+1)
	}
	c.render(w, http.StatusOK, &d.base, d.content)
}

// deadLetterCounts fills the page's counts by error code. A failure does
// not fail the page (the records are still worth showing): it says the
// counts are missing, and the failure is logged.
func (c *Console) deadLetterCounts(r *http.Request, q deadletter.ListQuery, d *dlData) {
	counts, err := c.b.DeadLetterCounts(r.Context(), q)
	switch {
	case errors.Is(err, ErrNotSupported), errors.Is(err, engine.ErrDeadLettersUnavailable):
		d.CountsNotice = "This deployment cannot count its dead letters."
		return
	case err != nil:
		c.logAction(r, slog.LevelError, "console_dead_letter_counts_failed", slog.String("error", err.Error()))
		d.CountsNotice = "The counts by error code could not be read. Reload the page."
		return
	}
	for code, n := range counts.ByCode {
		d.Counts = append(d.Counts, codeCount{Code: code, Records: n, Outstanding: counts.Outstanding[code]})
		if code != "" {
			d.Bulk.Codes = append(d.Bulk.Codes, code)
		}
	}
	// Most first. (sort.Slice: the submit function links it already,
	// where a slices.SortFunc of this type would add its own copy of the
	// sort: functions/bundle_test.go.)
	sort.Slice(d.Counts, func(i, j int) bool {
		a, b := d.Counts[i], d.Counts[j]
		return a.Records > b.Records || (a.Records == b.Records && a.Code < b.Code)
	})
	slices.Sort(d.Bulk.Codes)
	d.Scanned, d.Complete = counts.Scanned, counts.Complete
}
