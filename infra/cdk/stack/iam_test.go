package stack

import (
	"reflect"
	"sort"
	"strings"
	"testing"
)

// grant expands actions on resources into "action resource" lines.
func grant(resources []string, actions ...string) []string {
	var out []string
	for _, a := range actions {
		for _, r := range resources {
			out = append(out, a+" "+r)
		}
	}
	return out
}

// Each function's role holds exactly these grants: no more (least
// privilege), no fewer (the function would fail).
func TestLeastPrivilegePerFunction(t *testing.T) {
	v := synth(t, "dev")
	arn := func(id string) []string { return []string{"<" + id + ".Arn>"} }
	tables := []string{"<ExecutionTable.Arn>", "<PayloadTable.Arn>", "<DeadLetterTable.Arn>", "<EffectTable.Arn>", "<HistoryTable.Arn>"}
	common := func(fnID string) []string {
		out := grant(arn(fnID+"Logs"), "logs:CreateLogStream", "logs:PutLogEvents")
		out = append(out, grant(tables, "dynamodb:DescribeTable")...)                                                                                      // strict startup
		out = append(out, grant([]string{"<WorkQueue.Arn>", "<UrgentQueue.Arn>", "<DlqQueue.Arn>", "<ItemRejectQueue.Arn>"}, "sqs:GetQueueAttributes")...) // strict startup
		return out
	}
	events := `events:PutEvents <LifecycleEventBus.Arn> if {"StringEquals":{"events:source":"qasync"}}`
	consume := []string{"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"}
	secret := grant([]string{"<" + ResumeSecretID + ">"}, "secretsmanager:GetSecretValue")
	// Whatever dispatches sends to both work queues (the dispatcher routes
	// by priority: the urgent lane); the worker consumes both.
	workQueues := []string{"<WorkQueue.Arn>", "<UrgentQueue.Arn>"}
	want := map[string][]string{
		SubmitFunctionID: concat(common(SubmitFunctionID),
			grant(arn(ExecutionTableID), "dynamodb:BatchGetItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"),
			grant([]string{"<ExecutionTable.Arn>/index/list", "<DeadLetterTable.Arn>/index/tenant"}, "dynamodb:Query"),
			grant([]string{"<ExecutionTable.Arn>/index/waitline"}, "dynamodb:Query"), // concurrency keys: a cancel's hand-over
			grant(arn(PayloadTableID), "dynamodb:GetItem", "dynamodb:PutItem"),
			grant(workQueues, "sqs:SendMessage"),
			grant(arn(DLQQueueID), "sqs:SendMessage"),
			grant(arn(HistoryTableID), "dynamodb:Query"), // the history route
			secret),
		WorkerFunctionID: concat(common(WorkerFunctionID), secret,
			grant(arn(ExecutionTableID), "dynamodb:BatchGetItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"),
			grant([]string{"<ExecutionTable.Arn>/index/waitline"}, "dynamodb:Query"), // concurrency keys
			grant(arn(PayloadTableID), "dynamodb:GetItem", "dynamodb:PutItem"),
			grant(arn(EffectTableID), "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"),
			grant(workQueues, append(consume, "sqs:ChangeMessageVisibility")...),
			grant(workQueues, "sqs:SendMessage"),
			grant(arn(DLQQueueID), "sqs:SendMessage"),
			grant(arn(RejectQueueID), "sqs:SendMessage")),
		SweeperFunctionID: concat(common(SweeperFunctionID),
			grant([]string{"<ExecutionTable.Arn>/index/sweep", "<ExecutionTable.Arn>/index/list", "<ExecutionTable.Arn>/index/waitline"}, "dynamodb:Query"),
			grant(arn(ExecutionTableID), "dynamodb:BatchGetItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"),
			grant(workQueues, "sqs:SendMessage"),
			grant(arn(DLQQueueID), "sqs:SendMessage")),
		DLQFunctionID: concat(common(DLQFunctionID),
			grant(arn(DeadLetterTableID), "dynamodb:GetItem", "dynamodb:PutItem"),
			grant(arn(ExecutionTableID), "dynamodb:GetItem", "dynamodb:UpdateItem"),
			grant([]string{"<DlqQueue.Arn>", "<PoisonQueue.Arn>"}, consume...)),
		// The history function: its event source mapping reads the
		// execution table's stream with this role and sends the failure
		// records of batches it gives up on to the failure queue; the
		// function writes pages and puts the lifecycle events it derives
		// from the stream (the only function that does). No secret, no
		// row.
		HistoryFunctionID: concat(common(HistoryFunctionID),
			grant([]string{"<ExecutionTable.StreamArn>"}, "dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"),
			grant([]string{"<ExecutionTable.Arn>/stream/*"}, "dynamodb:ListStreams"),
			grant(arn(HistoryTableID), "dynamodb:PutItem"),
			grant(arn(HistoryFailureQueueID), "sqs:SendMessage"),
			[]string{events}),
	}
	for fnID, w := range want {
		sort.Strings(w)
		got := v.grantsOf(t, fnID+"Role")
		if !reflect.DeepEqual(got, w) {
			t.Errorf("%s grants:\n got  %s\n want %s\n extra %v\n missing %v", fnID,
				strings.Join(got, "\n      "), strings.Join(w, "\n      "), minus(got, w), minus(w, got))
		}
	}
	// With outputBucket (full) the worker may also put objects into the
	// bucket, and nothing else may touch it.
	full := synth(t, "full")
	put := "s3:PutObject <" + OutputBucketID + ".Arn>/*"
	for _, name := range FunctionNames {
		got := full.grantsOf(t, FunctionIDs[name]+"Role")
		var s3 []string
		for _, g := range got {
			if strings.HasPrefix(g, "s3:") || strings.Contains(g, OutputBucketID) {
				s3 = append(s3, g)
			}
		}
		if want := []string(nil); name == Worker {
			if want = []string{put}; !reflect.DeepEqual(s3, want) {
				t.Errorf("full worker bucket grants %v, want %v", s3, want)
			}
		} else if len(s3) != 0 {
			t.Errorf("full %s bucket grants %v, want none", name, s3)
		}
	}
	// Roles carry no managed policies (AWSLambdaBasicExecutionRole and
	// the like) and no inline policies of their own.
	for _, id := range v.ofType("AWS::IAM::Role") {
		p := v.props(t, id)
		if p["ManagedPolicyArns"] != nil || p["Policies"] != nil {
			t.Errorf("%s: ManagedPolicyArns %v, Policies %v", id, p["ManagedPolicyArns"], p["Policies"])
		}
		if doc := str(p["AssumeRolePolicyDocument"]); !strings.Contains(doc, `"Service":"lambda.amazonaws.com"`) {
			t.Errorf("%s: trust policy %s", id, doc)
		}
	}
}

// TestXRayExporterGrant: with runtimeConfig tracing.exporter xray (full)
// every function may put spans to the X-Ray OTLP endpoint
// (xray:PutSpans, xray:PutSpansForIndexing, on Resource * as X-Ray has no
// resource-level permissions); without it (dev) none may
// (TestLeastPrivilegePerFunction holds dev's exact grants).
func TestXRayExporterGrant(t *testing.T) {
	want := []string{"xray:PutSpans *", "xray:PutSpansForIndexing *"}
	for variant, grants := range map[string]bool{"full": true, "dev": false} {
		v := synth(t, variant)
		if v.settings.TracesToXRay() != grants {
			t.Fatalf("%s: TracesToXRay %v", variant, !grants)
		}
		for _, name := range FunctionNames {
			var got []string
			for _, g := range v.grantsOf(t, FunctionIDs[name]+"Role") {
				if strings.HasPrefix(g, "xray:PutSpans") {
					got = append(got, g)
				}
			}
			if grants && !reflect.DeepEqual(got, want) || !grants && len(got) != 0 {
				t.Errorf("%s %s: X-Ray span grants %v", variant, name, got)
			}
		}
	}
}

// No policy of any variant grants a wildcard action; a wildcard resource
// appears only for X-Ray, which has no resource-level permissions.
func TestNoWildcardActions(t *testing.T) {
	for _, variant := range []string{"dev", "prod", "full"} {
		v := synth(t, variant)
		n := 0
		for id, sts := range v.statements() {
			for _, st := range sts {
				n++
				for _, a := range list(st["Action"]) {
					if strings.Contains(str(a), "*") {
						t.Errorf("%s %s: wildcard action %q", variant, id, str(a))
					}
				}
				if st["NotAction"] != nil {
					t.Errorf("%s %s: NotAction %v", variant, id, st["NotAction"])
				}
				for _, r := range list(st["Resource"]) {
					if str(r) != "*" {
						continue
					}
					for _, a := range list(st["Action"]) {
						if !strings.HasPrefix(str(a), "xray:") || !v.settings.Tracing && !v.settings.TracesToXRay() {
							t.Errorf("%s %s: %s on Resource *", variant, id, str(a))
						}
					}
				}
			}
		}
		if n == 0 {
			t.Fatalf("%s: no policy statements found", variant)
		}
	}
}

func concat(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// minus returns the items of a not in b.
func minus(a, b []string) []string {
	in := map[string]bool{}
	for _, x := range b {
		in[x] = true
	}
	var out []string
	for _, x := range a {
		if !in[x] {
			out = append(out, x)
		}
	}
	return out
}
