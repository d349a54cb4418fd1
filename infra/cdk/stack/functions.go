package stack

import (
	"path/filepath"
	"slices"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/jsii-runtime-go"

	"github.com/qasync/qasync/shared/schema"
)

// function is one Lambda function with its role and log group.
type function struct {
	name string
	fn   awslambda.Function
	role awsiam.Role
	logs awslogs.LogGroup
}

// lambdaLogLevels maps the log-level key to Lambda's application log level.
var lambdaLogLevels = map[string]awslambda.ApplicationLogLevel{
	"debug": awslambda.ApplicationLogLevel_DEBUG,
	"info":  awslambda.ApplicationLogLevel_INFO,
	"warn":  awslambda.ApplicationLogLevel_WARN,
	"error": awslambda.ApplicationLogLevel_ERROR,
}

// retentionDays maps days to CloudWatch Logs retention values.
var retentionDays = map[int]awslogs.RetentionDays{
	1: awslogs.RetentionDays_ONE_DAY, 3: awslogs.RetentionDays_THREE_DAYS, 5: awslogs.RetentionDays_FIVE_DAYS,
	7: awslogs.RetentionDays_ONE_WEEK, 14: awslogs.RetentionDays_TWO_WEEKS, 30: awslogs.RetentionDays_ONE_MONTH,
	60: awslogs.RetentionDays_TWO_MONTHS, 90: awslogs.RetentionDays_THREE_MONTHS, 120: awslogs.RetentionDays_FOUR_MONTHS,
	150: awslogs.RetentionDays_FIVE_MONTHS, 180: awslogs.RetentionDays_SIX_MONTHS, 365: awslogs.RetentionDays_ONE_YEAR,
	400: awslogs.RetentionDays_THIRTEEN_MONTHS, 545: awslogs.RetentionDays_EIGHTEEN_MONTHS, 731: awslogs.RetentionDays_TWO_YEARS,
	1096: awslogs.RetentionDays_THREE_YEARS, 1827: awslogs.RetentionDays_FIVE_YEARS, 2192: awslogs.RetentionDays_SIX_YEARS,
	2557: awslogs.RetentionDays_SEVEN_YEARS, 2922: awslogs.RetentionDays_EIGHT_YEARS, 3288: awslogs.RetentionDays_NINE_YEARS,
	3653: awslogs.RetentionDays_TEN_YEARS,
}

// logGroup creates a log group with the stage's retention.
func (b *builder) logGroup(id, name string) awslogs.LogGroup {
	lg := awslogs.NewLogGroup(b.stack, jsii.String(id), &awslogs.LogGroupProps{
		LogGroupName:  jsii.String(name),
		Retention:     retentionDays[b.s.LogRetentionDays],
		RemovalPolicy: b.removal(),
	})
	setLogicalID(lg, id)
	return lg
}

// functions creates the five functions, each with its own role holding
// only the statements that function needs.
func (b *builder) functions() error {
	b.fn = map[string]*function{}
	res := Resources{
		ExecutionTable: *b.tbl[ExecutionTableID].TableName(),
		PayloadTable:   *b.tbl[PayloadTableID].TableName(), DeadLetterTable: *b.tbl[DeadLetterTableID].TableName(),
		EffectTable: *b.tbl[EffectTableID].TableName(), HistoryTable: *b.tbl[HistoryTableID].TableName(),
		QueueURL: *b.queue[WorkQueueID].QueueUrl(), DLQURL: *b.queue[DLQQueueID].QueueUrl(),
		RejectQueueURL: *b.queue[RejectQueueID].QueueUrl(),
	}
	if u, ok := b.queue[UrgentQueueID]; ok {
		res.UrgentQueueURL = *u.QueueUrl()
	}
	timeouts := map[string]time.Duration{Submit: b.s.SubmitTimeout, Worker: b.s.WorkerTimeout, Sweeper: b.s.SweeperTimeout, DLQ: b.s.DLQTimeout,
		History: b.s.HistoryTimeout}
	descriptions := map[string]string{
		Submit:  "qasync submit: HTTP API -> submit, status, result, list, redrive, cancel, await completion",
		Worker:  "qasync worker: work queue -> one transition per record",
		Sweeper: "qasync sweeper: schedule -> sweep index sweeps, bulk re-drives",
		DLQ:     "qasync dlq: DLQ and poison queue -> dead-letter records",
		History: "qasync history: execution table stream -> execution history pages",
	}
	for _, name := range FunctionNames {
		r := res
		if name == History { // it publishes the lifecycle events, from the stream
			r.EventBus = *b.bus.EventBusName()
		}
		if usesResumeSecret(name) {
			r.ResumeTokenSecretARN = *b.secret.SecretArn()
		}
		if b.output != nil {
			r.OutputBucket = *b.output.BucketName()
		}
		env, err := Environment(b.s, r)
		if err != nil {
			return err
		}
		id := FunctionIDs[name]
		physical := b.s.Prefix + "-" + name
		role := awsiam.NewRole(b.stack, jsii.String(id+"Role"), &awsiam.RoleProps{
			AssumedBy:   awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil),
			Description: jsii.String("execution role of " + physical + " (least privilege, no managed policies)"),
		})
		setLogicalID(role, id+"Role")
		logs := b.logGroup(id+"Logs", "/aws/lambda/"+physical)
		props := &awslambda.FunctionProps{
			FunctionName:          jsii.String(physical),
			Description:           jsii.String(descriptions[name]),
			Runtime:               awslambda.Runtime_PROVIDED_AL2023(),
			Architecture:          awslambda.Architecture_ARM_64(),
			Handler:               jsii.String("bootstrap"),
			Code:                  awslambda.Code_FromAsset(jsii.String(b.bundles[name].asset), nil),
			Role:                  role,
			Timeout:               seconds(timeouts[name]),
			MemorySize:            jsii.Number(float64(b.s.MemoryMB)),
			Environment:           stringMap(env),
			LogGroup:              logs,
			LoggingFormat:         awslambda.LoggingFormat_JSON,
			ApplicationLogLevelV2: lambdaLogLevels[b.s.LogLevel],
			SystemLogLevelV2:      awslambda.SystemLogLevel_WARN,
			Tracing:               awslambda.Tracing_DISABLED,
		}
		if b.s.Tracing {
			props.Tracing = awslambda.Tracing_ACTIVE
		}
		if n, ok := b.s.ReservedConcurrency[name]; ok {
			props.ReservedConcurrentExecutions = jsii.Number(float64(n))
		}
		f := &function{name: name, role: role, logs: logs}
		f.fn = awslambda.NewFunction(b.stack, jsii.String(id), props)
		setLogicalID(f.fn, id)
		if err := b.samAssetMetadata(f.fn, b.bundles[name].folder); err != nil {
			return err
		}
		b.fn[name] = f
		b.grants(f)
		if policy := role.Node().TryFindChild(jsii.String("DefaultPolicy")); policy != nil {
			setLogicalID(policy, id+"Policy")
		}
	}
	return nil
}

// SAM CLI's resource metadata (see samAssetMetadata).
const (
	MetaAssetPath     = "aws:asset:path"
	MetaAssetProperty = "aws:asset:property"
	MetaAssetBundled  = "aws:asset:is-bundled"
)

// samAssetMetadata makes fn runnable by `sam local invoke`: SAM CLI
// replaces the property named by aws:asset:property (Code) with the
// folder aws:asset:path names, relative to the template's directory (the
// app's output directory), so it runs the bundle's bootstrap
// (dist/<fn>/bootstrap by default) instead of refusing the S3 location of
// the deployed asset. The CDK adds this
// metadata itself only under the aws:cdk:enable-asset-metadata context,
// which the CDK CLI sets and `go run .` (make synth) does not, and it
// would point at the staged zip; set here after the Function is built, it
// wins either way. is-bundled tells `sam build` the folder is built.
func (b *builder) samAssetMetadata(fn awslambda.Function, dir string) error {
	outdir, err := filepath.Abs(*awscdk.Stage_Of(b.stack).Outdir())
	if err != nil {
		return err
	}
	path := dir
	if rel, err := filepath.Rel(outdir, dir); err == nil {
		path = rel
	}
	cfn := fn.Node().DefaultChild().(awscdk.CfnResource)
	cfn.AddMetadata(jsii.String(MetaAssetPath), path)
	cfn.AddMetadata(jsii.String(MetaAssetProperty), "Code")
	cfn.AddMetadata(jsii.String(MetaAssetBundled), true)
	return nil
}

// usesResumeSecret reports whether the function signs or verifies await
// resume tokens: submit serves the completion route (verifies), the
// worker runs await steps (signs). The sweeper only fails timed-out
// awaits and the dlq function only records dead letters: neither needs
// the secret.
func usesResumeSecret(name string) bool { return name == Submit || name == Worker }

// allow adds one statement to f's role.
func (f *function) allow(sid string, actions []string, resources ...*string) {
	f.role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:       jsii.String(sid),
		Actions:   jsii.Strings(actions...),
		Resources: &resources,
	}))
}

// grants writes f's policy: explicit actions on explicit resources.
//
// Every function boots with strict-startup=true, which describes every
// table and reads the attributes of the work, DLQ and item reject queues
// (shared/providers.strict), and writes its logs to its own log group. Beyond
// that:
//
//   - submit: execution rows created (PutItem inside TransactWriteItems),
//     read (status, result, duplicates) and updated (redrive, cancel,
//     await completion); key rows created and read; payload chunks written
//     and read; work items sent; the pending dead letter of a FAILED
//     execution published before it is re-driven; the list index queried
//     and its rows read (BatchGetItem) for GET /v1/executions and a bulk
//     re-drive's scan, whose job record and pages are items of the
//     execution table (PutItem, UpdateItem, GetItem); the dead-letter
//     table's tenant index queried for GET /v1/dead-letters.
//   - worker: execution rows read, claimed, renewed and committed; payload
//     chunks read and written; command steps' effect records created
//     (PutItem), read and transitioned (UpdateItem); work queue consumed
//     (and a record that is not due yet kept invisible until it is:
//     ChangeMessageVisibility) and next steps sent; dead-letter envelopes
//     and item rejects sent.
//   - sweeper: the sweep index queried; rows read (BatchGetItem) and
//     updated; work items and dead-letter envelopes sent. As the bulk re-drive jobs' driver: the active jobs and their
//     records read (GetItem, BatchGetItem) and checkpointed (UpdateItem),
//     a scan the submit function did not finish continued (the list index
//     queried, pages written: PutItem), executions re-driven.
//   - dlq: DLQ and poison queues consumed; dead-letter records written
//     and read; rows read and marked DLQ.
//   - history: the execution table's stream read (its event source
//     mapping polls with the function's role: the stream's four read
//     actions, ListStreams on the table's streams); history pages written
//     (PutItem); the failure records of batches it gives up on sent to the
//     history failure queue (the mapping's on-failure destination);
//     lifecycle events put (derived from the stream's row images: at
//     least once, a batch is retried until EventBridge took every entry).
//
// Submit also reads the history table (Query): the history route reads
// an execution's pages.
//
// Submit and worker read the await resume-token secret at boot
// (secretsmanager:GetSecretValue on that secret only); with an output
// bucket the worker writes objects into it (s3:PutObject only: the S3
// object store makes one PutObject per publish and never reads back).
func (b *builder) grants(f *function) {
	exec, payloads, dead, effects := b.tbl[ExecutionTableID], b.tbl[PayloadTableID], b.tbl[DeadLetterTableID], b.tbl[EffectTableID]
	hist := b.tbl[HistoryTableID]
	work, dlq, poison, rejects := b.queue[WorkQueueID], b.queue[DLQQueueID], b.queue[PoisonQueueID], b.queue[RejectQueueID]
	// The work queues: the work queue and, with the urgent lane, the
	// urgent one; whatever dispatches sends to both (the dispatcher routes
	// by priority) and the worker consumes both.
	workQueues := []*string{work.QueueArn()}
	if u, ok := b.queue[UrgentQueueID]; ok {
		workQueues = append(workQueues, u.QueueArn())
	}
	f.allow("WriteOwnLogs", []string{"logs:CreateLogStream", "logs:PutLogEvents"}, f.logs.LogGroupArn())
	f.allow("StrictStartupTables", []string{"dynamodb:DescribeTable"},
		exec.TableArn(), payloads.TableArn(), dead.TableArn(), effects.TableArn(), hist.TableArn())
	f.allow("StrictStartupQueues", []string{"sqs:GetQueueAttributes"}, append(slices.Clone(workQueues), dlq.QueueArn(), rejects.QueueArn())...)
	consume := []string{"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"}
	putEvents := func() {
		f.role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid:        jsii.String("PutLifecycleEvents"),
			Actions:    jsii.Strings("events:PutEvents"),
			Resources:  jsii.Strings(*b.bus.EventBusArn()),
			Conditions: &map[string]any{"StringEquals": map[string]any{"events:source": lifecycleEventSrc}},
		}))
	}
	if usesResumeSecret(f.name) {
		f.allow("ReadResumeTokenSecret", []string{"secretsmanager:GetSecretValue"}, b.secret.SecretArn())
	}
	if b.s.TracesToXRay() {
		// The X-Ray OTLP endpoint (tracing.exporter xray) authorizes
		// xray:PutSpans, and xray:PutSpansForIndexing for the share of
		// spans Transaction Search indexes; neither has resource-level
		// permissions.
		f.allow("ExportSpansToXRay", []string{"xray:PutSpans", "xray:PutSpansForIndexing"}, jsii.String("*"))
	}
	if f.name == Worker && b.output != nil {
		f.allow("PublishOutputs", []string{"s3:PutObject"}, b.output.ArnForObjects(jsii.String("*")))
	}
	switch f.name {
	case Submit:
		f.allow("ExecutionRows", []string{"dynamodb:BatchGetItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"}, exec.TableArn())
		f.allow("QueryListIndexes", []string{"dynamodb:Query"},
			jsii.String(*exec.TableArn()+"/index/"+schema.ListIndexName), jsii.String(*dead.TableArn()+"/index/"+schema.DeadLetterTenantIndexName))
		f.allow("Payloads", []string{"dynamodb:GetItem", "dynamodb:PutItem"}, payloads.TableArn())
		f.allow("QueryWaitIndex", []string{"dynamodb:Query"}, jsii.String(*exec.TableArn()+"/index/"+schema.WaitLineIndexName))
		f.allow("DispatchWork", []string{"sqs:SendMessage"}, workQueues...)
		f.allow("PublishDeadLetters", []string{"sqs:SendMessage"}, dlq.QueueArn())
		f.allow("ReadHistory", []string{"dynamodb:Query"}, hist.TableArn())
	case Worker:
		// BatchGetItem and PutItem: concurrency keys (a key's waiters, a
		// key's first item).
		f.allow("ExecutionRows", []string{"dynamodb:BatchGetItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"}, exec.TableArn())
		f.allow("QueryWaitIndex", []string{"dynamodb:Query"}, jsii.String(*exec.TableArn()+"/index/"+schema.WaitLineIndexName))
		f.allow("Payloads", []string{"dynamodb:GetItem", "dynamodb:PutItem"}, payloads.TableArn())
		f.allow("CommandEffects", []string{"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"}, effects.TableArn())
		f.allow("ConsumeWork", append(consume, "sqs:ChangeMessageVisibility"), workQueues...)
		f.allow("DispatchWork", []string{"sqs:SendMessage"}, workQueues...)
		f.allow("PublishDeadLetters", []string{"sqs:SendMessage"}, dlq.QueueArn())
		f.allow("PublishItemRejects", []string{"sqs:SendMessage"}, rejects.QueueArn())
	case Sweeper:
		f.allow("QueryDueWork", []string{"dynamodb:Query"},
			jsii.String(*exec.TableArn()+"/index/"+schema.DueIndexName))
		f.allow("QueryListIndex", []string{"dynamodb:Query"}, jsii.String(*exec.TableArn()+"/index/"+schema.ListIndexName))
		f.allow("QueryWaitIndex", []string{"dynamodb:Query"}, jsii.String(*exec.TableArn()+"/index/"+schema.WaitLineIndexName))
		f.allow("ExecutionRows", []string{"dynamodb:BatchGetItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"}, exec.TableArn())
		f.allow("DispatchWork", []string{"sqs:SendMessage"}, workQueues...)
		f.allow("PublishDeadLetters", []string{"sqs:SendMessage"}, dlq.QueueArn())
	case DLQ:
		f.allow("DeadLetterRecords", []string{"dynamodb:GetItem", "dynamodb:PutItem"}, dead.TableArn())
		f.allow("ExecutionRows", []string{"dynamodb:GetItem", "dynamodb:UpdateItem"}, exec.TableArn())
		f.allow("ConsumeDeadLetters", consume, dlq.QueueArn(), poison.QueueArn())
	case History:
		f.allow("ReadExecutionStream", []string{"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"}, exec.TableStreamArn())
		f.allow("ListExecutionStreams", []string{"dynamodb:ListStreams"}, jsii.String(*exec.TableArn()+"/stream/*"))
		f.allow("WriteHistory", []string{"dynamodb:PutItem"}, hist.TableArn())
		f.allow("ReportHistoryFailures", []string{"sqs:SendMessage"}, b.historyFailures.QueueArn())
		putEvents()
	}
}

// eventSources connects the queues to their consumers, reporting partial
// batch failures. The mappings are created without CDK's grants (which
// add sqs:ChangeMessageVisibility and sqs:GetQueueUrl): the roles already
// hold the three actions Lambda's SQS poller uses, and each mapping
// depends on its role's policy so that CloudFormation creates the policy
// first.
func (b *builder) eventSources() {
	add := func(f *function, id string, q awssqs.Queue, batch int, window time.Duration, maxConcurrency int) {
		opts := &awslambda.EventSourceMappingOptions{
			EventSourceArn:          q.QueueArn(),
			BatchSize:               jsii.Number(float64(batch)),
			ReportBatchItemFailures: jsii.Bool(true),
		}
		if window > 0 {
			opts.MaxBatchingWindow = seconds(window)
		}
		if maxConcurrency > 0 {
			opts.MaxConcurrency = jsii.Number(float64(maxConcurrency))
		}
		esm := f.fn.AddEventSourceMapping(jsii.String(id), opts)
		esm.Node().AddDependency(f.role)
		esm.Node().DefaultChild().(awscdk.CfnResource).OverrideLogicalId(jsii.String(id))
	}
	add(b.fn[Worker], "WorkerWorkQueueSource", b.queue[WorkQueueID], b.s.WorkerBatchSize, b.s.WorkerBatchingWindow, b.s.WorkerMaxConcurrency)
	if u, ok := b.queue[UrgentQueueID]; ok {
		// Its own mapping: urgent work never waits behind the work
		// queue's backlog, and its own concurrency cap.
		add(b.fn[Worker], UrgentSourceID, u, b.s.WorkerBatchSize, b.s.WorkerBatchingWindow, b.s.UrgentMaxConcurrency)
	}
	add(b.fn[DLQ], "DlqDlqQueueSource", b.queue[DLQQueueID], b.s.DLQBatchSize, 0, b.s.DLQMaxConcurrency)
	add(b.fn[DLQ], "DlqPoisonQueueSource", b.queue[PoisonQueueID], b.s.DLQBatchSize, 0, b.s.DLQMaxConcurrency)
	b.historySource()
}

// UrgentSourceID is the logical id of the worker function's event source
// mapping on the urgent work queue.
const UrgentSourceID = "WorkerUrgentQueueSource"

// HistorySourceID is the logical id of the history function's event
// source mapping on the execution table's stream.
const HistorySourceID = "HistoryExecutionStreamSource"

// historyRetries is how often the history event source retries a failed
// batch (halving it each time) before it sends the batch's failure
// record to the history failure queue.
const historyRetries = 10

// historySource connects the execution table's stream to the history
// function: from the oldest record (nothing written before the function
// was deployed is missed), batches of up to Settings.HistoryBatchSize
// gathered for Settings.HistoryBatchingWindow, the function reporting the
// first record to retry from (ReportBatchItemFailures); a batch that
// errs is split in halves (BisectBatchOnFunctionError) and retried up to
// historyRetries times, then its failure record goes to the history
// failure queue. One batch per shard at a time keeps each execution's
// records in order. Like the queue mappings it is created without CDK's
// grants (the role holds the stream's read actions and the failure
// queue's SendMessage) and depends on the role.
func (b *builder) historySource() {
	f := b.fn[History]
	opts := &awslambda.EventSourceMappingOptions{
		EventSourceArn:          b.tbl[ExecutionTableID].TableStreamArn(),
		StartingPosition:        awslambda.StartingPosition_TRIM_HORIZON,
		BatchSize:               jsii.Number(float64(b.s.HistoryBatchSize)),
		BisectBatchOnError:      jsii.Bool(true),
		RetryAttempts:           jsii.Number(historyRetries),
		ReportBatchItemFailures: jsii.Bool(true),
		ParallelizationFactor:   jsii.Number(1),
	}
	if b.s.HistoryBatchingWindow > 0 {
		opts.MaxBatchingWindow = seconds(b.s.HistoryBatchingWindow)
	}
	esm := f.fn.AddEventSourceMapping(jsii.String(HistorySourceID), opts)
	esm.Node().AddDependency(f.role)
	cfn := esm.Node().DefaultChild().(awscdk.CfnResource)
	cfn.OverrideLogicalId(jsii.String(HistorySourceID))
	cfn.AddPropertyOverride(jsii.String("DestinationConfig.OnFailure.Destination"), b.historyFailures.QueueArn())
}

// lambdaTarget is the sweeper's schedule target: a delivery older than one
// period is dropped (the next one sweeps anyway).
func lambdaTarget(fn awslambda.Function, rate time.Duration) awsevents.IRuleTarget {
	return awseventstargets.NewLambdaFunction(fn, &awseventstargets.LambdaFunctionProps{
		MaxEventAge:   seconds(max(rate, time.Minute)),
		RetryAttempts: jsii.Number(2),
	})
}

// stringMap converts env for jsii.
func stringMap(env map[string]string) *map[string]*string {
	m := make(map[string]*string, len(env))
	for k, v := range env {
		m[k] = jsii.String(v)
	}
	return &m
}
