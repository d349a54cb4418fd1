package lambdafn_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/qasync/qasync/shared/internal/console"
	"github.com/qasync/qasync/shared/lambdafn"
)

// TestSubmitFunctionServesTheConsole: the submit function (and so
// qasync local, whose API Gateway front sends every path to it) answers
// /console with the console's pages, in the caller's tenant (here the IAM
// principal), with the console's cookies in the response's Cookies.
func TestSubmitFunctionServesTheConsole(t *testing.T) {
	env := bootSubmit(t, registry(t), lambdafn.WithLogOutput(io.Discard), lambdafn.WithLookupEnv(envMap(map[string]string{
		"PIPELINE_ORCHESTRATOR_ADMIN_TOKEN":        "console-token",
		"PIPELINE_ORCHESTRATOR_HTTP_TENANT_SOURCE": "iam",
	})))
	s := submit(t, env, echoID, `{"echo":1}`)
	resp := call(t, env, http.MethodGet, "/console/executions/"+s.ExecutionID, "")
	if resp.StatusCode != http.StatusOK || resp.Headers["Content-Type"] != "text/html; charset=utf-8" || !strings.Contains(resp.Body, s.ExecutionID) ||
		!strings.Contains(resp.Body, `<strong id="tenant-name">123456789012.role.order-service</strong>`) {
		t.Fatalf("console page: %d %v\n%s", resp.StatusCode, resp.Headers, resp.Body)
	}
	if len(resp.Cookies) != 1 || !strings.HasPrefix(resp.Cookies[0], console.CSRFCookie+"=") || !strings.Contains(resp.Cookies[0], "SameSite=Strict") {
		t.Errorf("cookies %q, want the CSRF cookie", resp.Cookies)
	}
	if resp := call(t, env, http.MethodGet, "/v1/executions/"+s.ExecutionID, ""); resp.StatusCode != http.StatusOK {
		t.Errorf("the API beside the console: %d", resp.StatusCode)
	}
}
