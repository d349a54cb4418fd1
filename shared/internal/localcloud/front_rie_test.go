package localcloud_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/qasync/qasync/shared/internal/devstack"
	"github.com/qasync/qasync/shared/internal/iamcheck"
	"github.com/qasync/qasync/shared/internal/localcloud"
)

// TestHTTPFrontRoutesAndIAM runs echofn behind routes of the dev
// template's shape: a signed request reaches the function with its
// route, path parameters and caller; an unsigned one, or one the
// caller's policy does not allow, is refused before it; a NONE route
// needs no signature.
func TestHTTPFrontRoutesAndIAM(t *testing.T) {
	t.Parallel()
	tp, err := iamcheck.ParseTemplate(devstack.Template)
	if err != nil {
		t.Fatal(err)
	}
	clientPolicy, err := tp.ManagedPolicy("ClientInvokePolicy", iamcheck.Local{Region: "eu-west-1", APIID: "devapi"})
	if err != nil {
		t.Fatal(err)
	}
	opts := echoOptions(t, t.TempDir(), localcloud.Submit)
	opts.Region = "eu-west-1"
	opts.APIID = "devapi"
	opts.Routes = []localcloud.Route{
		{Key: "GET /v1/executions/{executionId}/result", Authorization: localcloud.AuthIAM, Function: localcloud.Submit},
		{Key: "POST /v1/executions/{executionId}/redrive", Authorization: localcloud.AuthIAM, Function: localcloud.Submit},
		{Key: "POST /v1/executions/{executionId}/awaits/{awaitId}/complete", Authorization: localcloud.AuthNone, Function: localcloud.Submit},
	}
	alice := localcloud.Caller{AccessKeyID: "AKIAALICE", SecretAccessKey: "alice-secret", ARN: "arn:aws:iam::000000000000:user/alice", Policy: clientPolicy}
	opts.Callers = []localcloud.Caller{alice}
	c := start(t, opts)

	send := func(method, path string, body []byte, sign bool) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, c.URL()+path, bytes.NewReader(body))
		if sign {
			sum := sha256.Sum256(body)
			creds := aws.Credentials{AccessKeyID: alice.AccessKeyID, SecretAccessKey: alice.SecretAccessKey}
			if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hex.EncodeToString(sum[:]), "execute-api", "eu-west-1", time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, out
	}

	code, out := send("GET", "/v1/executions/e%201/result?wait=1", nil, true)
	if code != 200 {
		t.Fatalf("signed result: %d %s", code, out)
	}
	var ev events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(out, &ev); err != nil {
		t.Fatal(err)
	}
	rc := ev.RequestContext
	if ev.RouteKey != "GET /v1/executions/{executionId}/result" || rc.RouteKey != ev.RouteKey || ev.PathParameters["executionId"] != "e 1" ||
		rc.APIID != "devapi" || rc.Authorizer == nil || rc.Authorizer.IAM == nil || rc.Authorizer.IAM.UserARN != alice.ARN ||
		rc.Authorizer.IAM.AccountID != "000000000000" || rc.Authorizer.IAM.AccessKey != alice.AccessKeyID {
		t.Errorf("event routeKey %q pathParameters %v apiId %q authorizer %+v", ev.RouteKey, ev.PathParameters, rc.APIID, rc.Authorizer)
	}

	if code, out := send("GET", "/v1/executions/e1/result", nil, false); code != 403 || strings.TrimSpace(string(out)) != `{"message":"Forbidden"}` {
		t.Errorf("unsigned: %d %s", code, out)
	}
	if code, out := send("POST", "/v1/executions/e1/redrive", []byte(`{}`), true); code != 403 || strings.TrimSpace(string(out)) != `{"message":"Forbidden"}` {
		t.Errorf("redrive by a client: %d %s", code, out)
	}
	if code, out := send("GET", "/v1/executions", nil, true); code != 404 || strings.TrimSpace(string(out)) != `{"message":"Not Found"}` {
		t.Errorf("no route: %d %s", code, out)
	}
	code, out = send("POST", "/v1/executions/e1/awaits/a1/complete", []byte(`{"token":"t"}`), false)
	ev = events.APIGatewayV2HTTPRequest{}
	_ = json.Unmarshal(out, &ev)
	if code != 200 || ev.RequestContext.Authorizer != nil || ev.PathParameters["awaitId"] != "a1" {
		t.Errorf("await completion: %d %s", code, out)
	}
}

// Start refuses a route to a disabled function before starting anything.
func TestStartRefusesBadRoutes(t *testing.T) {
	t.Parallel()
	opts := echoOptions(t, t.TempDir(), localcloud.Submit)
	opts.Routes = []localcloud.Route{{Key: "POST /v1/redrives", Authorization: localcloud.AuthIAM, Function: localcloud.Worker}}
	if _, err := localcloud.Start(t.Context(), opts); err == nil || !strings.HasPrefix(err.Error(), "localcloud: route \"POST /v1/redrives\": function worker is disabled") {
		t.Errorf("Start: %v", err)
	}
}
