package stack

import (
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"
)

// AddNagChecks applies cdk-nag's AwsSolutions rules to every construct in
// scope (the app in main.go, the stack in tests). Violations become error
// annotations, which fail `cdk synth`/`deploy` and the tests; the stack's
// few suppressions, each with its reason, are added by New.
func AddNagChecks(scope constructs.IConstruct, reports bool) {
	awscdk.Aspects_Of(scope).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{
		Verbose: jsii.Bool(true),
		Reports: jsii.Bool(reports),
	}), nil)
}

// nagged is one suppression New adds.
type nagged struct {
	target    constructs.IConstruct
	rule      string
	reason    string
	appliesTo []string
}

// suppress records a suppression of rule on target's CloudFormation
// resource only (never on its children), with its reason and, for
// AwsSolutions-IAM5, the exact findings it covers.
func (b *builder) suppress(target constructs.IConstruct, rule, reason string, appliesTo ...string) {
	b.nagged = append(b.nagged, nagged{target: target, rule: rule, reason: reason, appliesTo: appliesTo})
}

// suppressions adds every suppression, each with the reason the rule does
// not apply or what the stack does instead. The tests require every
// reason to be a real sentence.
func (b *builder) suppressions() {
	b.suppress(b.queue[DLQQueueID], "AwsSolutions-SQS3",
		"The DLQ queue is itself the dead-letter destination of execution envelopes (published by the runtime, not moved by an SQS redrive policy). An envelope the dlq function cannot record stays on it, is retried and raises the DlqQueueMessagesVisibleAlarm; redriving it elsewhere would hide it.")
	b.suppress(b.queue[RejectQueueID], "AwsSolutions-SQS3",
		"The item reject queue is itself a dead-letter destination: the Item Reject Sink publishes rejected items there for an operator or a consumer of their own to read, and nothing in the stack consumes it, so there is no receive count that a redrive policy could act on.")
	b.suppress(b.historyFailures, "AwsSolutions-SQS3",
		"The history failure queue is itself a dead-letter destination: the history function's stream event source sends it the failure record of a batch it gave up on, for an operator to read and replay, and nothing consumes it, so there is no receive count a redrive policy could act on; a visible message raises the HistoryFailuresAlarm.")
	b.suppress(b.fn[History].role.Node().FindChild(jsii.String("DefaultPolicy")), "AwsSolutions-IAM5",
		"dynamodb:ListStreams is granted on the execution table's streams (<table>/stream/*, as DynamoDB documents for a function on a table's stream): a table's stream ARN carries its creation time, which a stream enabled again changes. The statement holds that one action; the stream's reads are granted on the current stream's ARN.",
		"Resource::<"+ExecutionTableID+".Arn>/stream/*")
	policyReason := "An execute-api ARN names one route as <api>/<stage>/<METHOD>/<path>. Here the stage is named and '*' stands only for path parameters ({pipelineId}, {executionId}: ids the caller chooses); every statement names its method and route, so the operator routes stay out of the client policies."
	invokeFindings := func(client bool, stage string) []string {
		var findings []string
		for _, r := range Routes {
			if r.Client == client && !r.ResumeToken && strings.Contains(r.Path, "{") {
				findings = append(findings, "Resource::arn:<AWS::Partition>:execute-api:<AWS::Region>:<AWS::AccountId>:<"+HTTPAPIID+">/"+stage+"/"+r.Method+wildcardParams(r.Path))
			}
		}
		return findings
	}
	b.suppress(b.http.clientPolicy, "AwsSolutions-IAM5", policyReason, invokeFindings(true, sharedStage)...)
	b.suppress(b.http.operatorPolicy, "AwsSolutions-IAM5", policyReason, invokeFindings(false, sharedStage)...)
	for _, name := range sortedKeys(b.http.tenants) {
		b.suppress(b.http.tenants[name].policy, "AwsSolutions-IAM5", policyReason, invokeFindings(true, name)...)
	}
	tokenReason := "The await completion route is called by the external party an await step waits for (a webhook, a person), which has no AWS identity or JWT. Its authorization is the X-Resume-Token the submit function verifies: an HMAC-SHA256 over tenant, execution id and await id keyed by the stack's Secrets Manager secret, so it cannot be forged and opens one await of one execution of one tenant. The route has its own throttle below the stage's, the body limit (http.max-body-bytes) applies, and a duplicate or late completion changes nothing."
	for _, t := range b.http.tokenRoutes {
		b.suppress(t.route, "AwsSolutions-APIG4", tokenReason)
	}
	for _, m := range b.front.methods {
		b.suppress(m, "AwsSolutions-APIG4", tokenReason+" This method is the route's front, behind the web ACL's per-IP rate limit.")
		b.suppress(m, "AwsSolutions-COG4",
			"The await completion route's callers are external parties without a Cognito identity (a webhook, a person holding a resume token); the route is authorized by the HMAC resume token the submit function verifies, and the web ACL limits each caller's rate, so a user pool authorizer has nobody to authorize.")
	}
	if b.front.api != nil {
		b.suppress(b.front.api.DeploymentStage(), "AwsSolutions-APIG6",
			"Execution logging needs the account-wide API Gateway CloudWatch role (AWS::ApiGateway::Account, one per account and region), which one application's stack must not own or overwrite; a stage with logging on fails to deploy without it. The stage keeps access logs of every request instead (status, integration error and the web ACL's verdict), and the origin HTTP API logs every request it serves.")
	}
	b.suppress(b.secret, "AwsSolutions-SMG4",
		"The secret is the HMAC key of await resume tokens handed to external parties; a token stays valid until its await completes or times out, so an automatic rotation would invalidate every outstanding token. An operator rotates it by hand when no await is outstanding (or accepts that outstanding ones fail and are re-driven): put a new random value (aws secretsmanager put-secret-value), then update the submit and worker functions' configuration so that new instances fetch it at boot.")
	if b.output != nil {
		b.suppress(b.output, "AwsSolutions-S1",
			"The output bucket is written only by the worker role (s3:PutObject, a single IAM statement) and is never public; object-level activity is auditable with CloudTrail data events, which an account that needs them enables account-wide, so a second bucket of server access logs (itself needing the same rule's exception) would add cost without adding a control.")
		b.suppress(b.fn[Worker].role.Node().FindChild(jsii.String("DefaultPolicy")), "AwsSolutions-IAM5",
			"The worker publishes each execution's terminal output to a key of its own chosen by the pipeline's Output.To template (tenant, pipeline and execution ids): the object wildcard is confined to the stack's own output bucket and the only action is s3:PutObject.",
			"Resource::<"+OutputBucketID+".Arn>/*")
	}
	if b.s.Tracing || b.s.TracesToXRay() {
		for _, name := range FunctionNames {
			b.suppress(b.fn[name].role.Node().FindChild(jsii.String("DefaultPolicy")), "AwsSolutions-IAM5",
				"X-Ray: xray:PutTraceSegments and xray:PutTelemetryRecords (active tracing) and xray:PutSpans and xray:PutSpansForIndexing (tracing.exporter xray, the OTLP endpoint) support no resource-level permissions, so they are granted on Resource '*' (the actions are explicit).",
				"Resource::*")
		}
	}
	for _, s := range b.nagged {
		var applies *[]any
		if len(s.appliesTo) > 0 {
			l := make([]any, len(s.appliesTo))
			for i, a := range s.appliesTo {
				l[i] = a
			}
			applies = &l
		}
		cdknag.NagSuppressions_AddResourceSuppressions(s.target, &[]*cdknag.NagPackSuppression{{
			Id: jsii.String(s.rule), Reason: jsii.String(s.reason), AppliesTo: applies,
		}}, jsii.Bool(false))
	}
}
