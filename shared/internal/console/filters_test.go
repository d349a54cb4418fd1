package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/store"
)

// TestListRefusesMalformedFiltersWithAWayBack reproduces the issue's
// "malformed filters give an empty 200 where the API gives 400": a
// pipeline filter that no pipeline id can be listed nothing, with 200.
// Now each malformed filter (pipeline, status, either time, an empty
// time range) is a 400 that says what is wrong and links back to the
// unfiltered list, and the backend is not asked.
func TestListRefusesMalformedFiltersWithAWayBack(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, query, title, says string
	}{
		{"pipeline with a space", "pipeline=checkout+deliver", "Bad pipeline filter", "A pipeline id is 1-128 characters"},
		{"pipeline starting with a dot", "pipeline=.hidden", "Bad pipeline filter", "starting with a letter or digit"},
		{"pipeline given twice", "pipeline=a&pipeline=b", "Bad pipeline filter", "more than once"},
		{"unknown status", "status=DLQ,DONE", "Unknown status", "&#34;DONE&#34; is not a status"},
		{"created after not a time", "createdAfter=yesterday", "Bad time filter", "“Created after” must be a time in UTC"},
		{"created before not a time", "createdBefore=2026-13-01", "Bad time filter", "“Created before” must be a time in UTC"},
		{"created after twice", "createdAfter=2026-03-01&createdAfter=2026-03-02", "Bad time filter", "more than once"},
		{"empty range", "createdAfter=2026-03-04T15:00&createdBefore=2026-03-04T14:00", "Bad time filter", "must be earlier than"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			body := e.get("/console?"+c.query, http.StatusBadRequest)
			wantContains(t, body, "<h1>"+c.title+"</h1>", c.says, `<a href="/console" id="back">Back</a>`)
			e.f.mu.Lock()
			listed := len(e.f.lists)
			e.f.mu.Unlock()
			if listed != 0 {
				t.Errorf("the backend was asked to list with a malformed filter")
			}
		})
	}
}

// TestListFiltersByCreationTime checks the time filters: a datetime-local
// value (UTC) or an RFC 3339 time bounds the list, the form shows the
// bounds, and the next page link carries them.
func TestListFiltersByCreationTime(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	after, before := epoch.Add(-40*time.Minute), epoch.Add(-10*time.Minute)
	body := e.get("/console?limit=20&createdAfter="+after.Format("2006-01-02T15:04")+"&createdBefore="+url.QueryEscape(before.Format(time.RFC3339)), http.StatusOK)
	q := e.f.lastList()
	if !q.CreatedAfter.Equal(after) || !q.CreatedBefore.Equal(before) {
		t.Fatalf("list query bounds %v .. %v, want %v .. %v", q.CreatedAfter, q.CreatedBefore, after, before)
	}
	ids := matches(rowID, body)
	if len(ids) != 20 {
		t.Fatalf("%d rows, want a full page", len(ids))
	}
	for _, id := range ids {
		ex, err := e.f.Status(t.Context(), store.Key{TenantID: tenantAcme, ExecutionID: id})
		if err != nil || !ex.CreatedAt.After(after) || !ex.CreatedAt.Before(before) {
			t.Errorf("execution %s created %v: outside the range", id, ex.CreatedAt)
		}
	}
	wantContains(t, body, `value="2026-03-04T14:50:00"`, `value="2026-03-04T15:20:00"`, `id="clear-filters"`)
	next, _ := url.Parse(unescape(matches(nextLink, body)[0]))
	if next.Query().Get("createdAfter") != "2026-03-04T14:50:00Z" || next.Query().Get("createdBefore") != "2026-03-04T15:20:00Z" {
		t.Errorf("next link %q does not carry the time filters", next)
	}
	e.get(next.String(), http.StatusOK)
}

// TestDeadLettersRefuseMalformedFiltersWithAWayBack checks the dead
// letters' filters: a bad pipeline or outstanding value is a 400 whose
// way back is the dead letters' first page.
func TestDeadLettersRefuseMalformedFiltersWithAWayBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for query, says := range map[string]string{
		"pipeline=no+such":            "A pipeline id is",
		"outstanding=maybe":           "“Outstanding only” is a checkbox",
		"outstanding=1&outstanding=0": "“Outstanding only” is a checkbox",
		"limit=0":                     "from 1 to 500",
	} {
		body := e.get("/console/dead-letters?"+query, http.StatusBadRequest)
		if !strings.Contains(body, says) || !strings.Contains(body, `<a href="/console/dead-letters" id="back">Back</a>`) {
			t.Errorf("%s: page lacks %q or the way back\n%s", query, says, body)
		}
	}
}
