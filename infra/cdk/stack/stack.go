// Package stack is the qasync serverless application as one CDK stack:
// the DynamoDB tables and SQS queues of shared/schema (the same
// definitions `qasync provision` creates locally, the execution table's
// stream included), the five Lambda
// functions from their bundles (dist/<fn>.zip by default) with
// least-privilege roles, the HTTP API with IAM authorization on every
// route but the await completion route (authorized by its resume token,
// and outside dev reached through a REST API whose WAF web ACL limits each
// client IP), optional per-tenant stages with throttles of their own,
// the sweeper's schedule, the lifecycle event bus, alarms, and cdk-nag's
// AwsSolutions checks.
//
// It is a construct for any service built on qasync: New builds the stack
// from Settings (DefaultServiceSettings or SettingsFromContext, with the
// service's name) and Props.Bundles (the service's own function bundles);
// Synth checks and synthesizes the app. This repository's app (main.go)
// and the service of examples/invoices are two such apps; tests call New
// directly.
package stack

import (
	"fmt"
	"sort"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awss3"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/qasync/qasync/shared/schema"
)

// Logical ids of the stack's main resources. They are fixed (not derived
// from construct paths) so that `sam local invoke <LogicalId>`, alarms
// and IAM documentation can name them, and so that refactoring the CDK
// code never replaces a table or a queue.
const (
	SubmitFunctionID  = "SubmitFunction"
	WorkerFunctionID  = "WorkerFunction"
	SweeperFunctionID = "SweeperFunction"
	DLQFunctionID     = "DlqFunction"
	HistoryFunctionID = "HistoryFunction"
	ExecutionTableID  = "ExecutionTable"
	PayloadTableID    = "PayloadTable"
	DeadLetterTableID = "DeadLetterTable"
	EffectTableID     = "EffectTable"
	HistoryTableID    = "HistoryTable"
	// HistoryFailureQueueID receives the failure records of stream
	// batches the history function gave up on (the event source
	// mapping's on-failure destination).
	HistoryFailureQueueID = "HistoryFailureQueue"
	WorkQueueID           = "WorkQueue"
	// UrgentQueueID is the urgent work queue (Settings.UrgentLane).
	UrgentQueueID     = "UrgentQueue"
	PoisonQueueID     = "PoisonQueue"
	DLQQueueID        = "DlqQueue"
	RejectQueueID     = "ItemRejectQueue"
	EventBusID        = "LifecycleEventBus"
	SweeperScheduleID = "SweeperSchedule"
	HTTPAPIID         = "HttpApi"
	SubmitRouteID     = "SubmitRoute"
	StatusRouteID     = "StatusRoute"
	ResultRouteID     = "ResultRoute"
	RedriveRouteID    = "RedriveRoute"
	HealthRouteID     = "HealthRoute"
	// The operator plane's routes: list, history, dead letters and
	// their counts, and the pipelines are client routes; cancel, bulk
	// re-drive and an execution's input are operator routes, like
	// re-drive.
	ListRouteID             = "ListRoute"
	HistoryRouteID          = "HistoryRoute"
	CancelRouteID           = "CancelRoute"
	BulkRedriveRouteID      = "BulkRedriveRoute"
	RedriveJobRouteID       = "BulkRedriveProgressRoute"
	DeadLettersRouteID      = "DeadLettersRoute"
	DeadLetterCountsRouteID = "DeadLetterCountsRoute"
	InputRouteID            = "InputRoute"
	PipelinesRouteID        = "PipelinesRoute"
	PipelineRouteID         = "PipelineRoute"
	OpenAPIRouteID          = "OpenAPIRoute"
	// AwaitCompleteRouteID is the await completion route, authorized by
	// its resume token instead of IAM (see Routes).
	AwaitCompleteRouteID = "AwaitCompleteRoute"
	ClientPolicyID       = "ClientInvokePolicy"
	OperatorPolicyID     = "OperatorRedrivePolicy"
	ResumeSecretID       = "AwaitResumeTokenSecret"
	OutputBucketID       = "OutputBucket"
	lifecycleEventSrc    = "qasync" // shared/lifecycle.Source; TestSharedNames keeps them equal
)

// FunctionIDs maps each function name to its logical id.
var FunctionIDs = map[string]string{
	Submit: SubmitFunctionID, Worker: WorkerFunctionID, Sweeper: SweeperFunctionID, DLQ: DLQFunctionID,
	History: HistoryFunctionID,
}

// Props configure New.
type Props struct {
	awscdk.StackProps
	// Settings are the stage settings; New validates them.
	Settings Settings
	// Bundles locate the five functions' code: a service of its own points
	// them at its bundles. The zero value takes them from Settings.DistDir.
	Bundles Bundles
}

// New builds the qasync stack in scope: the stack of a service whose
// functions are the bundles props.Bundles names (by default this
// repository's dist/). It fails when the settings are invalid, a
// function's bundle is missing (its bootstrap is not an executable
// file), or the functions' environment would not pass config.Load.
func New(scope constructs.Construct, id string, props Props) (awscdk.Stack, error) {
	s := props.Settings
	if err := s.Validate(); err != nil {
		return nil, err
	}
	bundles, err := props.Bundles.resolve(s.DistDir)
	if err != nil {
		return nil, err
	}
	sp := props.StackProps
	if sp.Description == nil {
		desc := "qasync durable queue-async runtime, stage " + s.Stage
		if s.Service != DefaultService {
			desc = s.Service + " on the " + desc
		}
		sp.Description = jsii.String(desc)
	}
	stack := awscdk.NewStack(scope, &id, &sp)
	awscdk.Tags_Of(stack).Add(jsii.String("app"), jsii.String(s.Service), nil)
	awscdk.Tags_Of(stack).Add(jsii.String("stage"), jsii.String(s.Stage), nil)

	b := &builder{stack: stack, s: s, names: schema.Prefixed(s.Prefix), bundles: bundles}
	b.tables()
	b.queues()
	b.bus = awsevents.NewEventBus(stack, jsii.String(EventBusID), &awsevents.EventBusProps{
		EventBusName: jsii.String(s.Prefix + "-lifecycle"),
		Description:  jsii.String("qasync terminal lifecycle events (source " + lifecycleEventSrc + ")"),
	})
	setLogicalID(b.bus, EventBusID)
	b.resumeSecret()
	if s.OutputBucket {
		b.outputBucket()
	}
	if err := b.functions(); err != nil {
		return nil, err
	}
	b.eventSources()
	b.schedule()
	b.httpAPI()
	if s.AwaitWAF {
		b.awaitFront()
	}
	b.alarms()
	b.outputs()
	b.suppressions()
	return stack, nil
}

// builder holds the stack's resources while New builds it.
type builder struct {
	stack   awscdk.Stack
	s       Settings
	names   schema.Names
	bundles map[string]bundle            // by function name
	tbl     map[string]awsdynamodb.Table // by logical id
	queue   map[string]awssqs.Queue      // by logical id
	bus     awsevents.EventBus
	fn      map[string]*function // by function name
	http    *httpAPI
	front   awaitFrontAPI // the await front, with Settings.AwaitWAF
	alarm   *alarmSet
	secret  awssecretsmanager.Secret
	output  awss3.Bucket // nil unless Settings.OutputBucket
	// historyFailures is the history event source's on-failure destination.
	historyFailures awssqs.Queue
	nagged          []nagged
}

// removal is the removal policy of stateful resources.
func (b *builder) removal() awscdk.RemovalPolicy {
	if b.s.Retain {
		return awscdk.RemovalPolicy_RETAIN
	}
	return awscdk.RemovalPolicy_DESTROY
}

// tableIDs maps schema table names to logical ids.
func (b *builder) tableIDs() map[string]string {
	return map[string]string{
		b.names.ExecutionTable: ExecutionTableID,
		b.names.PayloadTable:   PayloadTableID, b.names.DeadLetterTable: DeadLetterTableID,
		b.names.EffectTable: EffectTableID, b.names.HistoryTable: HistoryTableID,
	}
}

// tables creates every table of schema.Tables: on demand, point-in-time
// recovery, AWS managed KMS encryption, TTL, the schema's indexes and
// stream.
func (b *builder) tables() {
	b.tbl = map[string]awsdynamodb.Table{}
	ids := b.tableIDs()
	for _, t := range schema.Tables(b.names) {
		id, ok := ids[t.Name]
		if !ok {
			panic(fmt.Sprintf("stack: schema table %q has no logical id", t.Name))
		}
		props := &awsdynamodb.TableProps{
			TableName:    jsii.String(t.Name),
			PartitionKey: attr(t.PartitionKey),
			BillingMode:  awsdynamodb.BillingMode_PAY_PER_REQUEST,
			PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
				PointInTimeRecoveryEnabled: jsii.Bool(true),
			},
			// AWS managed key (aws/dynamodb): encryption with KMS, key use
			// visible in CloudTrail, no key policy to maintain and no kms:
			// grants for the functions; see docs/deployment.md's Deploy section.
			Encryption:          awsdynamodb.TableEncryption_AWS_MANAGED,
			TimeToLiveAttribute: jsii.String(t.TTLAttribute),
			DeletionProtection:  jsii.Bool(b.s.DeletionProtection),
			RemovalPolicy:       b.removal(),
		}
		if t.SortKey.Name != "" {
			props.SortKey = attr(t.SortKey)
		}
		if t.Stream != "" {
			props.Stream = streamViews[t.Stream]
			if props.Stream == "" {
				panic(fmt.Sprintf("stack: table %s has unknown stream view %q", t.Name, t.Stream))
			}
		}
		table := awsdynamodb.NewTable(b.stack, jsii.String(id), props)
		for _, ix := range t.Indexes {
			table.AddGlobalSecondaryIndex(&awsdynamodb.GlobalSecondaryIndexProps{
				IndexName:        jsii.String(ix.Name),
				PartitionKey:     attr(ix.PartitionKey),
				SortKey:          attr(ix.SortKey),
				ProjectionType:   awsdynamodb.ProjectionType_INCLUDE,
				NonKeyAttributes: jsii.Strings(ix.NonKeyAttributes...),
			})
		}
		setLogicalID(table, id)
		b.tbl[id] = table
	}
}

// streamViews converts schema stream views.
var streamViews = map[schema.StreamView]awsdynamodb.StreamViewType{
	schema.StreamNewAndOldImages: awsdynamodb.StreamViewType_NEW_AND_OLD_IMAGES,
}

// attr converts a schema key attribute.
func attr(a schema.Attr) *awsdynamodb.Attribute {
	t := map[schema.AttrType]awsdynamodb.AttributeType{
		schema.String: awsdynamodb.AttributeType_STRING,
		schema.Number: awsdynamodb.AttributeType_NUMBER,
		schema.Binary: awsdynamodb.AttributeType_BINARY,
	}[a.Type]
	if t == "" {
		panic(fmt.Sprintf("stack: attribute %s has unknown type %q", a.Name, a.Type))
	}
	return &awsdynamodb.Attribute{Name: jsii.String(a.Name), Type: t}
}

// QueueVisibility is the visibility timeout the stack gives a schema queue
// consumed by a function with the given timeout: the schema's default, or
// VisibilityFor(timeout) when that is longer.
func QueueVisibility(q schema.Queue, consumerTimeout time.Duration) time.Duration {
	return max(q.VisibilityTimeout, VisibilityFor(consumerTimeout))
}

// queues creates every queue of schema.Queues (the urgent work queue only
// with Settings.UrgentLane): SQS managed encryption, TLS enforced, the
// schema's retention and redrive, and a visibility timeout raised to six
// times the consuming function's timeout.
func (b *builder) queues() {
	b.queue = map[string]awssqs.Queue{}
	names := b.names
	if !b.s.UrgentLane {
		names.UrgentQueue = ""
	}
	ids := map[string]string{names.WorkQueue: WorkQueueID, names.PoisonQueue: PoisonQueueID, names.DLQQueue: DLQQueueID,
		names.RejectQueue: RejectQueueID, names.HistoryFailureQueue: HistoryFailureQueueID, names.UrgentQueue: UrgentQueueID}
	consumer := map[string]time.Duration{
		names.WorkQueue: b.s.WorkerTimeout, names.UrgentQueue: b.s.WorkerTimeout, names.PoisonQueue: b.s.DLQTimeout, names.DLQQueue: b.s.DLQTimeout,
	}
	byName := map[string]awssqs.Queue{}
	for _, q := range schema.Queues(names) {
		id, ok := ids[q.Name]
		if !ok {
			panic(fmt.Sprintf("stack: schema queue %q has no logical id", q.Name))
		}
		props := &awssqs.QueueProps{
			QueueName:         jsii.String(q.Name),
			VisibilityTimeout: seconds(QueueVisibility(q, consumer[q.Name])),
			RetentionPeriod:   seconds(q.Retention),
			// SSE-SQS: encrypted at rest with keys SQS owns, at no cost,
			// and without kms: grants for producers and consumers.
			Encryption:    awssqs.QueueEncryption_SQS_MANAGED,
			EnforceSSL:    jsii.Bool(true),
			RemovalPolicy: b.removal(),
		}
		if q.RedriveTo != "" {
			target, ok := byName[q.RedriveTo]
			if !ok {
				panic(fmt.Sprintf("stack: queue %q redrives to %q, which the schema lists later or not at all", q.Name, q.RedriveTo))
			}
			props.DeadLetterQueue = &awssqs.DeadLetterQueue{Queue: target, MaxReceiveCount: jsii.Number(float64(q.MaxReceiveCount))}
		}
		queue := awssqs.NewQueue(b.stack, jsii.String(id), props)
		setLogicalID(queue, id)
		byName[q.Name] = queue
		b.queue[id] = queue
	}
	// The on-failure destination of the history function's stream event
	// source: a batch that still fails after the mapping's retries (split
	// in halves on each error) leaves a record there naming its shard and
	// sequence numbers, for an operator to replay, and raises the
	// HistoryFailuresAlarm.
	b.historyFailures = b.queue[HistoryFailureQueueID]
}

// resumeSecret creates the HMAC key of await steps' resume tokens: a
// Secrets Manager secret with a generated 64-character value (letters and
// digits), encrypted with the AWS managed key (aws/secretsmanager). The
// functions that sign (worker) or verify (submit) tokens get its ARN as
// await.resume-token-secret-arn and fetch the value at boot; the value
// itself never enters a function's configuration. It is not rotated
// automatically (see the cdk-nag suppression). Its name is generated, so
// that a secret scheduled for deletion never blocks a new deployment.
func (b *builder) resumeSecret() {
	b.secret = awssecretsmanager.NewSecret(b.stack, jsii.String(ResumeSecretID), &awssecretsmanager.SecretProps{
		Description: jsii.String("qasync " + b.s.Stage + ": HMAC key of await steps' resume tokens (pipeline.orchestrator.await.resume-token-secret)"),
		GenerateSecretString: &awssecretsmanager.SecretStringGenerator{
			PasswordLength:     jsii.Number(64),
			ExcludePunctuation: jsii.Bool(true),
		},
		RemovalPolicy: b.removal(),
	})
	setLogicalID(b.secret, ResumeSecretID)
}

// outputBucket creates the bucket of pipelines' Terminal Object Publish:
// S3 managed encryption (SSE-S3: no key grants), all public access
// blocked, bucket owner enforced (no ACLs), requests without TLS refused,
// versioned (a replayed last step's earlier write stays recoverable),
// retained outside dev like the tables. Its name is generated (bucket
// names are global) and passed to the functions as output.bucket.
func (b *builder) outputBucket() {
	b.output = awss3.NewBucket(b.stack, jsii.String(OutputBucketID), &awss3.BucketProps{
		Encryption:        awss3.BucketEncryption_S3_MANAGED,
		BlockPublicAccess: awss3.BlockPublicAccess_BLOCK_ALL(),
		ObjectOwnership:   awss3.ObjectOwnership_BUCKET_OWNER_ENFORCED,
		EnforceSSL:        jsii.Bool(true),
		Versioned:         jsii.Bool(true),
		RemovalPolicy:     b.removal(),
	})
	setLogicalID(b.output, OutputBucketID)
}

// schedule runs the sweeper on an EventBridge schedule.
func (b *builder) schedule() {
	rule := awsevents.NewRule(b.stack, jsii.String(SweeperScheduleID), &awsevents.RuleProps{
		Description: jsii.String("qasync sweeper: re-dispatch due executions, publish pending dead letters"),
		Schedule:    awsevents.Schedule_Rate(awscdk.Duration_Minutes(jsii.Number(b.s.SweeperRate.Minutes()))),
	})
	rule.AddTarget(lambdaTarget(b.fn[Sweeper].fn, b.s.SweeperRate))
	setLogicalID(rule, SweeperScheduleID)
}

// outputs prints what a deployment needs to be used.
func (b *builder) outputs() {
	out := func(id, desc string, v *string) {
		awscdk.NewCfnOutput(b.stack, jsii.String(id), &awscdk.CfnOutputProps{Value: v, Description: jsii.String(desc)})
	}
	if b.front.api != nil {
		out("ApiUrl", "HTTP API base URL (IAM SigV4-signed requests, service execute-api); the await completion route is at AwaitApiUrl", b.http.stage.Url())
		out("AwaitApiUrl", "base URL of the await completion route (its resume token authorizes it), behind the web ACL's per-IP rate limit", b.front.api.Url())
	} else {
		out("ApiUrl", "HTTP API base URL (IAM SigV4-signed requests, service execute-api; the await completion route takes its resume token instead)", b.http.stage.Url())
	}
	out("WorkQueueUrl", "SQS work queue", b.queue[WorkQueueID].QueueUrl())
	if u, ok := b.queue[UrgentQueueID]; ok {
		out("UrgentQueueUrl", "SQS urgent work queue (executions of priority at most priority.urgent-at)", u.QueueUrl())
	}
	out("DlqQueueUrl", "SQS queue of execution dead-letter envelopes", b.queue[DLQQueueID].QueueUrl())
	out("PoisonQueueUrl", "SQS poison queue (work items the work queue gave up on)", b.queue[PoisonQueueID].QueueUrl())
	out("ItemRejectQueueUrl", "SQS queue of the Item Reject Sink (items and streams steps rejected)", b.queue[RejectQueueID].QueueUrl())
	out("ExecutionTableName", "DynamoDB execution table", b.tbl[ExecutionTableID].TableName())
	out("PayloadTableName", "DynamoDB payload chunk table", b.tbl[PayloadTableID].TableName())
	out("DeadLetterTableName", "DynamoDB dead-letter record table", b.tbl[DeadLetterTableID].TableName())
	out("EffectTableName", "DynamoDB effect log of command steps", b.tbl[EffectTableID].TableName())
	out("HistoryTableName", "DynamoDB execution history, fed from the execution table's stream by the history function", b.tbl[HistoryTableID].TableName())
	out("HistoryFailureQueueUrl", "SQS queue of the stream batches the history function gave up on", b.historyFailures.QueueUrl())
	out("EventBusName", "EventBridge bus of terminal lifecycle events", b.bus.EventBusName())
	out("ClientPolicyArn", "managed policy: invoke submit, status and result", b.http.clientPolicy.ManagedPolicyArn())
	out("OperatorPolicyArn", "managed policy: invoke the redrive route", b.http.operatorPolicy.ManagedPolicyArn())
	out("RedriveRouteArn", "execute-api ARN of the redrive route on the $default stage (for your own policies)", b.http.routeArn("POST", redrivePath, sharedStage))
	for _, name := range sortedKeys(b.http.tenants) {
		t := b.http.tenants[name]
		id := TenantStageID(name)
		out("TenantApiUrl"+id, "base URL of tenant "+name+"'s own stage (its own throttle)", t.stage.Url())
		out("TenantPolicyArn"+id, "managed policy: the client routes on tenant "+name+"'s stage only (attach to its role instead of ClientInvokePolicy)", t.policy.ManagedPolicyArn())
	}
	out("ResumeTokenSecretArn", "Secrets Manager secret keying await resume tokens (its ARN; read the value with GetSecretValue)", b.secret.SecretArn())
	if b.output != nil {
		out("OutputBucketName", "S3 bucket of pipelines' terminal output (config key output.bucket, placeholder {outputBucket})", b.output.BucketName())
	}
	if b.alarm.topic != nil {
		out("AlarmTopicArn", "SNS topic of the alarms", b.alarm.topic.TopicArn())
	}
}

// sortedKeys returns m's keys, sorted.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// setLogicalID fixes the logical id of c's CloudFormation resource.
func setLogicalID(c constructs.IConstruct, id string) {
	c.Node().DefaultChild().(awscdk.CfnResource).OverrideLogicalId(jsii.String(id))
}

// seconds converts d to a CDK Duration in whole seconds.
func seconds(d time.Duration) awscdk.Duration {
	return awscdk.Duration_Seconds(jsii.Number(float64(d / time.Second)))
}
