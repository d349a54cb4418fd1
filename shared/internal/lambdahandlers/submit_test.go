package lambdahandlers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/internal/httpapi"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/store"
)

// fixtureExecution is the execution the status and result fixtures name.
const fixtureExecution = "01a2267a-7b20-7c3e-8a5d-2f4b9c1e7d30"

// TestSubmitFixture: the POST fixture through the real handler creates an
// execution in the IAM caller's tenant (202), and the same event again is
// a duplicate (200) of the same execution.
func TestSubmitFixture(t *testing.T) {
	env, logs := openMem(t, nil)
	h := env.submitHandler()
	ev := fixture(t, "submit-post.json")

	var resp events.APIGatewayV2HTTPResponse
	invoke(t, context.Background(), h, ev, &resp)
	if resp.StatusCode != http.StatusAccepted || resp.IsBase64Encoded {
		t.Fatalf("status %d base64 %v, body %s", resp.StatusCode, resp.IsBase64Encoded, resp.Body)
	}
	var doc client.Submission
	if err := json.Unmarshal([]byte(resp.Body), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.PipelineID != orderPipelineID || doc.Duplicate || doc.ExecutionID == "" {
		t.Fatalf("submit document %+v", doc)
	}
	if got, want := resp.Headers["Location"], "/v1/executions/"+doc.ExecutionID; got != want {
		t.Errorf("Location %q, want %q", got, want)
	}
	if ct := resp.Headers["Content-Type"]; ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	row, err := env.p.Runtime.Status(context.Background(), store.Key{TenantID: fixtureTenant, ExecutionID: doc.ExecutionID})
	if err != nil {
		t.Fatalf("the execution is not in the IAM caller's tenant: %v", err)
	}
	if row.IdempotencyKey != "order-1001" {
		t.Errorf("idempotency key %q", row.IdempotencyKey)
	}

	var again events.APIGatewayV2HTTPResponse
	invoke(t, context.Background(), h, ev, &again)
	var dup client.Submission
	if err := json.Unmarshal([]byte(again.Body), &dup); err != nil {
		t.Fatal(err)
	}
	if again.StatusCode != http.StatusOK || !dup.Duplicate || dup.ExecutionID != doc.ExecutionID {
		t.Fatalf("second delivery: %d %+v", again.StatusCode, dup)
	}
	if strings.Contains(logs.String(), "amountCents") {
		t.Error("the request body reached the logs")
	}
}

// seedSucceeded stores the fixture execution as SUCCEEDED with result.
func seedSucceeded(t *testing.T, env memEnv, result string) {
	t.Helper()
	rt := env.p.Runtime
	ref, err := payload.Write(context.Background(), rt.Payloads(), payload.Payload{Encoding: payload.EncodingJSON, ContentType: payload.ContentTypeJSON, Data: []byte(result)},
		"result/"+fixtureExecution, payload.DefaultInlineBudget, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	seed(t, rt, fixtureExecution, orderPipelineID, `{"orderId":"1001","items":[{"sku":"book","qty":2}],"amountCents":4599}`, func(e *store.Execution) {
		e.Status, e.Version, e.StepIndex, e.StepName = store.Succeeded, 9, 3, stepScheduleDelivery
		e.NextDueAt, e.Result, e.LastTransitionKey = time.Time{}, ref, fixtureExecution+":3:1"
	})
}

// TestStatusFixture: the status fixture reads the named execution of the
// IAM caller's tenant.
func TestStatusFixture(t *testing.T) {
	env, _ := openMem(t, nil)
	seedSucceeded(t, env, `{"orderId":"1001","status":"DELIVERY_SCHEDULED"}`)
	var resp events.APIGatewayV2HTTPResponse
	invoke(t, context.Background(), env.submitHandler(), fixture(t, "status-get.json"), &resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, resp.Body)
	}
	var doc client.Execution
	if err := json.Unmarshal([]byte(resp.Body), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.ExecutionID != fixtureExecution || doc.Status != store.Succeeded || doc.Version != 9 || doc.StepName != stepScheduleDelivery {
		t.Fatalf("status document %+v", doc)
	}
}

// TestResultFixture: the result fixture returns the result bytes as they
// were stored, as text.
func TestResultFixture(t *testing.T) {
	env, _ := openMem(t, nil)
	const result = `{"orderId":"1001","status":"DELIVERY_SCHEDULED","deliveryId":"dlv-1"}`
	seedSucceeded(t, env, result)
	var resp events.APIGatewayV2HTTPResponse
	invoke(t, context.Background(), env.submitHandler(), fixture(t, "result-get.json"), &resp)
	if resp.StatusCode != http.StatusOK || resp.IsBase64Encoded || resp.Body != result {
		t.Fatalf("result %d base64=%v body %q", resp.StatusCode, resp.IsBase64Encoded, resp.Body)
	}
	if ct := resp.Headers["Content-Type"]; ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
}

// TestHistoryFixture: the history fixture (limit=1 in the query string,
// as API Gateway passes it) reads one page of the named execution's
// history through the real handler, with a nextCursor; the same event
// with that cursor added to its query string reads the next page, and
// the pages end.
func TestHistoryFixture(t *testing.T) {
	env, _ := openMem(t, nil)
	seed(t, env.p.Runtime, fixtureExecution, orderPipelineID, `{"orderId":"1001"}`, nil)
	if _, _, err := env.p.Runtime.Cancel(context.Background(), store.Key{TenantID: fixtureTenant, ExecutionID: fixtureExecution}, "order withdrawn"); err != nil {
		t.Fatal(err)
	}
	var ev events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(fixture(t, "history-get.json"), &ev); err != nil {
		t.Fatal(err)
	}
	var seqs []int
	for page := 1; ; page++ {
		b, _ := json.Marshal(ev)
		var resp events.APIGatewayV2HTTPResponse
		invoke(t, context.Background(), env.submitHandler(), b, &resp)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("page %d: status %d: %s", page, resp.StatusCode, resp.Body)
		}
		var doc client.History
		if err := json.Unmarshal([]byte(resp.Body), &doc); err != nil {
			t.Fatal(err)
		}
		if len(doc.Events) != 1 || doc.ExecutionID != fixtureExecution || page > 10 {
			t.Fatalf("page %d of limit 1: %s", page, resp.Body)
		}
		seqs = append(seqs, doc.Events[0].Seq)
		if doc.NextCursor == "" {
			break
		}
		ev.RawQueryString = "limit=1&cursor=" + doc.NextCursor
		ev.QueryStringParameters = map[string]string{"limit": "1", "cursor": doc.NextCursor}
	}
	if len(seqs) < 2 || seqs[0] != 1 || seqs[len(seqs)-1] != len(seqs) {
		t.Fatalf("the pages gave seqs %v", seqs)
	}
}

// TestStatusFixtureOtherTenant: an execution of another tenant is not
// found through the caller's identity: another IAM role of the same
// account is another tenant (tenant-source iam).
func TestStatusFixtureOtherTenant(t *testing.T) {
	env, _ := openMem(t, nil)
	var ev events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(fixture(t, "status-get.json"), &ev); err != nil {
		t.Fatal(err)
	}
	seedSucceeded(t, env, `{}`)
	ev.RequestContext.Authorizer.IAM.UserARN = "arn:aws:sts::123456789012:assumed-role/other-client/order-service"
	b, _ := json.Marshal(ev)
	var resp events.APIGatewayV2HTTPResponse
	invoke(t, context.Background(), env.submitHandler(), b, &resp)
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("status %d: %s", resp.StatusCode, resp.Body)
	}
}

// TestSubmitWithoutIAMIdentity: tenant source iam and no IAM authorizer
// in the event: refused with 401, nothing stored.
func TestSubmitWithoutIAMIdentity(t *testing.T) {
	env, _ := openMem(t, nil)
	var ev events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(fixture(t, "submit-post.json"), &ev); err != nil {
		t.Fatal(err)
	}
	ev.RequestContext.Authorizer = nil
	resp, err := env.submitHandler()(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	var p httpapi.Problem
	if err := json.Unmarshal([]byte(resp.Body), &p); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusUnauthorized || p.Type != httpapi.ProblemTypePrefix+"unauthorized" {
		t.Fatalf("%d %+v", resp.StatusCode, p)
	}
}
