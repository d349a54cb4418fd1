package iamcheck

import (
	"strings"
	"testing"

	"github.com/qasync/qasync/shared/schema"
)

// small is a template with one function whose role has a policy
// resource, an inline policy, a managed policy of the template and an
// AWS managed one, exercising the intrinsic functions.
const small = `{"Resources":{
 "Fn":{"Type":"AWS::Lambda::Function","Properties":{"Role":{"Fn::GetAtt":["FnRole","Arn"]}}},
 "FnRole":{"Type":"AWS::IAM::Role","Properties":{
   "ManagedPolicyArns":[{"Fn::Join":["",["arn:",{"Ref":"AWS::Partition"},":iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"]]},{"Ref":"Managed"}],
   "Policies":[{"PolicyName":"inline","PolicyDocument":{"Statement":[
     {"Sid":"Streams","Effect":"Allow","Action":"dynamodb:GetRecords","Resource":{"Fn::GetAtt":["Tbl","StreamArn"]}}]}}]}},
 "Tbl":{"Type":"AWS::DynamoDB::Table","Properties":{}},
 "Q":{"Type":"AWS::SQS::Queue","Properties":{}},
 "Bus":{"Type":"AWS::Events::EventBus","Properties":{}},
 "Pol":{"Type":"AWS::IAM::Policy","Properties":{"Roles":[{"Ref":"FnRole"}],"PolicyDocument":{"Statement":[
   {"Sid":"Rows","Effect":"Allow","Action":["dynamodb:GetItem","dynamodb:Update*"],"Resource":{"Fn::GetAtt":["Tbl","Arn"]}},
   {"Sid":"Index","Effect":"Allow","Action":"dynamodb:Query","Resource":{"Fn::Join":["",[{"Fn::GetAtt":["Tbl","Arn"]},"/index/*"]]}},
   {"Sid":"Send","Effect":"Allow","Action":"sqs:*","Resource":{"Fn::Sub":"arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:${Q.QueueName}"}},
   {"Sid":"NoPurge","Effect":"Deny","Action":"sqs:PurgeQueue","Resource":"*"},
   {"Sid":"Events","Effect":"Allow","Action":"events:PutEvents","Resource":{"Fn::GetAtt":["Bus","Arn"]},"Condition":{"StringEquals":{"events:source":"qasync"}}}]}}},
 "Other":{"Type":"AWS::IAM::Policy","Properties":{"Roles":[{"Ref":"SomeoneElse"}],"PolicyDocument":{"Statement":[
   {"Effect":"Allow","Action":"*","Resource":"*"}]}}},
 "Managed":{"Type":"AWS::IAM::ManagedPolicy","Properties":{"PolicyDocument":{"Statement":[
   {"Sid":"Describe","Effect":"Allow","Action":"dynamodb:DescribeTable","Resource":{"Fn::GetAtt":["Tbl","Arn"]}}]}}}
}}`

func smallPolicy(t *testing.T, tpl string) *Policy {
	t.Helper()
	tp, err := ParseTemplate([]byte(tpl))
	if err != nil {
		t.Fatal(err)
	}
	local := Local{Region: "eu-west-1", AccountID: "123456789012",
		Tables: map[string]string{"Tbl": "t1"}, Queues: map[string]string{"Q": "http://127.0.0.1:9/000000000000/q1"}}
	ps, err := tp.Policies(local)
	if err != nil {
		t.Fatal(err)
	}
	p := ps["Fn"]
	if p == nil || len(ps) != 1 {
		t.Fatalf("policies %v", ps)
	}
	return p
}

func TestEvaluateSmallTemplate(t *testing.T) {
	p := smallPolicy(t, small)
	if p.Role != "FnRole" || len(p.Unresolved) != 1 || !strings.HasSuffix(p.Unresolved[0], "AWSLambdaBasicExecutionRole") ||
		!strings.HasPrefix(p.Unresolved[0], "arn:aws:iam::aws:") {
		t.Errorf("role %s unresolved %v", p.Role, p.Unresolved)
	}
	table := "arn:aws:dynamodb:eu-west-1:123456789012:table/t1"
	queue := "arn:aws:sqs:eu-west-1:123456789012:q1"
	bus := "arn:aws:events:eu-west-1:123456789012:event-bus/Bus" // a bus without a Name: its logical id
	for _, c := range []struct {
		action, resource string
		ctx              map[string][]string
		allowed          bool
		sid              string
	}{
		{"dynamodb:GetItem", table, nil, true, "Rows"},
		{"DynamoDB:getitem", table, nil, true, "Rows"},              // actions are case-insensitive
		{"dynamodb:UpdateItem", table, nil, true, "Rows"},           // wildcard action
		{"dynamodb:UpdateTable", table, nil, true, "Rows"},          // the wildcard is that broad
		{"dynamodb:PutItem", table, nil, false, ""},                 // not granted
		{"dynamodb:GetItem", table + "x", nil, false, ""},           // another table
		{"dynamodb:GetItem", table + "/index/list", nil, false, ""}, // an index is its own resource
		{"dynamodb:Query", table + "/index/list", nil, true, "Index"},
		{"dynamodb:Query", table, nil, false, ""},
		{"dynamodb:GetRecords", table + "/stream/2026-12-02T00:00:00.000", nil, true, "Streams"}, // inline policy
		{"dynamodb:DescribeTable", table, nil, true, "Describe"},                                 // managed policy of the template
		{"sqs:SendMessage", queue, nil, true, "Send"},
		{"sqs:PurgeQueue", queue, nil, false, "NoPurge"}, // explicit deny wins over sqs:*
		{"events:PutEvents", bus, map[string][]string{"events:source": {"qasync"}}, true, "Events"},
		{"events:PutEvents", bus, map[string][]string{"events:source": {"other"}}, false, ""},
		{"events:PutEvents", bus, nil, false, ""}, // a missing key fails StringEquals
	} {
		d := p.Evaluate(Request{Action: c.action, Resource: c.resource, Context: c.ctx})
		sid := ""
		if d.Statement != nil {
			sid = d.Statement.Sid
		}
		if d.Allowed != c.allowed || sid != c.sid {
			t.Errorf("%s on %s %v: allowed %v by %q, want %v by %q", c.action, c.resource, c.ctx, d.Allowed, sid, c.allowed, c.sid)
		}
	}
	missing, nearest := p.Missing(Request{Action: "dynamodb:PutItem", Resource: table})
	if missing != "Allow dynamodb:PutItem on ${Tbl.Arn}" || nearest != "Managed statement 0 (Describe) allows dynamodb:DescribeTable on it" {
		t.Errorf("missing %q nearest %q", missing, nearest)
	}
	missing, nearest = p.Missing(Request{Action: "dynamodb:Query", Resource: table})
	if missing != "Allow dynamodb:Query on ${Tbl.Arn}" || !strings.Contains(nearest, "(Index) allows dynamodb:Query on "+table+"/index/* only") {
		t.Errorf("missing %q nearest %q", missing, nearest)
	}
	if missing, _ := p.Missing(Request{Action: "sqs:PurgeQueue", Resource: queue}); !strings.Contains(missing, "(NoPurge) denies it") {
		t.Errorf("missing %q", missing)
	}
}

func TestNotActionNotResourceAndConditionOperators(t *testing.T) {
	p := smallPolicy(t, `{"Resources":{
 "Fn":{"Type":"AWS::Lambda::Function","Properties":{"Role":{"Fn::GetAtt":"FnRole.Arn"}}},
 "FnRole":{"Type":"AWS::IAM::Role","Properties":{}},
 "Pol":{"Type":"AWS::IAM::Policy","Properties":{"Roles":[{"Ref":"FnRole"}],"PolicyDocument":{"Statement":[
   {"Sid":"AllButDelete","Effect":"Allow","NotAction":["dynamodb:Delete*","s3:*"],"NotResource":"arn:aws:dynamodb:*:*:table/secret"},
   {"Sid":"Like","Effect":"Allow","Action":"s3:GetObject","Resource":"*","Condition":{"StringLike":{"s3:prefix":"home/?/*"},"StringNotEqualsIfExists":{"aws:tag":"x"}}}]}}}
}}`)
	for _, c := range []struct {
		action, resource string
		ctx              map[string][]string
		allowed          bool
	}{
		{"dynamodb:GetItem", "arn:aws:dynamodb:eu-west-1:1:table/open", nil, true},
		{"dynamodb:DeleteItem", "arn:aws:dynamodb:eu-west-1:1:table/open", nil, false},
		{"dynamodb:GetItem", "arn:aws:dynamodb:eu-west-1:1:table/secret", nil, false},
		{"s3:GetObject", "arn:aws:s3:::b/k", map[string][]string{"S3:Prefix": {"home/a/docs"}}, true}, // keys are case-insensitive
		{"s3:GetObject", "arn:aws:s3:::b/k", map[string][]string{"s3:prefix": {"home/ab/docs"}}, false},
		{"s3:GetObject", "arn:aws:s3:::b/k", map[string][]string{"s3:prefix": {"home/a/x"}, "aws:tag": {"x"}}, false},
	} {
		if d := p.Evaluate(Request{Action: c.action, Resource: c.resource, Context: c.ctx}); d.Allowed != c.allowed {
			t.Errorf("%s on %s %v: allowed %v, want %v", c.action, c.resource, c.ctx, d.Allowed, c.allowed)
		}
	}
}

func TestWildcard(t *testing.T) {
	for _, c := range []struct {
		p, s string
		ok   bool
	}{
		{"*", "", true}, {"a*c", "abbbc", true}, {"a*c", "abbbd", false}, {"a?c", "abc", true}, {"a?c", "ac", false},
		{"arn:*:table/t/*", "arn:aws:x:table/t/index/i", true}, {"*b*b", "abab", true}, {"a", "ab", false},
	} {
		if got := wildcard(c.p, c.s); got != c.ok {
			t.Errorf("wildcard(%q, %q) = %v", c.p, c.s, got)
		}
	}
}

func TestTemplateErrors(t *testing.T) {
	if _, err := ParseTemplate([]byte(`{}`)); err == nil || !strings.HasPrefix(err.Error(), "iamcheck: ") {
		t.Errorf("empty template: %v", err)
	}
	tp, err := ParseTemplate([]byte(`{"Resources":{
 "Fn":{"Type":"AWS::Lambda::Function","Properties":{"Role":{"Fn::GetAtt":["R","Arn"]}}},
 "R":{"Type":"AWS::IAM::Role","Properties":{}},
 "P":{"Type":"AWS::IAM::Policy","Properties":{"Roles":[{"Ref":"R"}],"PolicyDocument":{"Statement":[
   {"Effect":"Allow","Action":"a:b","Resource":{"Fn::ImportValue":"x"}}]}}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tp.Policies(Local{}); err == nil || !strings.Contains(err.Error(), "Fn::ImportValue") {
		t.Errorf("unsupported intrinsic: %v", err)
	}
}

// devPolicies resolves the committed synthesis of the dev stack (kept
// fresh by infra/cdk/stack's TestGoldenTemplate) on the local names.
func devPolicies(t *testing.T, names schema.Names) (map[string]*Policy, Local) {
	t.Helper()
	tp, err := LoadTemplate("../devstack/dev.template.json")
	if err != nil {
		t.Fatal(err)
	}
	urls := map[string]string{}
	for _, q := range []string{names.WorkQueue, names.PoisonQueue, names.DLQQueue, names.RejectQueue} {
		urls[q] = "http://127.0.0.1:9324/000000000000/" + q
	}
	local := LocalNames(names, urls, "", "")
	ps, err := tp.Policies(local)
	if err != nil {
		t.Fatal(err)
	}
	return ps, ps["WorkerFunction"].Local()
}

func TestSynthesizedTemplate(t *testing.T) {
	names := schema.Prefixed("t1")
	ps, local := devPolicies(t, names)
	for _, fn := range []string{"SubmitFunction", "WorkerFunction", "SweeperFunction", "DlqFunction", "HistoryFunction"} {
		if ps[fn] == nil || len(ps[fn].Statements) == 0 {
			t.Fatalf("no policy for %s: %v", fn, ps)
		}
	}
	exec := local.TableARN(names.ExecutionTable)
	work := local.QueueARN("http://127.0.0.1:9324/000000000000/" + names.WorkQueue)
	for _, c := range []struct {
		fn, action, resource string
		allowed              bool
	}{
		{"WorkerFunction", "dynamodb:UpdateItem", exec, true},
		{"WorkerFunction", "dynamodb:PutItem", exec, true}, // a concurrency key's first item
		{"WorkerFunction", "dynamodb:Query", exec + "/index/waitline", true},
		{"WorkerFunction", "dynamodb:Query", exec + "/index/wait", false}, // kept for deployed stacks, never read
		{"WorkerFunction", "dynamodb:Query", exec + "/index/sweep", false},
		{"WorkerFunction", "dynamodb:DescribeTable", local.TableARN(names.HistoryTable), true},
		{"WorkerFunction", "sqs:ChangeMessageVisibility", work, true},
		{"SubmitFunction", "sqs:SendMessage", work, true},
		{"SubmitFunction", "sqs:ReceiveMessage", work, false},
		{"SubmitFunction", "dynamodb:Query", exec + "/index/list", true},
		{"SubmitFunction", "dynamodb:Query", exec + "/index/sweep", false},
		{"SweeperFunction", "dynamodb:Query", exec + "/index/sweep", true},
		{"DlqFunction", "dynamodb:PutItem", local.TableARN(names.DeadLetterTable), true},
		{"DlqFunction", "dynamodb:PutItem", exec, false},
		{"HistoryFunction", "dynamodb:GetRecords", exec + "/stream/2026-12-02T00:00:00.000", true},
	} {
		if d := ps[c.fn].Evaluate(Request{Action: c.action, Resource: c.resource}); d.Allowed != c.allowed {
			t.Errorf("%s %s on %s: allowed %v, want %v", c.fn, c.action, c.resource, d.Allowed, c.allowed)
		}
	}
}

func TestWithoutRemovesOneGrant(t *testing.T) {
	tp, err := LoadTemplate("../devstack/dev.template.json")
	if err != nil {
		t.Fatal(err)
	}
	cut, n := tp.Without("WorkerFunction", "dynamodb:UpdateItem", "ExecutionTable")
	if n != 1 {
		t.Fatalf("removed %d grants, want 1", n)
	}
	names := schema.Prefixed("t1")
	local := LocalNames(names, nil, "eu-west-1", "")
	req := Request{Action: "dynamodb:UpdateItem", Resource: "arn:aws:dynamodb:eu-west-1:000000000000:table/" + names.ExecutionTable}
	full, _ := tp.Policies(local)
	less, err := cut.Policies(local)
	if err != nil {
		t.Fatal(err)
	}
	if !full["WorkerFunction"].Evaluate(req).Allowed || less["WorkerFunction"].Evaluate(req).Allowed {
		t.Fatal("the grant was not removed from the worker alone")
	}
	if !less["SweeperFunction"].Evaluate(req).Allowed {
		t.Error("the sweeper lost its grant too")
	}
	if !less["WorkerFunction"].Evaluate(Request{Action: "dynamodb:GetItem", Resource: req.Resource}).Allowed {
		t.Error("the worker lost GetItem on the execution table")
	}
	missing, nearest := less["WorkerFunction"].Missing(req)
	if missing != "Allow dynamodb:UpdateItem on ${ExecutionTable.Arn}" || !strings.Contains(nearest, "(CommandEffects) allows dynamodb:UpdateItem on") {
		t.Errorf("missing %q nearest %q", missing, nearest)
	}
}

func TestManagedPolicyResolvesOneTemplatePolicy(t *testing.T) {
	tp, err := LoadTemplate("../devstack/dev.template.json")
	if err != nil {
		t.Fatal(err)
	}
	local := Local{Region: "eu-west-1", AccountID: "111122223333", APIID: "abc123"}
	client, err := tp.ManagedPolicy("ClientInvokePolicy", local)
	if err != nil {
		t.Fatal(err)
	}
	operator, err := tp.ManagedPolicy("OperatorRedrivePolicy", local)
	if err != nil {
		t.Fatal(err)
	}
	if client.Name != "ClientInvokePolicy" || len(client.Statements) == 0 || !strings.HasPrefix(client.Statements[0].Source, "ClientInvokePolicy statement 0") {
		t.Fatalf("client policy %+v", client)
	}
	invoke := func(route string) Request {
		return Request{Action: "execute-api:Invoke", Resource: "arn:aws:execute-api:eu-west-1:111122223333:abc123/$default/" + route}
	}
	cases := []struct {
		p       *Policy
		route   string
		allowed bool
	}{
		{client, "POST/v1/pipelines/p1/executions", true},
		{client, "GET/v1/executions/e1/result", true},
		{client, "POST/v1/executions/e1/redrive", false},
		{operator, "POST/v1/executions/e1/redrive", true},
		{operator, "POST/v1/pipelines/p1/executions", false},
	}
	for _, c := range cases {
		if got := c.p.Evaluate(invoke(c.route)).Allowed; got != c.allowed {
			t.Errorf("%s %s: allowed %v, want %v", c.p.Name, c.route, got, c.allowed)
		}
	}
	// The API id is Local's: another API's ARN is not granted.
	other := Request{Action: "execute-api:Invoke", Resource: "arn:aws:execute-api:eu-west-1:111122223333:other/$default/POST/v1/pipelines/p1/executions"}
	if client.Evaluate(other).Allowed {
		t.Error("the client policy allows another API")
	}
	// Ref HttpApi defaults to DefaultAPIID.
	def, err := tp.ManagedPolicy("ClientInvokePolicy", Local{})
	if err != nil {
		t.Fatal(err)
	}
	if !def.Evaluate(Request{Action: "execute-api:Invoke", Resource: "arn:aws:execute-api:us-east-1:000000000000:local/$default/GET/v1/executions/e1"}).Allowed {
		t.Error("the default API id is not " + DefaultAPIID)
	}
	if _, err := tp.ManagedPolicy("SubmitFunction", local); err == nil || !strings.HasPrefix(err.Error(), "iamcheck: ") {
		t.Errorf("a function as a policy: %v", err)
	}
}
