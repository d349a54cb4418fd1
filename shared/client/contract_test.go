package client_test

// The client's documents against the server's: every response of every
// route the client decodes, taken as bytes from the real server, decodes
// strictly (no member the client type lacks) and encodes back to the same
// document (no member dropped or changed); and each client type has, member
// for member, the properties of its schema in the OpenAPI document, with
// required members always encoded and optional ones left out when zero.
// Either test fails when the server's documents and the client's types
// drift apart.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/internal/clitest"
	"github.com/qasync/qasync/shared/internal/httpapi"
	"github.com/qasync/qasync/shared/store"
)

// rawAPI sends requests to the real server and returns its bytes.
type rawAPI struct {
	t      *testing.T
	base   string
	tenant string
	token  string
}

// call sends method path (with a JSON body unless body is "") and returns
// the response body, failing the test unless the status is want.
func (a rawAPI) call(method, path, body string, want int, header ...string) []byte {
	a.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(a.t.Context(), method, a.base+path, rd)
	if err != nil {
		a.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set(client.TenantHeader, a.tenant)
	req.Header.Set("Authorization", "Bearer "+a.token)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		a.t.Fatal(err)
	}
	if resp.StatusCode != want {
		a.t.Fatalf("%s %s: %d, want %d: %s", method, path, resp.StatusCode, want, b)
	}
	return b
}

// strict decodes the server's bytes into a T refusing unknown members,
// encodes the T again and checks that the two documents are equal, and
// returns the T.
func strict[T any](t *testing.T, what string, raw []byte) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Errorf("%s: the server's document has what %T lacks: %v\n%s", what, v, err, raw)
		return v
	}
	again, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var want, got any
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(again, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(want, got) {
		t.Errorf("%s: %T does not give back the server's document:\nserver %s\nclient %s", what, v, raw, again)
	}
	return v
}

// TestClientTypesKeepEveryMemberOfTheServersDocuments: the real server's
// answers of every route the client decodes (submit 202 and 200, status,
// list with and without a next page, history, cancel 202 and 200,
// re-drive, await completion, bulk re-drive and its progress, dead
// letters, and problem documents) are taken into the client's types with
// nothing left over and nothing lost. The samples hold the optional
// members the test pipelines produce: an error, an await with its
// completion, a cancel's reason, a retry's due time, a next cursor, a
// problem's execution status and current version.
func TestClientTypesKeepEveryMemberOfTheServersDocuments(t *testing.T) {
	t.Parallel()
	tg := clitest.Real(t)
	c := newClient(t, tg, client.WithAdminToken(tg.AdminToken))
	api := rawAPI{t: t, base: tg.URL, tenant: tenantOf(t), token: tg.AdminToken}
	ctx := ctxOf(t)

	// Submit: new (202) and duplicate (200).
	for _, code := range []int{http.StatusAccepted, http.StatusOK} {
		strict[client.Submission](t, fmt.Sprintf("submit %d", code),
			api.call("POST", "/v1/pipelines/"+clitest.PipelineOK+"/executions", `{"sample":1}`, code, client.IdempotencyKeyHeader, "sample-1"))
	}
	dlq := settle(t, c, clitest.PipelineFail, store.DLQ)
	settle(t, c, clitest.PipelineFail, store.DLQ)
	parked := settle(t, c, clitest.PipelineWait, store.WaitingExternal)
	toCancel := settle(t, c, clitest.PipelineWait, store.WaitingExternal)
	retried, err := c.Submit(ctx, client.SubmitRequest{PipelineID: clitest.PipelineRetry, Body: []byte(`{"sample":"retry"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, retried.ExecutionID, client.WaitOptions{MinInterval: 5 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}

	// Status documents: with an error, with an await.
	strict[client.Execution](t, "status of a DLQ execution", api.call("GET", "/v1/executions/"+dlq.ExecutionID, "", http.StatusOK))
	strict[client.Execution](t, "status of a parked execution", api.call("GET", "/v1/executions/"+parked.ExecutionID, "", http.StatusOK))

	// Cancel: 202, then 200 (with the cancel's reason and time).
	e := strict[client.Execution](t, "cancel 202", api.call("POST", "/v1/executions/"+toCancel.ExecutionID+"/cancel", `{"reason":"sample"}`, http.StatusAccepted))
	if e.CancelReason != "sample" || e.CancelRequestedAt.IsZero() {
		t.Errorf("cancel answer %+v lacks the cancel's reason and time", e)
	}
	strict[client.Execution](t, "cancel 200", api.call("POST", "/v1/executions/"+toCancel.ExecutionID+"/cancel", `{"reason":"again"}`, http.StatusOK))

	// Await completion (the await completed).
	awaitID, token, err := tg.ResumeToken(parked.ExecutionID)
	if err != nil {
		t.Fatal(err)
	}
	strict[client.Execution](t, "await completion", api.call("POST", "/v1/executions/"+parked.ExecutionID+"/awaits/"+awaitID+"/complete",
		`{"approved":true}`, http.StatusOK, client.ResumeTokenHeader, token))

	// Re-drive: a version that moved (409 with the current version), then 202.
	strict[client.Problem](t, "re-drive version mismatch", api.call("POST", "/v1/executions/"+dlq.ExecutionID+"/redrive",
		fmt.Sprintf(`{"reason":"sample","expectedVersion":%d}`, dlq.Version+100), http.StatusConflict))
	strict[client.Execution](t, "re-drive 202", api.call("POST", "/v1/executions/"+dlq.ExecutionID+"/redrive", `{"reason":"sample"}`, http.StatusAccepted))
	if _, err := c.Wait(ctx, dlq.ExecutionID, client.WaitOptions{MinInterval: 5 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}

	// Lists: a first page with a next cursor, and every execution.
	first := strict[client.ExecutionPage](t, "list page 1", api.call("GET", "/v1/executions?limit=2", "", http.StatusOK))
	if first.NextCursor == "" {
		t.Errorf("the first page of 2 has no next cursor: %+v", first)
	}
	all := strict[client.ExecutionPage](t, "list", api.call("GET", "/v1/executions?limit=500", "", http.StatusOK))
	if len(all.Executions) != 6 {
		t.Errorf("listed %d executions, want 6", len(all.Executions))
	}

	// Histories: a retry (error, retry time, worker), a cancel (reason),
	// a re-drive and its dead letters, an await.
	for _, id := range []string{retried.ExecutionID, toCancel.ExecutionID, dlq.ExecutionID, parked.ExecutionID} {
		strict[client.History](t, "history of "+id, api.call("GET", "/v1/executions/"+id+"/history", "", http.StatusOK))
	}
	h, err := c.History(ctx, retried.ExecutionID)
	if err != nil || !slices.ContainsFunc(h.Events, func(ev client.Event) bool { return !ev.RetryAt.IsZero() && ev.Error != nil }) {
		t.Errorf("the retry's history has no STEP_FAILED with its retry time: %+v, %v", h.Events, err)
	}

	// Bulk re-drive: a dry run and its progress, a run and its progress.
	dry := strict[client.BulkRedrive](t, "bulk re-drive dry run", api.call("POST", "/v1/redrives",
		`{"filter":{"pipelineId":"`+clitest.PipelineFail+`","status":["DLQ"]},"reason":"sample","dryRun":true}`, http.StatusAccepted))
	strict[client.RedriveProgress](t, "dry run progress", api.call("GET", "/v1/redrives/"+dry.RedriveID, "", http.StatusOK))
	run := strict[client.BulkRedrive](t, "bulk re-drive", api.call("POST", "/v1/redrives",
		`{"filter":{"pipelineId":"`+clitest.PipelineFail+`"},"reason":"sample","ratePerSecond":100}`, http.StatusAccepted))
	strict[client.RedriveProgress](t, "bulk re-drive progress", api.call("GET", "/v1/redrives/"+run.RedriveID, "", http.StatusOK))

	// Dead letters: a page with a next cursor, then the rest.
	dl := strict[client.DeadLetterPage](t, "dead letters page 1", api.call("GET", "/v1/dead-letters?limit=1", "", http.StatusOK))
	if dl.NextCursor == "" || len(dl.DeadLetters) != 1 {
		t.Errorf("the first dead-letter page of 1 %+v has no next cursor", dl)
	}
	strict[client.DeadLetterPage](t, "dead letters", api.call("GET", "/v1/dead-letters?limit=500", "", http.StatusOK))
	strict[client.DeadLetterPage](t, "outstanding dead letters", api.call("GET", "/v1/dead-letters?outstanding=true", "", http.StatusOK))
	strict[client.DeadLetterCounts](t, "dead-letter counts", api.call("GET", "/v1/dead-letters/counts", "", http.StatusOK))

	// Pipelines: the list (with a typed first step's input schema) and one.
	strict[client.PipelineList](t, "pipelines", api.call("GET", "/v1/pipelines", "", http.StatusOK))
	strict[client.Pipeline](t, "pipeline", api.call("GET", "/v1/pipelines/"+clitest.PipelineOK, "", http.StatusOK))
	// An execution found by its idempotency key (with the key).
	byKey := strict[client.ExecutionPage](t, "list by key", api.call("GET", "/v1/executions?idempotencyKey=sample-1", "", http.StatusOK))
	if len(byKey.Executions) != 1 || byKey.Executions[0].IdempotencyKey != "sample-1" {
		t.Errorf("list by key: %+v", byKey)
	}

	// Problems: 400, 404, 409 with the execution's status.
	strict[client.Problem](t, "bad status", api.call("GET", "/v1/executions?status=SLEEPING", "", http.StatusBadRequest))
	strict[client.Problem](t, "unknown execution", api.call("GET", "/v1/executions/no-such-execution/history", "", http.StatusNotFound))
	strict[client.Problem](t, "result before success", api.call("GET", "/v1/executions/"+toCancel.ExecutionID+"/result", "", http.StatusConflict))
}

// schemaObject is the part of a JSON schema the test reads.
type schemaObject struct {
	Ref        string                  `json:"$ref"`
	Type       any                     `json:"type"`
	Format     string                  `json:"format"`
	Enum       []any                   `json:"enum"`
	Const      any                     `json:"const"`
	Required   []string                `json:"required"`
	Properties map[string]schemaObject `json:"properties"`
	Items      *schemaObject           `json:"items"`
	// AdditionalProperties is a schema (an object of any keys: a map) or
	// false.
	AdditionalProperties any `json:"additionalProperties"`
}

// schemaAt returns the schema at a "#/components/schemas/..." pointer.
func schemaAt(t *testing.T, doc map[string]any, pointer string) schemaObject {
	t.Helper()
	var node any = doc
	for _, part := range strings.Split(strings.TrimPrefix(pointer, "#/"), "/") {
		m, ok := node.(map[string]any)
		if !ok || m[part] == nil {
			t.Fatalf("the OpenAPI document has no %s", pointer)
		}
		node = m[part]
	}
	b, _ := json.Marshal(node)
	var s schemaObject
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// jsonMember is one member of a Go type's JSON form.
type jsonMember struct {
	field    reflect.StructField
	optional bool // omitempty or omitzero
}

// jsonMembers returns the JSON members of struct type typ by name.
func jsonMembers(typ reflect.Type) map[string]jsonMember {
	out := map[string]jsonMember{}
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag, ok := f.Tag.Lookup("json")
		if !ok || tag == "-" || !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		out[name] = jsonMember{field: f, optional: slices.Contains(strings.Split(opts, ","), "omitempty") ||
			slices.Contains(strings.Split(opts, ","), "omitzero")}
	}
	return out
}

// kindMismatch says how a Go type does not fit a property's schema ("" if
// it fits): strings (and date-times as time.Time), integers, booleans,
// arrays as slices, objects as structs, objects of any keys as maps.
func kindMismatch(typ reflect.Type, s schemaObject) string {
	if typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	want := ""
	switch {
	case s.Ref == "#/components/schemas/Status", s.Type == "string" && s.Format == "date-time":
	case s.Type == "object" && s.Properties == nil && s.AdditionalProperties != nil && s.AdditionalProperties != false:
		want = "map"
	case s.Type == "object" && s.Properties == nil:
		want = "json" // a free-form document: a JSON Schema
	case s.Ref != "":
		want = "struct"
	case s.Const != nil || s.Enum != nil || s.Type == "string":
		want = "string"
	case s.Type == "integer":
		want = "integer"
	case s.Type == "boolean":
		want = "bool"
	case s.Type == "array":
		want = "slice"
	case s.Type == "object":
		want = "struct"
	}
	var got string
	switch {
	case typ == reflect.TypeFor[time.Time]():
		got = "date-time"
	case typ == reflect.TypeFor[json.RawMessage]():
		got = "json"
	case typ.Kind() == reflect.String:
		got = "string"
	case typ.Kind() >= reflect.Int && typ.Kind() <= reflect.Uint64:
		got = "integer"
	default:
		got = typ.Kind().String()
	}
	switch {
	case s.Ref == "#/components/schemas/Status":
		if typ != reflect.TypeFor[store.Status]() {
			return "a store.Status"
		}
	case s.Type == "string" && s.Format == "date-time":
		if got != "date-time" {
			return "a time.Time"
		}
	case got != want:
		return "a " + want
	}
	return ""
}

// TestClientTypesFollowTheOpenAPIDocument: every request and response
// type of the client has exactly the properties of its schema in the
// server's OpenAPI document, of the same kinds; a required property is
// always encoded and an optional one is left out when zero; and every
// object schema of the document is one of these types (or named here as
// one the client does not use).
func TestClientTypesFollowTheOpenAPIDocument(t *testing.T) {
	t.Parallel()
	var doc map[string]any
	if err := json.Unmarshal(httpapi.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	const s = "#/components/schemas/"
	types := []struct {
		v      any
		schema string
	}{
		{client.Submission{}, s + "SubmitResponse"},
		{client.Execution{}, s + "StatusDocument"},
		{client.ExecutionError{}, s + "Error"},
		{client.Await{}, s + "Await"},
		{client.ExecutionPage{}, s + "ListResponse"},
		{client.History{}, s + "HistoryResponse"},
		{client.Event{}, s + "HistoryEvent"},
		{client.EventError{}, s + "HistoryEvent/properties/error"},
		{client.RedriveRequest{}, s + "RedriveRequest"},
		{client.CancelRequest{}, s + "CancelRequest"},
		{client.PauseRequest{}, s + "PauseRequest"},
		{client.PauseState{}, s + "StatusDocument/properties/pause"},
		{client.BulkPauseRequest{}, s + "BulkPauseRequest"},
		{client.BulkFilter{}, s + "BulkPauseRequest/properties/filter"},
		{client.BulkJob{}, s + "BulkJob"},
		{client.BulkProgress{}, s + "BulkProgress"},
		{client.BulkRedriveRequest{}, s + "RedrivesRequest"},
		{client.RedriveFilter{}, s + "RedrivesRequest/properties/filter"},
		{client.BulkRedrive{}, s + "RedrivesResponse"},
		{client.RedriveProgress{}, s + "RedriveProgress"},
		{client.DeadLetterPage{}, s + "DeadLettersResponse"},
		{client.DeadLetter{}, s + "DeadLetter"},
		{client.DeadLetterCounts{}, s + "DeadLetterCounts"},
		{client.Problem{}, s + "Problem"},
		{client.PipelineList{}, s + "PipelineList"},
		{client.Pipeline{}, s + "Pipeline"},
		{client.PipelineVersion{}, s + "PipelineVersion"},
		{client.PipelineStep{}, s + "PipelineStep"},
		{client.ScheduleRequest{}, s + "ScheduleRequest"},
		{client.Schedule{}, s + "Schedule"},
		{client.ScheduleList{}, s + "ScheduleList"},
		{client.PipelineConcurrency{}, s + "PipelineConcurrency"},
		{client.PipelineRateLimit{}, s + "PipelineRateLimit"},
	}
	covered := map[string]bool{
		"Status": true, // store.Status
		"Health": true, // GET /healthz: the client has no call of it
	}
	for _, tc := range types {
		typ := reflect.TypeOf(tc.v)
		sc := schemaAt(t, doc, tc.schema)
		if name, ok := strings.CutPrefix(tc.schema, s); ok && !strings.Contains(name, "/") {
			covered[name] = true
		}
		members := jsonMembers(typ)
		for name, prop := range sc.Properties {
			m, ok := members[name]
			required := slices.Contains(sc.Required, name)
			switch {
			case !ok:
				t.Errorf("%s lacks %q of %s", typ, name, tc.schema)
				continue
			case required && m.optional:
				t.Errorf("%s.%s: %q is required by %s, but the field is omitted when zero", typ, m.field.Name, name, tc.schema)
			case !required && !m.optional:
				t.Errorf("%s.%s: %q is optional in %s, but the field is encoded when zero (add omitempty or omitzero)", typ, m.field.Name, name, tc.schema)
			}
			if why := kindMismatch(m.field.Type, prop); why != "" {
				t.Errorf("%s.%s (%s): %q of %s wants %s", typ, m.field.Name, m.field.Type, name, tc.schema, why)
			}
		}
		for name, m := range members {
			if _, ok := sc.Properties[name]; !ok {
				t.Errorf("%s.%s: %q is not a property of %s", typ, m.field.Name, name, tc.schema)
			}
		}
	}
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	for name := range schemas {
		if !covered[name] {
			t.Errorf("schema %s has no client type: add one (and a line above)", name)
		}
	}
}
