package stack

import (
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/schema"
)

func TestResourceCounts(t *testing.T) {
	dev := synth(t, "dev")
	want := map[string]int{
		"AWS::DynamoDB::Table":            5, // the schema's four, the history
		"AWS::SQS::Queue":                 6, // work, urgent, poison, DLQ, item rejects, history failures
		"AWS::SQS::QueuePolicy":           6, // enforceSSL
		"AWS::Lambda::Function":           5,
		"AWS::IAM::Role":                  5,
		"AWS::IAM::Policy":                5,
		"AWS::IAM::ManagedPolicy":         2,
		"AWS::Logs::LogGroup":             6, // one per function, the API's access logs
		"AWS::Lambda::EventSourceMapping": 5, // four queues, the execution table's stream
		"AWS::ApiGatewayV2::Api":          1,
		"AWS::ApiGatewayV2::Stage":        1,
		"AWS::ApiGatewayV2::Integration":  1,
		"AWS::ApiGatewayV2::Route":        29, // twenty-eight IAM routes, the await completion route
		"AWS::ApiGatewayV2::Authorizer":   0,  // IAM needs none
		"AWS::Lambda::Permission":         30, // twenty-nine routes, the schedule
		"AWS::Events::EventBus":           1,
		"AWS::Events::Rule":               1,
		"AWS::CloudWatch::Alarm":          9,
		"AWS::SNS::Topic":                 0,
		"AWS::KMS::Key":                   0,
		"AWS::SecretsManager::Secret":     1, // the await resume-token secret
		"AWS::S3::Bucket":                 0, // outputBucket is off by default
		"AWS::S3::BucketPolicy":           0,
	}
	for typ, n := range want {
		dev.tpl.ResourceCountIs(jsii.String(typ), jsii.Number(float64(n)))
	}
	// dev has no await front; prod has one: the web ACL and its
	// association, the REST API, and the origin HTTP API holding the
	// await completion route, which the main HTTP API then lacks.
	for typ := range dev.typeCounts() {
		if strings.HasPrefix(typ, "AWS::WAFv2::") || strings.HasPrefix(typ, "AWS::ApiGateway::") {
			t.Errorf("dev has %s resources without an await front", typ)
		}
	}
	prod := synth(t, "prod")
	for typ, n := range map[string]int{
		"AWS::WAFv2::WebACL":                1,
		"AWS::WAFv2::WebACLAssociation":     1,
		"AWS::ApiGateway::RestApi":          1,
		"AWS::ApiGateway::Stage":            1,
		"AWS::ApiGateway::Deployment":       1,
		"AWS::ApiGateway::Method":           1,
		"AWS::ApiGateway::Account":          0, // no account-wide CloudWatch role
		"AWS::ApiGateway::RequestValidator": 1,
		"AWS::ApiGatewayV2::Api":            2, // the main API, the await origin
		"AWS::ApiGatewayV2::Stage":          2,
		"AWS::ApiGatewayV2::Integration":    2,
		"AWS::ApiGatewayV2::Route":          29, // twenty-eight IAM routes on the main API, the await completion route on the origin
		"AWS::Lambda::Permission":           30,
		"AWS::Logs::LogGroup":               8, // and the front's and the origin's access logs
		"AWS::IAM::Role":                    5, // no CloudWatch role for API Gateway
	} {
		prod.tpl.ResourceCountIs(jsii.String(typ), jsii.Number(float64(n)))
	}
	full := synth(t, "full")
	for typ, n := range map[string]int{"AWS::SNS::Topic": 1, "AWS::SNS::Subscription": 1, "AWS::KMS::Key": 1, "AWS::ApiGatewayV2::Authorizer": 1,
		"AWS::SecretsManager::Secret": 1, "AWS::S3::Bucket": 1, "AWS::S3::BucketPolicy": 1} {
		full.tpl.ResourceCountIs(jsii.String(typ), jsii.Number(float64(n)))
	}
	t.Logf("template resource count: dev %d, prod %d, full %d; synth time: first %v (includes starting the jsii runtime), dev->prod %v",
		len(dev.res), len(synth(t, "prod").res), len(full.res), dev.took.Round(time.Millisecond), variants["prod"].took.Round(time.Millisecond))
}

func TestTablesFollowSchema(t *testing.T) {
	for _, variant := range []string{"dev", "prod"} {
		v := synth(t, variant)
		names := schema.Prefixed(v.settings.Prefix)
		ids := map[string]string{names.ExecutionTable: ExecutionTableID, names.PayloadTable: PayloadTableID, names.DeadLetterTable: DeadLetterTableID, names.EffectTable: EffectTableID,
			names.HistoryTable: HistoryTableID}
		for _, table := range schema.Tables(names) {
			id := ids[table.Name]
			p := v.props(t, id)
			if p["TableName"] != table.Name {
				t.Errorf("%s: TableName %v, want %s", id, p["TableName"], table.Name)
			}
			keys := []any{map[string]any{"AttributeName": table.PartitionKey.Name, "KeyType": "HASH"}}
			attrs := map[string]string{table.PartitionKey.Name: string(table.PartitionKey.Type)}
			if table.SortKey.Name != "" {
				keys = append(keys, map[string]any{"AttributeName": table.SortKey.Name, "KeyType": "RANGE"})
				attrs[table.SortKey.Name] = string(table.SortKey.Type)
			}
			if !reflect.DeepEqual(p["KeySchema"], keys) {
				t.Errorf("%s: KeySchema %v, want %v", id, p["KeySchema"], keys)
			}
			var gsis []any
			for _, ix := range table.Indexes {
				var nonKey []any
				for _, a := range ix.NonKeyAttributes {
					nonKey = append(nonKey, a)
				}
				gsis = append(gsis, map[string]any{
					"IndexName": ix.Name,
					"KeySchema": []any{
						map[string]any{"AttributeName": ix.PartitionKey.Name, "KeyType": "HASH"},
						map[string]any{"AttributeName": ix.SortKey.Name, "KeyType": "RANGE"},
					},
					"Projection": map[string]any{"ProjectionType": "INCLUDE", "NonKeyAttributes": nonKey},
				})
				attrs[ix.PartitionKey.Name], attrs[ix.SortKey.Name] = string(ix.PartitionKey.Type), string(ix.SortKey.Type)
			}
			if !reflect.DeepEqual(p["GlobalSecondaryIndexes"], any(gsis)) && !(gsis == nil && p["GlobalSecondaryIndexes"] == nil) {
				t.Errorf("%s: GlobalSecondaryIndexes %v, want %v", id, p["GlobalSecondaryIndexes"], gsis)
			}
			gotAttrs := map[string]string{}
			for _, a := range list(p["AttributeDefinitions"]) {
				m := a.(map[string]any)
				gotAttrs[m["AttributeName"].(string)] = m["AttributeType"].(string)
			}
			if !reflect.DeepEqual(gotAttrs, attrs) {
				t.Errorf("%s: AttributeDefinitions %v, want %v", id, gotAttrs, attrs)
			}
			checks := map[string]any{
				"BillingMode":                      "PAY_PER_REQUEST",
				"TimeToLiveSpecification":          map[string]any{"AttributeName": table.TTLAttribute, "Enabled": true},
				"SSESpecification":                 map[string]any{"SSEEnabled": true}, // KMS with the AWS managed key: no SSEType, no KMSMasterKeyId
				"PointInTimeRecoverySpecification": map[string]any{"PointInTimeRecoveryEnabled": true},
				"DeletionProtectionEnabled":        variant == "prod",
			}
			// The stream feeds the history: the schema's view, or none.
			var stream any
			if table.Stream != "" {
				stream = map[string]any{"StreamViewType": string(table.Stream)}
			}
			checks["StreamSpecification"] = stream
			for k, want := range checks {
				if !reflect.DeepEqual(p[k], want) {
					t.Errorf("%s %s: %s = %v, want %v", variant, id, k, p[k], want)
				}
			}
		}
	}
	// The three indexes, spelled out once more: their keys and their one
	// projected attribute never change on the happy path, so no claim,
	// renewal, chained commit or hand-over writes them.
	synth(t, "dev").tpl.HasResourceProperties(jsii.String("AWS::DynamoDB::Table"), map[string]any{
		"TableName": "qasync-dev-executions",
		"KeySchema": []any{map[string]any{"AttributeName": "pk", "KeyType": "HASH"}},
		"GlobalSecondaryIndexes": []any{map[string]any{
			"IndexName": "sweep",
			"KeySchema": []any{
				map[string]any{"AttributeName": "ds", "KeyType": "HASH"},
				map[string]any{"AttributeName": "sw", "KeyType": "RANGE"},
			},
			"Projection": map[string]any{"ProjectionType": "INCLUDE",
				"NonKeyAttributes": []any{"p"}},
		}, map[string]any{
			"IndexName": "list",
			"KeySchema": []any{
				map[string]any{"AttributeName": "lk", "KeyType": "HASH"},
				map[string]any{"AttributeName": "c", "KeyType": "RANGE"},
			},
			"Projection": map[string]any{"ProjectionType": "INCLUDE",
				"NonKeyAttributes": []any{"p"}},
		}, map[string]any{
			// The first wait index, unchanged for stacks deployed with it
			// (CloudFormation cannot change an index's keys).
			"IndexName": "wait",
			"KeySchema": []any{
				map[string]any{"AttributeName": "wk", "KeyType": "HASH"},
				map[string]any{"AttributeName": "c", "KeyType": "RANGE"},
			},
			"Projection": map[string]any{"ProjectionType": "INCLUDE",
				"NonKeyAttributes": []any{"ic"}},
		}, map[string]any{
			"IndexName": "waitline",
			"KeySchema": []any{
				map[string]any{"AttributeName": "wk", "KeyType": "HASH"},
				map[string]any{"AttributeName": "rk", "KeyType": "RANGE"},
			},
			"Projection": map[string]any{"ProjectionType": "INCLUDE",
				"NonKeyAttributes": []any{"ic"}},
		}},
	})
}

// Stateful resources are destroyed with a dev stack and retained, with
// deletion protection, in prod (and every other stage).
func TestRetentionByStage(t *testing.T) {
	for variant, want := range map[string]string{"dev": "Delete", "prod": "Retain", "full": "Retain"} {
		v := synth(t, variant)
		for _, typ := range []string{"AWS::DynamoDB::Table", "AWS::SQS::Queue", "AWS::Logs::LogGroup"} {
			for _, id := range v.ofType(typ) {
				r := v.res[id]
				if r["DeletionPolicy"] != want || r["UpdateReplacePolicy"] != want {
					t.Errorf("%s %s: DeletionPolicy %v, UpdateReplacePolicy %v, want %s", variant, id, r["DeletionPolicy"], r["UpdateReplacePolicy"], want)
				}
			}
		}
		for _, id := range v.ofType("AWS::DynamoDB::Table") {
			if got := v.props(t, id)["DeletionProtectionEnabled"]; got != (want == "Retain") {
				t.Errorf("%s %s: DeletionProtectionEnabled %v", variant, id, got)
			}
		}
	}
}

func TestQueues(t *testing.T) {
	for _, variant := range []string{"dev", "full"} {
		v := synth(t, variant)
		names := schema.Prefixed(v.settings.Prefix)
		ids := map[string]string{names.WorkQueue: WorkQueueID, names.PoisonQueue: PoisonQueueID, names.DLQQueue: DLQQueueID,
			names.RejectQueue: RejectQueueID, names.HistoryFailureQueue: HistoryFailureQueueID, names.UrgentQueue: UrgentQueueID}
		consumer := map[string]string{WorkQueueID: WorkerFunctionID, UrgentQueueID: WorkerFunctionID, PoisonQueueID: DLQFunctionID, DLQQueueID: DLQFunctionID}
		for _, q := range schema.Queues(names) {
			id := ids[q.Name]
			p := v.props(t, id)
			if p["QueueName"] != q.Name || p["SqsManagedSseEnabled"] != true {
				t.Errorf("%s: QueueName %v, SqsManagedSseEnabled %v", id, p["QueueName"], p["SqsManagedSseEnabled"])
			}
			if got := num(t, p["MessageRetentionPeriod"]); got != schema.Retention.Seconds() || got != 14*24*3600 {
				t.Errorf("%s: MessageRetentionPeriod %v, want 14 days", id, got)
			}
			// Visibility at least six times the consumer's timeout, and
			// never below the schema's default. The item reject queue has
			// no consumer in the stack.
			timeout := 0.0
			if consumer[id] != "" {
				timeout = num(t, v.props(t, consumer[id])["Timeout"])
			}
			vis := num(t, p["VisibilityTimeout"])
			if vis < 6*timeout || vis < q.VisibilityTimeout.Seconds() {
				t.Errorf("%s %s: VisibilityTimeout %v, consumer %s timeout %v: want >= 6x and >= %v", variant, id, vis, consumer[id], timeout, q.VisibilityTimeout)
			}
			if q.RedriveTo != "" {
				want := map[string]any{
					"deadLetterTargetArn": map[string]any{"Fn::GetAtt": []any{ids[q.RedriveTo], "Arn"}},
					"maxReceiveCount":     float64(q.MaxReceiveCount),
				}
				if !reflect.DeepEqual(p["RedrivePolicy"], want) {
					t.Errorf("%s: RedrivePolicy %v, want %v", id, p["RedrivePolicy"], want)
				}
			} else if p["RedrivePolicy"] != nil {
				t.Errorf("%s: unexpected RedrivePolicy %v", id, p["RedrivePolicy"])
			}
		}
		if got := num(t, v.props(t, WorkQueueID)["RedrivePolicy"].(map[string]any)["maxReceiveCount"]); got != schema.PoisonAfter {
			t.Errorf("work queue maxReceiveCount %v, want schema.PoisonAfter %d", got, schema.PoisonAfter)
		}
		if want := VisibilityFor(v.settings.WorkerTimeout).Seconds(); num(t, v.props(t, WorkQueueID)["VisibilityTimeout"]) != want {
			t.Errorf("%s: work queue visibility %v, want %v", variant, v.props(t, WorkQueueID)["VisibilityTimeout"], want)
		}
		// The urgent queue is the work queue's twin: visibility, redrive
		// to the poison queue after as many receives, encryption.
		for _, k := range []string{"VisibilityTimeout", "RedrivePolicy", "MessageRetentionPeriod", "SqsManagedSseEnabled"} {
			if u, w := v.props(t, UrgentQueueID)[k], v.props(t, WorkQueueID)[k]; !reflect.DeepEqual(u, w) {
				t.Errorf("%s: urgent queue %s %v, work queue's %v", variant, k, u, w)
			}
		}
		// enforceSSL: each queue's policy denies requests without TLS.
		for _, id := range v.ofType("AWS::SQS::QueuePolicy") {
			p := v.props(t, id)
			st := list(p["PolicyDocument"].(map[string]any)["Statement"])[0].(map[string]any)
			if st["Effect"] != "Deny" || str(st["Condition"]) != `{"Bool":{"aws:SecureTransport":"false"}}` {
				t.Errorf("%s: first statement %v is not the TLS deny", id, st)
			}
		}
	}
}

func TestFunctions(t *testing.T) {
	v := synth(t, "dev")
	for _, name := range FunctionNames {
		id := FunctionIDs[name]
		p := v.props(t, id)
		for k, want := range map[string]any{
			"Runtime": "provided.al2023", "Handler": "bootstrap", "Architectures": []any{"arm64"},
			"FunctionName": "qasync-dev-" + name, "MemorySize": float64(256),
			"Role":          map[string]any{"Fn::GetAtt": []any{id + "Role", "Arn"}},
			"LoggingConfig": map[string]any{"LogFormat": "JSON", "LogGroup": map[string]any{"Ref": id + "Logs"}, "ApplicationLogLevel": "INFO", "SystemLogLevel": "WARN"},
		} {
			if !reflect.DeepEqual(p[k], want) {
				t.Errorf("%s: %s = %v, want %v", id, k, p[k], want)
			}
		}
		if p["ReservedConcurrentExecutions"] != nil {
			t.Errorf("%s: reserved concurrency %v without a setting", id, p["ReservedConcurrentExecutions"])
		}
		if got := num(t, v.props(t, id+"Logs")["RetentionInDays"]); got != 30 {
			t.Errorf("%sLogs: RetentionInDays %v, want 30", id, got)
		}
		if v.props(t, id+"Logs")["LogGroupName"] != "/aws/lambda/qasync-dev-"+name {
			t.Errorf("%sLogs: LogGroupName %v", id, v.props(t, id+"Logs")["LogGroupName"])
		}
		if code := p["Code"].(map[string]any); code["S3Key"] == nil {
			t.Errorf("%s: code is not an asset: %v", id, code)
		}
	}
	timeout := func(id string) time.Duration {
		return time.Duration(num(t, v.props(t, id)["Timeout"])) * time.Second
	}
	if w := timeout(WorkerFunctionID); w != 60*time.Second || v.settings.Lease >= w {
		t.Errorf("worker timeout %v, lease %v: want 60s and a shorter lease", w, v.settings.Lease)
	}
	if s := timeout(SubmitFunctionID); s > 29*time.Second {
		t.Errorf("submit timeout %v exceeds API Gateway's integration timeout", s)
	}
	full := synth(t, "full")
	if got := num(t, full.props(t, WorkerFunctionID)["ReservedConcurrentExecutions"]); got != 60 {
		t.Errorf("full: worker reserved concurrency %v, want 60", got)
	}
	if got := num(t, full.props(t, SweeperFunctionID)["ReservedConcurrentExecutions"]); got != 1 {
		t.Errorf("full: sweeper reserved concurrency %v, want 1", got)
	}
	for _, name := range FunctionNames {
		if got := full.props(t, FunctionIDs[name])["TracingConfig"]; !reflect.DeepEqual(got, map[string]any{"Mode": "Active"}) {
			t.Errorf("full %s: TracingConfig %v", name, got)
		}
		if got := v.props(t, FunctionIDs[name])["TracingConfig"]; got != nil && !reflect.DeepEqual(got, map[string]any{"Mode": "PassThrough"}) {
			t.Errorf("dev %s: TracingConfig %v, want none", name, got)
		}
	}
}

// Every configuration key reaches every function, built from the deployed
// resources, and the result passes config.Load; of the test-only keys,
// only diag.enabled, which the stack derives from the stage.
func TestFunctionEnvironment(t *testing.T) {
	v := synth(t, "dev")
	env := func(key string) string { return config.EnvName(config.FullKey(key)) }
	for _, name := range FunctionNames {
		id := FunctionIDs[name]
		got := v.env(t, id)
		for _, k := range config.Keys() {
			_, present := got[k.Env]
			excluded := false
			for _, e := range ExcludedEnv {
				excluded = excluded || e == k.Env
			}
			if present == excluded {
				t.Errorf("%s: %s present=%v, excluded=%v", id, k.Env, present, excluded)
			}
		}
		// Besides the keys of shared/config, the one test-only key the
		// stack derives: diag.enabled (the processes read it from their
		// environment alone).
		if _, ok := got[env("diag.enabled")]; !ok || len(got) != len(config.Keys())-len(ExcludedEnv)+1 {
			t.Errorf("%s: %d variables (diag.enabled set: %v), want %d (no strays)", id, len(got), ok, len(config.Keys())-len(ExcludedEnv)+1)
		}
		bus := "" // only the history function publishes lifecycle events (from the stream)
		if name == History {
			bus = "<" + EventBusID + ">"
		}
		for key, want := range map[string]string{
			"state-provider": "dynamo", "dispatcher-provider": "sqs", "dlq-provider": "sqs",
			"idempotency-policy": "CLIENT_KEY_REQUIRED", "strict-startup": "true", "lease-ms": "30000",
			"queue-url": "<WorkQueue>", "dlq-url": "<DlqQueue>",
			"dynamo.execution-table":         "<ExecutionTable>",
			"dynamo.execution-payload-table": "<PayloadTable>", "dynamo.dead-letter-table": "<DeadLetterTable>",
			"dynamo.effect-table": "<EffectTable>", "dynamo.history-table": "<HistoryTable>",
			"events.bus-name": bus, "metrics.namespace": "qasync/dev", "http.tenant-source": "iam",
			"http.tenant-claim": "tenant_id", "sqs.visibility-timeout": "6m0s", "log-level": "info",
			"sweep-interval": "1m0s", "dynamo.capacity-steps-per-second": "1000", "mode": "QUEUE_ASYNC",
			"item-reject.provider": "sqs", "item-reject.queue-url": "<ItemRejectQueue>",
			"events.types": "SUCCEEDED,DEAD_LETTERED,REJECTED,OUTCOME_UNKNOWN,CANCELLED", "events.sink": "eventbridge",
		} {
			if got[env(key)] != want {
				t.Errorf("%s: %s = %q, want %q", id, env(key), got[env(key)], want)
			}
		}
		// Lambda caps a function's environment at 4 KB. Estimate the
		// deployed size with the longest value each resolved reference
		// can have (deployedLen).
		size := 0
		for k, val := range got {
			n := len(val)
			if strings.HasPrefix(val, "<") {
				n = v.deployedLen(t, val)
			}
			size += len(k) + n
		}
		if size > 3500 {
			t.Errorf("%s: environment about %d bytes, too close to Lambda's 4 KB", id, size)
		}
		t.Logf("%s: %d variables, at most about %d bytes deployed", id, len(got), size)
	}
	// The resume-token secret: its ARN for submit and worker, nothing for
	// the others, its value for none (ExcludedEnv, checked above).
	for _, name := range FunctionNames {
		want := ""
		if name == Submit || name == Worker {
			want = "<" + ResumeSecretID + ">"
		}
		got := v.env(t, FunctionIDs[name])
		if got[env("await.resume-token-secret-arn")] != want {
			t.Errorf("%s: %s = %q, want %q", name, env("await.resume-token-secret-arn"), got[env("await.resume-token-secret-arn")], want)
		}
		if _, ok := got[env("await.resume-token-secret")]; ok {
			t.Errorf("%s: the resume-token secret's value key is in the environment", name)
		}
		if got[env("output.bucket")] != "" {
			t.Errorf("dev %s: output.bucket = %q without an output bucket", name, got[env("output.bucket")])
		}
		if fb := synth(t, "full").env(t, FunctionIDs[name])[env("output.bucket")]; fb != "<"+OutputBucketID+">" {
			t.Errorf("full %s: output.bucket = %q, want the bucket's name", name, fb)
		}
	}
	// diag.drill is served in dev only; no stage takes the tenant from a
	// header.
	for variant, diag := range map[string]string{"dev": "true", "prod": "false", "full": "false"} {
		for _, name := range FunctionNames {
			got := synth(t, variant).env(t, FunctionIDs[name])
			if got[env("diag.enabled")] != diag || got[env("http.allow-header-tenant")] != "false" {
				t.Errorf("%s %s: diag.enabled %q (want %q), http.allow-header-tenant %q (want false)",
					variant, name, got[env("diag.enabled")], diag, got[env("http.allow-header-tenant")])
			}
			if ts := got[env("http.tenant-source")]; ts == "header" || ts == "none" || ts == "" {
				t.Errorf("%s %s: http.tenant-source %q", variant, name, ts)
			}
		}
	}
	full := synth(t, "full").env(t, WorkerFunctionID)
	for key, want := range map[string]string{"http.tenant-source": "jwt", "max-retries": "5", "retry-delay": "2s",
		"lease-ms": "45000", "sqs.visibility-timeout": "12m0s", "sweep-interval": "5m0s", "metrics.namespace": "qasync/staging"} {
		if full[env(key)] != want {
			t.Errorf("full worker: %s = %q, want %q", env(key), full[env(key)], want)
		}
	}
}

// deployedLen is the longest value a reference <id> of the template can
// resolve to when deployed: physical names grown to the longest prefix
// Validate allows (40 characters), in the longest partition, region and
// domain; 120 for a reference of another kind.
func (v *synthesized) deployedLen(t *testing.T, ref string) int {
	t.Helper()
	const region, account, partition, domain = 16, 12, len("aws-us-gov"), len("amazonaws.com.cn")
	id := strings.Trim(ref, "<>")
	grow := 40 - len(v.settings.Prefix)
	name := func(key string) int { return len(str(v.props(t, id)[key])) + grow }
	switch v.res[id]["Type"] {
	case "AWS::DynamoDB::Table":
		return name("TableName")
	case "AWS::SQS::Queue": // https://sqs.<region>.<domain>/<account>/<name>
		return len("https://sqs.../") + region + domain + account + 1 + name("QueueName")
	case "AWS::Events::EventBus":
		return name("Name")
	case "AWS::SecretsManager::Secret": // arn:<partition>:secretsmanager:<region>:<account>:secret:<generated name>-<6>
		return len("arn::secretsmanager:::secret:") + partition + region + account + 64 + 7
	case "AWS::S3::Bucket":
		return 63
	}
	return 120
}

func TestEventSources(t *testing.T) {
	v := synth(t, "dev")
	want := map[string][2]string{ // mapping -> function, queue
		"WorkerWorkQueueSource": {WorkerFunctionID, WorkQueueID},
		UrgentSourceID:          {WorkerFunctionID, UrgentQueueID},
		"DlqDlqQueueSource":     {DLQFunctionID, DLQQueueID},
		"DlqPoisonQueueSource":  {DLQFunctionID, PoisonQueueID},
	}
	if got := v.ofType("AWS::Lambda::EventSourceMapping"); len(got) != len(want)+1 {
		t.Fatalf("event source mappings %v, want the four queues' and the history's", got)
	}
	for id, fq := range want {
		p := v.props(t, id)
		if str(p["FunctionName"]) != "<"+fq[0]+">" || str(p["EventSourceArn"]) != "<"+fq[1]+".Arn>" {
			t.Errorf("%s: %v <- %v, want %v", id, str(p["FunctionName"]), str(p["EventSourceArn"]), fq)
		}
		if !reflect.DeepEqual(p["FunctionResponseTypes"], []any{"ReportBatchItemFailures"}) {
			t.Errorf("%s: FunctionResponseTypes %v", id, p["FunctionResponseTypes"])
		}
		if num(t, p["BatchSize"]) != 10 || p["ScalingConfig"] != nil || p["MaximumBatchingWindowInSeconds"] != nil {
			t.Errorf("%s: BatchSize %v, ScalingConfig %v, window %v", id, p["BatchSize"], p["ScalingConfig"], p["MaximumBatchingWindowInSeconds"])
		}
		// The mapping waits for its role's policy (Lambda checks the
		// permissions when it creates the mapping).
		deps := list(v.res[id]["DependsOn"])
		has := false
		for _, d := range deps {
			has = has || d == fq[0]+"Policy"
		}
		if !has {
			t.Errorf("%s: DependsOn %v lacks %sPolicy", id, deps, fq[0])
		}
	}
	full := synth(t, "full")
	full.tpl.HasResourceProperties(jsii.String("AWS::Lambda::EventSourceMapping"), map[string]any{
		"FunctionName":                   map[string]any{"Ref": WorkerFunctionID},
		"BatchSize":                      5,
		"MaximumBatchingWindowInSeconds": 2,
		"ScalingConfig":                  map[string]any{"MaximumConcurrency": 50},
		"FunctionResponseTypes":          []any{"ReportBatchItemFailures"},
	})
	full.tpl.ResourcePropertiesCountIs(jsii.String("AWS::Lambda::EventSourceMapping"), map[string]any{
		"FunctionName":  map[string]any{"Ref": DLQFunctionID},
		"ScalingConfig": map[string]any{"MaximumConcurrency": 2},
	}, jsii.Number(2))
	// The urgent queue's mapping: the worker's batch settings, its own cap.
	if p := full.props(t, UrgentSourceID); num(t, p["BatchSize"]) != 5 || num(t, p["MaximumBatchingWindowInSeconds"]) != 2 ||
		str(p["ScalingConfig"]) != `{"MaximumConcurrency":7}` || str(p["EventSourceArn"]) != "<"+UrgentQueueID+".Arn>" {
		t.Errorf("full: urgent mapping %v, want batch 5, window 2, its own maximum concurrency 7", p)
	}
}

// Without the urgent lane (context urgentLane false) there is no urgent
// queue, no mapping on it, no grant on it and no queue.urgent-url in any
// function's environment: every execution goes to the work queue.
func TestUrgentLaneOff(t *testing.T) {
	v := synth(t, "no-urgent")
	if _, ok := v.res[UrgentQueueID]; ok {
		t.Errorf("urgent queue created with urgentLane false")
	}
	if _, ok := v.res[UrgentSourceID]; ok {
		t.Errorf("urgent mapping created with urgentLane false")
	}
	if got := len(v.ofType("AWS::SQS::Queue")); got != 5 {
		t.Errorf("%d queues, want 5", got)
	}
	env := config.EnvName(config.FullKey("queue.urgent-url"))
	for _, id := range v.ofType("AWS::Lambda::Function") {
		vars, _ := v.props(t, id)["Environment"].(map[string]any)["Variables"].(map[string]any)
		if s, ok := vars[env]; ok && s != "" {
			t.Errorf("%s: %s = %v, want none", id, env, s)
		}
	}
	if strings.Contains(str(v.doc["Resources"]), UrgentQueueID) {
		t.Errorf("the template names %s", UrgentQueueID)
	}
}

// The history function reads the execution table's stream from its oldest
// record, in batches gathered for the batching window, reporting the
// record to retry from; a failing batch is halved and retried, then its
// failure record goes to the history failure queue.
func TestHistoryEventSource(t *testing.T) {
	v := synth(t, "dev")
	p := v.props(t, HistorySourceID)
	for k, want := range map[string]any{
		"FunctionName":                   map[string]any{"Ref": HistoryFunctionID},
		"EventSourceArn":                 map[string]any{"Fn::GetAtt": []any{ExecutionTableID, "StreamArn"}},
		"StartingPosition":               "TRIM_HORIZON",
		"BatchSize":                      float64(1000),
		"MaximumBatchingWindowInSeconds": float64(2),
		"BisectBatchOnFunctionError":     true,
		"MaximumRetryAttempts":           float64(historyRetries),
		"ParallelizationFactor":          float64(1),
		"FunctionResponseTypes":          []any{"ReportBatchItemFailures"},
		"DestinationConfig":              map[string]any{"OnFailure": map[string]any{"Destination": map[string]any{"Fn::GetAtt": []any{HistoryFailureQueueID, "Arn"}}}},
	} {
		if !reflect.DeepEqual(p[k], want) {
			t.Errorf("%s: %s = %v, want %v", HistorySourceID, k, p[k], want)
		}
	}
	has := false
	for _, d := range list(v.res[HistorySourceID]["DependsOn"]) {
		has = has || d == HistoryFunctionID+"Policy"
	}
	if !has {
		t.Errorf("%s: DependsOn %v lacks %sPolicy", HistorySourceID, v.res[HistorySourceID]["DependsOn"], HistoryFunctionID)
	}
	if q := v.props(t, HistoryFailureQueueID); q["QueueName"] != "qasync-dev-history-failures" || q["SqsManagedSseEnabled"] != true {
		t.Errorf("%s: %v", HistoryFailureQueueID, q)
	}
	if got := num(t, v.props(t, HistoryFunctionID)["Timeout"]); got != 60 {
		t.Errorf("history timeout %v, want 60", got)
	}
	// Context settings reach the mapping.
	s, err := settingsFrom(lookup(map[string]any{"historyBatchSize": 50, "historyBatchingWindowSeconds": "0", "historyTimeoutSeconds": 30}), "")
	if err != nil {
		t.Fatal(err)
	}
	if s.HistoryBatchSize != 50 || s.HistoryBatchingWindow != 0 || s.HistoryTimeout != 30*time.Second {
		t.Errorf("settings from context: %+v", s)
	}
	for ctx, bad := range map[string]any{"historyBatchSize": 0, "historyBatchingWindowSeconds": 301, "historyTimeoutSeconds": 0} {
		if _, err := settingsFrom(lookup(map[string]any{ctx: bad}), ""); err == nil || !strings.Contains(err.Error(), ctx) {
			t.Errorf("context %s=%v: err = %v, want one naming it", ctx, bad, err)
		}
	}
}

// Every route of the template but the await completion route requires
// IAM, and every route targets the submit function's one integration.
func TestHTTPAPIRoutesUseIAM(t *testing.T) {
	v := synth(t, "dev")
	var keys []string
	for _, r := range Routes {
		p := v.props(t, r.ID)
		if p["RouteKey"] != r.Key() {
			t.Errorf("%s: RouteKey %v, want %q", r.ID, p["RouteKey"], r.Key())
		}
		if r.ResumeToken != (r.ID == AwaitCompleteRouteID) {
			t.Errorf("%s: ResumeToken %v: only the await completion route may go without IAM", r.ID, r.ResumeToken)
		}
	}
	integrations := v.ofType("AWS::ApiGatewayV2::Integration")
	if len(integrations) != 1 {
		t.Fatalf("integrations %v, want exactly the submit function's", integrations)
	}
	for _, id := range v.ofType("AWS::ApiGatewayV2::Route") {
		p := v.props(t, id)
		keys = append(keys, str(p["RouteKey"]))
		want := "AWS_IAM"
		if id == AwaitCompleteRouteID {
			want = "NONE"
		}
		if p["AuthorizationType"] != want {
			t.Errorf("%s (%v): AuthorizationType %v, want %s", id, p["RouteKey"], p["AuthorizationType"], want)
		}
		if got, want := str(p["Target"]), "integrations/<"+integrations[0]+">"; got != want {
			t.Errorf("%s: Target %v, want %s", id, got, want)
		}
	}
	sort.Strings(keys)
	wantKeys := []string{"GET /healthz", "GET /openapi.json", "GET /v1/dead-letters", "GET /v1/dead-letters/counts", "GET /v1/executions",
		"GET /v1/executions/{executionId}", "GET /v1/executions/{executionId}/history", "GET /v1/executions/{executionId}/result",
		"GET /v1/inputs/{executionId}", "GET /v1/pauses/{jobId}", "GET /v1/pipelines", "GET /v1/pipelines/{pipelineId}", "GET /v1/redrives/{redriveId}",
		"GET /v1/resumes/{jobId}",
		"POST /v1/executions/{executionId}/awaits/{awaitId}/complete", "POST /v1/executions/{executionId}/cancel",
		"POST /v1/executions/{executionId}/pause", "POST /v1/executions/{executionId}/redrive", "POST /v1/executions/{executionId}/resume",
		"POST /v1/pauses", "POST /v1/pipelines/{pipelineId}/executions", "POST /v1/redrives", "POST /v1/resumes",
		"GET /v1/schedules", "GET /v1/schedules/{scheduleId}", "DELETE /v1/schedules/{scheduleId}", "POST /v1/schedules",
		"POST /v1/schedules/{scheduleId}/pause", "POST /v1/schedules/{scheduleId}/resume"}
	sort.Strings(wantKeys)
	if !reflect.DeepEqual(keys, wantKeys) {
		t.Errorf("route keys %v, want %v", keys, wantKeys)
	}
	if got := v.ofType("AWS::ApiGatewayV2::Route"); len(got) != len(Routes) {
		t.Errorf("routes %v: want exactly %d", got, len(Routes))
	}
	integ := v.props(t, integrations[0])
	if integ["PayloadFormatVersion"] != "2.0" || integ["IntegrationType"] != "AWS_PROXY" || !strings.Contains(str(integ["IntegrationUri"]), "<"+SubmitFunctionID+".Arn>") {
		t.Errorf("integration %v", integ)
	}
	stage := v.props(t, "HttpApiDefaultStage")
	als, _ := stage["AccessLogSettings"].(map[string]any)
	if stage["StageName"] != "$default" || stage["AutoDeploy"] != true || str(als["DestinationArn"]) != "<HttpApiAccessLogs.Arn>" ||
		!strings.Contains(str(als["Format"]), "$context.requestId") {
		t.Errorf("stage %v", stage)
	}
	if rs, _ := stage["DefaultRouteSettings"].(map[string]any); num(t, rs["ThrottlingRateLimit"]) != 100 || num(t, rs["ThrottlingBurstLimit"]) != 200 {
		t.Errorf("stage throttling %v", rs)
	}

	// The operator routes have their own permission: the client policy
	// names every client route and no operator route, the operator policy
	// re-drive, cancel and bulk re-drive only; neither names the await
	// completion route, which needs no permission. Both name the $default
	// stage only, never a tenant's stage (TestTenantStages).
	arn := func(method, path string) string {
		return "arn:<AWS::Partition>:execute-api:<AWS::Region>:<AWS::AccountId>:<HttpApi>/$default/" + method + path
	}
	for id, want := range map[string][]string{
		ClientPolicyID: {arn("POST", "/v1/pipelines/*/executions"), arn("GET", "/v1/executions/*"),
			arn("GET", "/v1/executions/*/result"), arn("GET", "/healthz"), arn("GET", "/v1/executions"),
			arn("GET", "/v1/executions/*/history"), arn("GET", "/v1/dead-letters"), arn("GET", "/openapi.json"),
			arn("GET", "/v1/dead-letters/counts"), arn("GET", "/v1/pipelines"), arn("GET", "/v1/pipelines/*")},
		OperatorPolicyID: {arn("POST", "/v1/executions/*/redrive"), arn("POST", "/v1/executions/*/cancel"),
			arn("POST", "/v1/redrives"), arn("GET", "/v1/redrives/*"), arn("GET", "/v1/inputs/*"),
			arn("POST", "/v1/executions/*/pause"), arn("POST", "/v1/executions/*/resume"), arn("POST", "/v1/pauses"),
			arn("GET", "/v1/pauses/*"), arn("POST", "/v1/resumes"), arn("GET", "/v1/resumes/*"),
			arn("POST", "/v1/schedules"), arn("GET", "/v1/schedules"), arn("GET", "/v1/schedules/*"), arn("DELETE", "/v1/schedules/*"),
			arn("POST", "/v1/schedules/*/pause"), arn("POST", "/v1/schedules/*/resume")},
	} {
		sts := v.statements()[id]
		if len(sts) != 1 || str(sts[0]["Action"]) != "execute-api:Invoke" {
			t.Fatalf("%s: statements %v", id, sts)
		}
		var got []string
		for _, r := range list(sts[0]["Resource"]) {
			got = append(got, str(r))
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: resources %v, want %v", id, got, want)
		}
		for _, r := range got {
			if id == ClientPolicyID && (strings.Contains(r, "redrive") || strings.Contains(r, "cancel") || strings.Contains(r, "input")) {
				t.Errorf("client policy can re-drive, cancel or read inputs: %s", r)
			}
			if strings.Contains(r, "awaits") {
				t.Errorf("%s names the await completion route: %s", id, r)
			}
		}
	}
}

// The await completion route: no authorizer (the resume token is its
// authorization, checked by the submit function), the submit function's
// integration, and a throttle of its own below the stage's, in every
// variant (JWT included): on the main HTTP API without the await front
// (dev), on the front's origin API with it (full, prod).
func TestAwaitCompletionRoute(t *testing.T) {
	for variant, api := range map[string]string{"dev": HTTPAPIID, "full": AwaitOriginAPIID, "prod": AwaitOriginAPIID} {
		v := synth(t, variant)
		p := v.props(t, AwaitCompleteRouteID)
		if p["RouteKey"] != "POST /v1/executions/{executionId}/awaits/{awaitId}/complete" || str(p["ApiId"]) != "<"+api+">" {
			t.Errorf("%s: RouteKey %v on %v, want %s", variant, p["RouteKey"], p["ApiId"], api)
		}
		if p["AuthorizationType"] != "NONE" || p["AuthorizerId"] != nil || p["AuthorizationScopes"] != nil {
			t.Errorf("%s: AuthorizationType %v, AuthorizerId %v, scopes %v: want NONE without an authorizer",
				variant, p["AuthorizationType"], p["AuthorizerId"], p["AuthorizationScopes"])
		}
		var integ []string
		for _, id := range v.ofType("AWS::ApiGatewayV2::Integration") {
			if str(v.props(t, id)["ApiId"]) == "<"+api+">" {
				integ = append(integ, id)
			}
		}
		if len(integ) != 1 || str(p["Target"]) != "integrations/<"+integ[0]+">" ||
			!strings.Contains(str(v.props(t, integ[0])["IntegrationUri"]), "<"+SubmitFunctionID+".Arn>") ||
			v.props(t, integ[0])["PayloadFormatVersion"] != "2.0" {
			t.Errorf("%s: Target %v does not name the submit function's integration %v", variant, p["Target"], integ)
		}
		// API Gateway may invoke the submit function for this route.
		perm := false
		for _, id := range v.ofType("AWS::Lambda::Permission") {
			pp := v.props(t, id)
			perm = perm || (str(pp["FunctionName"]) == "<"+SubmitFunctionID+".Arn>" &&
				strings.Contains(str(pp["SourceArn"]), "<"+api+">/*/*"+awaitPath))
		}
		if !perm {
			t.Errorf("%s: no Lambda permission for the await completion route", variant)
		}
		stageID := "HttpApiDefaultStage"
		if api == AwaitOriginAPIID {
			stageID = AwaitOriginStageID
		}
		stage := v.props(t, stageID)
		rs, _ := stage["RouteSettings"].(map[string]any)
		got, _ := rs[p["RouteKey"].(string)].(map[string]any)
		if len(rs) != 1 || num(t, got["ThrottlingRateLimit"]) != 10 || num(t, got["ThrottlingBurstLimit"]) != 20 {
			t.Errorf("%s: RouteSettings %v, want only the await route at 10/s, burst 20", variant, rs)
		}
		def, _ := stage["DefaultRouteSettings"].(map[string]any)
		if api == HTTPAPIID && num(t, got["ThrottlingRateLimit"]) >= num(t, def["ThrottlingRateLimit"]) {
			t.Errorf("%s: await route rate %v is not below the stage's %v", variant, got["ThrottlingRateLimit"], def["ThrottlingRateLimit"])
		}
		// The route settings name the route by key: the stage must wait for it.
		deps := false
		for _, d := range list(v.res[stageID]["DependsOn"]) {
			deps = deps || d == AwaitCompleteRouteID
		}
		if !deps {
			t.Errorf("%s: stage DependsOn %v lacks %s", variant, v.res[stageID]["DependsOn"], AwaitCompleteRouteID)
		}
	}
}

func TestJWTAuthorizer(t *testing.T) {
	v := synth(t, "full")
	v.tpl.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Authorizer"), map[string]any{
		"AuthorizerType": "JWT",
		"JwtConfiguration": map[string]any{
			"Issuer": "https://issuer.example.com/", "Audience": []any{"qasync-api", "qasync-cli"},
		},
		"IdentitySource": []any{"$request.header.Authorization"},
	})
	for _, r := range Routes {
		p := v.props(t, r.ID)
		wantType := "JWT"
		switch r.ID {
		case HealthRouteID:
			wantType = "AWS_IAM"
		case AwaitCompleteRouteID:
			wantType = "NONE" // the resume token, under JWT too
		}
		if p["AuthorizationType"] != wantType {
			t.Errorf("%s: AuthorizationType %v, want %s", r.ID, p["AuthorizationType"], wantType)
		}
		var scopes any
		switch r.ID {
		case RedriveRouteID, CancelRouteID, BulkRedriveRouteID, RedriveJobRouteID, InputRouteID,
			PauseRouteID, ResumeRouteID, BulkPauseRouteID, PauseJobRouteID, BulkResumeRouteID, ResumeJobRouteID,
			SchedulesCreateRouteID, SchedulesListRouteID, ScheduleGetRouteID, ScheduleDeleteRouteID, SchedulePauseRouteID, ScheduleResumeRouteID:
			scopes = []any{"qasync/redrive"} // the operator routes
		}
		if !reflect.DeepEqual(p["AuthorizationScopes"], scopes) {
			t.Errorf("%s: AuthorizationScopes %v, want %v", r.ID, p["AuthorizationScopes"], scopes)
		}
	}
}

func TestScheduleAndBus(t *testing.T) {
	v := synth(t, "dev")
	rule := v.props(t, SweeperScheduleID)
	if rule["ScheduleExpression"] != "rate(1 minute)" || rule["State"] != "ENABLED" {
		t.Errorf("schedule %v", rule)
	}
	targets := list(rule["Targets"])
	if len(targets) != 1 || str(targets[0].(map[string]any)["Arn"]) != "<"+SweeperFunctionID+".Arn>" {
		t.Errorf("schedule targets %v", targets)
	}
	v.tpl.HasResourceProperties(jsii.String("AWS::Lambda::Permission"), map[string]any{
		"FunctionName": map[string]any{"Fn::GetAtt": []any{SweeperFunctionID, "Arn"}},
		"Principal":    "events.amazonaws.com",
		"SourceArn":    map[string]any{"Fn::GetAtt": []any{SweeperScheduleID, "Arn"}},
	})
	if got := synth(t, "full").props(t, SweeperScheduleID)["ScheduleExpression"]; got != "rate(5 minutes)" {
		t.Errorf("full: schedule %v", got)
	}
	if got := v.props(t, EventBusID)["Name"]; got != "qasync-dev-lifecycle" {
		t.Errorf("bus name %v", got)
	}
}

func TestAlarms(t *testing.T) {
	v := synth(t, "dev")
	type want struct {
		metric, namespace, stat string
		dims                    string
		threshold               float64
	}
	for id, w := range map[string]want{
		DLQVisibleAlarmID:      {"ApproximateNumberOfMessagesVisible", "AWS/SQS", "Maximum", `[{"Name":"QueueName","Value":{"Fn::GetAtt":["DlqQueue","QueueName"]}}]`, 0},
		PoisonVisibleAlarmID:   {"ApproximateNumberOfMessagesVisible", "AWS/SQS", "Maximum", `[{"Name":"QueueName","Value":{"Fn::GetAtt":["PoisonQueue","QueueName"]}}]`, 0},
		OldestWorkAlarmID:      {"ApproximateAgeOfOldestMessage", "AWS/SQS", "Maximum", `[{"Name":"QueueName","Value":{"Fn::GetAtt":["WorkQueue","QueueName"]}}]`, 300},
		OldestUrgentAlarmID:    {"ApproximateAgeOfOldestMessage", "AWS/SQS", "Maximum", `[{"Name":"QueueName","Value":{"Fn::GetAtt":["UrgentQueue","QueueName"]}}]`, 300},
		WorkerErrorsAlarmID:    {"Errors", "AWS/Lambda", "Sum", `[{"Name":"FunctionName","Value":{"Ref":"WorkerFunction"}}]`, 0},
		WorkerThrottlesAlarmID: {"Throttles", "AWS/Lambda", "Sum", `[{"Name":"FunctionName","Value":{"Ref":"WorkerFunction"}}]`, 0},
		HistoryFailuresAlarmID: {"ApproximateNumberOfMessagesVisible", "AWS/SQS", "Maximum", `[{"Name":"QueueName","Value":{"Fn::GetAtt":["HistoryFailureQueue","QueueName"]}}]`, 0},
		HistoryBehindAlarmID:   {"IteratorAge", "AWS/Lambda", "Maximum", `[{"Name":"FunctionName","Value":{"Ref":"HistoryFunction"}}]`, 300000},
	} {
		p := v.props(t, id)
		if p["MetricName"] != w.metric || p["Namespace"] != w.namespace || p["Statistic"] != w.stat ||
			str(p["Dimensions"]) != w.dims || num(t, p["Threshold"]) != w.threshold ||
			p["ComparisonOperator"] != "GreaterThanThreshold" || p["TreatMissingData"] != "notBreaching" {
			t.Errorf("%s: %v", id, p)
		}
		if p["AlarmActions"] != nil {
			t.Errorf("%s: actions %v without alarmEmail", id, p["AlarmActions"])
		}
	}
	dl := v.props(t, DeadLetterRecordsAlarmID)
	if !strings.Contains(str(dl["Metrics"]), `"Namespace":"qasync/dev"`) || !strings.Contains(str(dl["Metrics"]), `"MetricName":"`+metricDeadLetterRecords+`"`) {
		t.Errorf("dead-letter records alarm %v", dl["Metrics"])
	}
	full := synth(t, "full")
	full.tpl.HasResourceProperties(jsii.String("AWS::SNS::Topic"), map[string]any{
		"KmsMasterKeyId": map[string]any{"Fn::GetAtt": []any{"AlarmTopicKey" + logicalSuffix(t, full, "AWS::KMS::Key"), "Arn"}},
	})
	full.tpl.HasResourceProperties(jsii.String("AWS::SNS::Subscription"), map[string]any{"Protocol": "email", "Endpoint": "ops@example.com"})
	full.tpl.HasResourceProperties(jsii.String("AWS::KMS::Key"), map[string]any{"EnableKeyRotation": true})
	for _, id := range full.ofType("AWS::CloudWatch::Alarm") {
		if got := str(full.props(t, id)["AlarmActions"]); got != `[{"Ref":"AlarmTopic"}]` {
			t.Errorf("full %s: AlarmActions %s", id, got)
		}
	}
	if got := num(t, full.props(t, OldestWorkAlarmID)["Threshold"]); got != full.settings.OldestMessageAlarm.Seconds() {
		t.Errorf("full: oldest message threshold %v", got)
	}
}

// logicalSuffix returns the hash suffix CDK gave the only resource of typ.
func logicalSuffix(t *testing.T, v *synthesized, typ string) string {
	ids := v.ofType(typ)
	if len(ids) != 1 {
		t.Fatalf("%s: %v", typ, ids)
	}
	return strings.TrimPrefix(ids[0], "AlarmTopicKey")
}

// The await resume-token secret: generated, 64 letters and digits,
// retained outside dev.
func TestResumeTokenSecret(t *testing.T) {
	for variant, policy := range map[string]string{"dev": "Delete", "prod": "Retain"} {
		v := synth(t, variant)
		v.tpl.HasResource(jsii.String("AWS::SecretsManager::Secret"), &map[string]any{"DeletionPolicy": policy})
		p := v.props(t, ResumeSecretID)
		gen, _ := p["GenerateSecretString"].(map[string]any)
		if num(t, gen["PasswordLength"]) != 64 || gen["ExcludePunctuation"] != true || p["SecretString"] != nil {
			t.Errorf("%s: secret %v", variant, p)
		}
	}
}

// The output bucket (outputBucket=true in full): SSE-S3, all public
// access blocked, TLS only, versioned, retained outside dev.
func TestOutputBucket(t *testing.T) {
	v := synth(t, "full")
	v.tpl.HasResource(jsii.String("AWS::S3::Bucket"), &map[string]any{"DeletionPolicy": "Retain", "UpdateReplacePolicy": "Retain"})
	v.tpl.HasResourceProperties(jsii.String("AWS::S3::Bucket"), &map[string]any{
		"BucketEncryption": map[string]any{"ServerSideEncryptionConfiguration": []any{
			map[string]any{"ServerSideEncryptionByDefault": map[string]any{"SSEAlgorithm": "AES256"}}}},
		"PublicAccessBlockConfiguration": map[string]any{"BlockPublicAcls": true, "BlockPublicPolicy": true,
			"IgnorePublicAcls": true, "RestrictPublicBuckets": true},
		"VersioningConfiguration": map[string]any{"Status": "Enabled"},
		"OwnershipControls":       map[string]any{"Rules": []any{map[string]any{"ObjectOwnership": "BucketOwnerEnforced"}}},
	})
	v.tpl.HasResourceProperties(jsii.String("AWS::S3::BucketPolicy"), &map[string]any{
		"PolicyDocument": assertions.Match_ObjectLike(&map[string]any{"Statement": assertions.Match_ArrayWith(&[]any{
			assertions.Match_ObjectLike(&map[string]any{"Effect": "Deny", "Action": "s3:*",
				"Condition": map[string]any{"Bool": map[string]any{"aws:SecureTransport": "false"}}})})}),
	})
	if ids := synth(t, "dev").ofType("AWS::S3::Bucket"); len(ids) != 0 {
		t.Errorf("dev (outputBucket off) has buckets %v", ids)
	}
}

func TestOutputs(t *testing.T) {
	v := synth(t, "dev")
	for _, id := range []string{"ApiUrl", "WorkQueueUrl", "UrgentQueueUrl", "DlqQueueUrl", "PoisonQueueUrl", "ItemRejectQueueUrl", "ExecutionTableName",
		"PayloadTableName", "DeadLetterTableName", "EffectTableName", "HistoryTableName", "HistoryFailureQueueUrl", "EventBusName", "ClientPolicyArn", "OperatorPolicyArn", "RedriveRouteArn",
		"ResumeTokenSecretArn"} {
		v.tpl.HasOutput(jsii.String(id), assertions.Match_AnyValue())
	}
	if outs, _ := v.doc["Outputs"].(map[string]any); outs["OutputBucketName"] != nil || outs["AwaitApiUrl"] != nil {
		t.Error("dev has an OutputBucketName or AwaitApiUrl output without an output bucket or an await front")
	}
	synth(t, "prod").tpl.HasOutput(jsii.String("AwaitApiUrl"), assertions.Match_AnyValue())
	full := synth(t, "full")
	full.tpl.HasOutput(jsii.String("AlarmTopicArn"), assertions.Match_AnyValue())
	full.tpl.HasOutput(jsii.String("OutputBucketName"), assertions.Match_ObjectLike(&map[string]any{
		"Value": map[string]any{"Ref": OutputBucketID}}))
	v.tpl.HasOutput(jsii.String("ResumeTokenSecretArn"), assertions.Match_ObjectLike(&map[string]any{
		"Value": map[string]any{"Ref": ResumeSecretID}}))
}

// The stack does not depend on where it is deployed: no AWS account or
// region is needed to synthesize it.
func TestEnvironmentAgnostic(t *testing.T) {
	v := synth(t, "dev")
	if !*awscdk.Token_IsUnresolved(v.stack.Account()) || !*awscdk.Token_IsUnresolved(v.stack.Region()) {
		t.Errorf("stack has a concrete environment: %s/%s", *v.stack.Account(), *v.stack.Region())
	}
}

// TestClientPolicyReachesNoOperatorRoute: in an execute-api ARN, IAM's *
// matches any characters, '/' included, so a client route's ARN with a
// path parameter (GET /v1/executions/*, of the status route) grants
// every path under it as well: an operator route there would be the
// clients' too. No operator route may lie under a client route's ARN.
func TestClientPolicyReachesNoOperatorRoute(t *testing.T) {
	var client []*regexp.Regexp
	for _, r := range Routes {
		if r.Client {
			glob := regexp.QuoteMeta(r.Method + wildcardParams(r.Path))
			client = append(client, regexp.MustCompile("^"+strings.ReplaceAll(glob, `\*`, ".*")+"$"))
		}
	}
	for _, r := range Routes {
		if !r.Operator() {
			continue
		}
		concrete := r.Method + strings.ReplaceAll(wildcardParams(r.Path), "*", "x")
		for _, re := range client {
			if re.MatchString(concrete) {
				t.Errorf("operator route %s is granted by the client policy's %s", r.Key(), re)
			}
		}
	}
}
