package stack

import (
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// dig follows keys (strings into objects, ints into lists) through a
// template value, failing the test where one is missing.
func dig(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, k := range path {
		switch k := k.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok || m[k] == nil {
				t.Fatalf("no %q in %s", k, str(v))
			}
			v = m[k]
		case int:
			l := list(v)
			if k >= len(l) {
				t.Fatalf("no item %d in %s", k, str(v))
			}
			v = l[k]
		}
	}
	return v
}

// With the await front (prod by default, full with its own limit), the
// await completion route is reached through a regional REST API whose
// stage carries a WAF web ACL: one rate-based rule per client IP, scoped
// down to POST on the completion path, answering 429 with Retry-After;
// the REST method proxies the request unchanged to the origin HTTP API,
// and the main HTTP API keeps only IAM routes.
func TestAwaitWebACL(t *testing.T) {
	for variant, want := range map[string]struct{ limit, window float64 }{"prod": {100, 60}, "full": {300, 300}} {
		v := synth(t, variant)
		acl := v.props(t, AwaitWebACLID)
		if acl["Scope"] != "REGIONAL" || str(acl["DefaultAction"]) != `{"Allow":{}}` || acl["Name"] != v.settings.Prefix+"-await" {
			t.Errorf("%s: web ACL scope %v, default action %v, name %v", variant, acl["Scope"], str(acl["DefaultAction"]), acl["Name"])
		}
		rules := list(acl["Rules"])
		if len(rules) != 1 {
			t.Fatalf("%s: rules %s, want the rate rule only", variant, str(rules))
		}
		rule := rules[0]
		rate := dig(t, rule, "Statement", "RateBasedStatement").(map[string]any)
		if rate["AggregateKeyType"] != "IP" || num(t, rate["Limit"]) != want.limit || num(t, rate["EvaluationWindowSec"]) != want.window {
			t.Errorf("%s: rate statement %s, want %v per IP per %v s", variant, str(rate), want.limit, want.window)
		}
		scope := list(dig(t, rate, "ScopeDownStatement", "AndStatement", "Statements"))
		if len(scope) != 2 {
			t.Fatalf("%s: scope-down %s", variant, str(scope))
		}
		method := dig(t, scope[0], "ByteMatchStatement").(map[string]any)
		if str(method["FieldToMatch"]) != `{"Method":{}}` || method["PositionalConstraint"] != "EXACTLY" || method["SearchString"] != "POST" {
			t.Errorf("%s: scope-down method match %s", variant, str(method))
		}
		path := dig(t, scope[1], "RegexMatchStatement").(map[string]any)
		if str(path["FieldToMatch"]) != `{"UriPath":{}}` || path["RegexString"] != AwaitPathPattern(awaitPath) {
			t.Errorf("%s: scope-down path match %s, want %s", variant, str(path), AwaitPathPattern(awaitPath))
		}
		for _, m := range []map[string]any{method, path} {
			if str(m["TextTransformations"]) != `[{"Priority":0,"Type":"NONE"}]` {
				t.Errorf("%s: transformations %s", variant, str(m["TextTransformations"]))
			}
		}
		block := dig(t, rule, "Action", "Block", "CustomResponse").(map[string]any)
		retry := str(want.window)
		if num(t, block["ResponseCode"]) != 429 || str(block["ResponseHeaders"]) != `[{"Name":"Retry-After","Value":"`+retry+`"}]` ||
			str(dig(t, acl, "CustomResponseBodies", block["CustomResponseBodyKey"].(string))) != `{"Content":"{\"message\":\"Too Many Requests\"}","ContentType":"APPLICATION_JSON"}` {
			t.Errorf("%s: block response %s, body %s", variant, str(block), str(acl["CustomResponseBodies"]))
		}
		for _, vc := range []any{acl["VisibilityConfig"], dig(t, rule, "VisibilityConfig")} {
			m := vc.(map[string]any)
			if m["CloudWatchMetricsEnabled"] != true || m["SampledRequestsEnabled"] != true {
				t.Errorf("%s: visibility %s", variant, str(vc))
			}
		}

		// The web ACL protects the REST API's stage, which exists first.
		assoc := v.props(t, AwaitWebACLAssocID)
		if arn := str(assoc["ResourceArn"]); !strings.Contains(arn, ":apigateway:") || !strings.Contains(arn, "::/restapis/<"+AwaitAPIID+">/stages/") ||
			!strings.HasSuffix(arn, "/stages/<"+AwaitAPIStageID+">") || str(assoc["WebACLArn"]) != "<"+AwaitWebACLID+".Arn>" {
			t.Errorf("%s: association %s", variant, str(assoc))
		}
		deps := false
		for _, d := range list(v.res[AwaitWebACLAssocID]["DependsOn"]) {
			deps = deps || d == AwaitAPIStageID
		}
		if !deps {
			t.Errorf("%s: association DependsOn %v lacks %s", variant, v.res[AwaitWebACLAssocID]["DependsOn"], AwaitAPIStageID)
		}

		// The REST API: regional, every body passed as bytes, no
		// account-wide CloudWatch role.
		api := v.props(t, AwaitAPIID)
		if str(api["EndpointConfiguration"]) != `{"Types":["REGIONAL"]}` || str(api["BinaryMediaTypes"]) != `["*/*"]` {
			t.Errorf("%s: REST API %s", variant, str(api))
		}
		stage := v.props(t, AwaitAPIStageID)
		ms := dig(t, stage, "MethodSettings", 0).(map[string]any)
		if stage["StageName"] != v.settings.Stage || ms["HttpMethod"] != "*" || ms["ResourcePath"] != "/*" ||
			num(t, ms["ThrottlingRateLimit"]) != 10 || num(t, ms["ThrottlingBurstLimit"]) != 20 {
			t.Errorf("%s: REST stage %s, want the await throttle 10/s, burst 20", variant, str(stage))
		}
		if als := stage["AccessLogSetting"].(map[string]any); str(als["DestinationArn"]) != "<AwaitApiAccessLogs.Arn>" ||
			!strings.Contains(str(als["Format"]), "$context.wafResponseCode") || !strings.Contains(str(als["Format"]), "$context.requestId") {
			t.Errorf("%s: REST access log %s", variant, str(als))
		}
		m := v.props(t, AwaitMethodID)
		integ := m["Integration"].(map[string]any)
		if m["HttpMethod"] != "POST" || m["AuthorizationType"] != "NONE" || str(m["RequestValidatorId"]) != "<"+AwaitValidatorID+">" ||
			str(m["RequestParameters"]) != `{"method.request.path.awaitId":true,"method.request.path.executionId":true}` {
			t.Errorf("%s: method %s", variant, str(m))
		}
		if integ["Type"] != "HTTP_PROXY" || integ["IntegrationHttpMethod"] != "POST" ||
			str(integ["Uri"]) != "<"+AwaitOriginAPIID+".ApiEndpoint>"+awaitPath ||
			str(integ["RequestParameters"]) != `{"integration.request.path.awaitId":"method.request.path.awaitId","integration.request.path.executionId":"method.request.path.executionId"}` {
			t.Errorf("%s: method integration %s", variant, str(integ))
		}
		var parts []string
		for _, id := range v.ofType("AWS::ApiGateway::Resource") {
			parts = append(parts, str(v.props(t, id)["PathPart"]))
		}
		sort.Strings(parts)
		if want := []string{"awaits", "complete", "executions", "v1", "{awaitId}", "{executionId}"}; !reflect.DeepEqual(parts, want) {
			t.Errorf("%s: REST resources %v, want the completion path's %v", variant, parts, want)
		}
		val := v.props(t, AwaitValidatorID)
		if val["ValidateRequestParameters"] != true || val["ValidateRequestBody"] != true {
			t.Errorf("%s: validator %s", variant, str(val))
		}

		// The main HTTP API: IAM (or JWT) routes only, no token route, no
		// route settings; the origin: the token route alone, its
		// throttle the await throttle, its URL never an output.
		for _, id := range v.ofType("AWS::ApiGatewayV2::Route") {
			p := v.props(t, id)
			onMain := str(p["ApiId"]) == "<"+HTTPAPIID+">"
			if onMain == (p["AuthorizationType"] == "NONE") {
				t.Errorf("%s: route %s (%v) on %v has authorization %v", variant, id, p["RouteKey"], p["ApiId"], p["AuthorizationType"])
			}
		}
		if rs := v.props(t, "HttpApiDefaultStage")["RouteSettings"]; rs != nil {
			t.Errorf("%s: the main stage has route settings %s without a token route", variant, str(rs))
		}
		origin := v.props(t, AwaitOriginStageID)
		if origin["StageName"] != "$default" || str(origin["DefaultRouteSettings"]) != `{"ThrottlingBurstLimit":20,"ThrottlingRateLimit":10}` ||
			str(dig(t, origin, "AccessLogSettings", "DestinationArn")) != "<AwaitOriginAccessLogs.Arn>" {
			t.Errorf("%s: origin stage %s", variant, str(origin))
		}
		for id, o := range v.doc["Outputs"].(map[string]any) {
			if strings.Contains(str(o), AwaitOriginAPIID) {
				t.Errorf("%s: output %s publishes the origin: %s", variant, id, str(o))
			}
		}
		if got := str(dig(t, v.doc, "Outputs", "AwaitApiUrl", "Value")); !strings.Contains(got, "<"+AwaitAPIID+">") {
			t.Errorf("%s: AwaitApiUrl %s", variant, got)
		}
	}
}

// Without the await front (dev by default, prod with awaitWaf=false) the
// template has no web ACL and no REST API: the await completion route
// stays on the main HTTP API (TestAwaitCompletionRoute).
func TestAwaitFrontTurnedOff(t *testing.T) {
	for _, variant := range []string{"dev", "prod-tenants"} {
		v := synth(t, variant)
		if v.settings.AwaitWAF {
			t.Fatalf("%s: the variant has the await front", variant)
		}
		for typ := range v.typeCounts() {
			if strings.HasPrefix(typ, "AWS::WAFv2::") || strings.HasPrefix(typ, "AWS::ApiGateway::") {
				t.Errorf("%s: %s without the await front", variant, typ)
			}
		}
		if p := v.props(t, AwaitCompleteRouteID); str(p["ApiId"]) != "<"+HTTPAPIID+">" || p["AuthorizationType"] != "NONE" {
			t.Errorf("%s: await completion route %s", variant, str(p))
		}
		if _, ok := v.res[AwaitOriginAPIID]; ok {
			t.Errorf("%s: an origin API without the front", variant)
		}
		if outs := v.doc["Outputs"].(map[string]any); outs["AwaitApiUrl"] != nil {
			t.Errorf("%s: AwaitApiUrl without the front", variant)
		}
	}
}

// The rate rule's path pattern matches the completion path with and
// without the stage segment, and nothing else.
func TestAwaitPathPattern(t *testing.T) {
	re := regexp.MustCompile(AwaitPathPattern(awaitPath))
	for path, want := range map[string]bool{
		"/prod/v1/executions/ex-1/awaits/aw-0a1b/complete":  true,
		"/v1/executions/ex-1/awaits/aw-0a1b/complete":       true,
		"/prod/v1/executions/ex-1/awaits/aw-0a1b/complete/": false,
		"/a/b/v1/executions/ex-1/awaits/aw-0a1b/complete":   false,
		"/prod/v1/executions/ex-1/cancel":                   false,
		"/prod/v1/executions//awaits/aw-1/complete":         false,
		"/prod/v1/executions/ex-1/awaits/aw-1/completed":    false,
		"/prod/v1/executions/e/x/awaits/aw-1/complete":      false,
	} {
		if got := re.MatchString(path); got != want {
			t.Errorf("%s: match %v, want %v", path, got, want)
		}
	}
}

// Each tenant stage is a stage of the main HTTP API with the tenant's
// own throttle (its own token bucket), the shared access logs and the
// await route's throttle, invoked through a managed policy naming the
// client routes on that stage only; the shared policies name $default
// only, so a tenant's stage is its own.
func TestTenantStages(t *testing.T) {
	v := synth(t, "prod-tenants")
	arn := func(stage, method, path string) string {
		return "arn:<AWS::Partition>:execute-api:<AWS::Region>:<AWS::AccountId>:<HttpApi>/" + stage + "/" + method + wildcardParams(path)
	}
	resources := func(id string) []string {
		sts := v.statements()[id]
		if len(sts) != 1 || str(sts[0]["Action"]) != "execute-api:Invoke" || sts[0]["Effect"] != "Allow" {
			t.Fatalf("%s: statements %v", id, sts)
		}
		var out []string
		for _, r := range list(sts[0]["Resource"]) {
			out = append(out, str(r))
		}
		return out
	}
	for name, want := range map[string]Throttle{"acme": {20, 40}, "big-co": {50, 100}} {
		id := TenantStageID(name)
		p := v.props(t, "TenantStage"+id)
		if str(p["ApiId"]) != "<"+HTTPAPIID+">" || p["StageName"] != name || p["AutoDeploy"] != true ||
			str(dig(t, p, "AccessLogSettings", "DestinationArn")) != "<HttpApiAccessLogs.Arn>" {
			t.Errorf("%s: stage %s", name, str(p))
		}
		def := p["DefaultRouteSettings"].(map[string]any)
		if num(t, def["ThrottlingRateLimit"]) != want.RateLimit || num(t, def["ThrottlingBurstLimit"]) != float64(want.BurstLimit) {
			t.Errorf("%s: throttle %s, want %+v", name, str(def), want)
		}
		rs := dig(t, p, "RouteSettings", "POST "+awaitPath).(map[string]any)
		if num(t, rs["ThrottlingRateLimit"]) != 10 || num(t, rs["ThrottlingBurstLimit"]) != 20 {
			t.Errorf("%s: await route settings %s", name, str(rs))
		}
		var wantArns []string
		for _, r := range Routes {
			if r.Client && !r.ResumeToken {
				wantArns = append(wantArns, arn(name, r.Method, r.Path))
			}
		}
		if got := resources("TenantInvokePolicy" + id); !reflect.DeepEqual(got, wantArns) {
			t.Errorf("%s: policy resources %v, want %v", name, got, wantArns)
		}
		outs := v.doc["Outputs"].(map[string]any)
		if url := str(dig(t, outs, "TenantApiUrl"+id, "Value")); !strings.HasPrefix(url, "https://<"+HTTPAPIID+">.execute-api.") || !strings.HasSuffix(url, "/"+name) ||
			str(dig(t, outs, "TenantPolicyArn"+id, "Value")) != "<TenantInvokePolicy"+id+">" {
			t.Errorf("%s: outputs %s, %s", name, str(outs["TenantApiUrl"+id]), str(outs["TenantPolicyArn"+id]))
		}
	}
	if def := v.props(t, "HttpApiDefaultStage")["DefaultRouteSettings"]; str(def) != `{"ThrottlingBurstLimit":200,"ThrottlingRateLimit":100}` {
		t.Errorf("$default throttle %s", str(def))
	}
	for _, id := range []string{ClientPolicyID, OperatorPolicyID} {
		for _, r := range resources(id) {
			if !strings.Contains(r, "<HttpApi>/$default/") {
				t.Errorf("%s names a stage other than $default: %s", id, r)
			}
		}
	}
	// The submit function's permissions cover every stage of the API.
	for _, id := range v.ofType("AWS::Lambda::Permission") {
		p := v.props(t, id)
		if p["Principal"] == "apigateway.amazonaws.com" && !strings.Contains(str(p["SourceArn"]), "<"+HTTPAPIID+">/*/*/") {
			t.Errorf("%s: SourceArn %s is not for every stage", id, str(p["SourceArn"]))
		}
	}
	if got := len(v.ofType("AWS::ApiGatewayV2::Stage")); got != 3 {
		t.Errorf("%d stages, want $default and two tenant stages", got)
	}
}

// The shared policies keep the descriptions they had before tenant
// stages: CloudFormation replaces a managed policy whose description
// changes, and the roles it is attached to outside the stack would lose it.
func TestSharedPolicyDescriptionsStable(t *testing.T) {
	v := synth(t, "prod-tenants")
	for id, want := range map[string]string{
		ClientPolicyID:   "qasync prod: submit executions, read and list them, their results, histories and dead letters, health check (not the operator routes)",
		OperatorPolicyID: "qasync prod: re-drive and cancel executions, start bulk re-drives and read their progress",
	} {
		if got := v.props(t, id)["Description"]; got != want {
			t.Errorf("%s: Description %q, want %q", id, got, want)
		}
	}
}
