package stack

import (
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssnssubscriptions"
	"github.com/aws/jsii-runtime-go"
)

// Logical ids of the alarms.
const (
	DLQVisibleAlarmID        = "DlqQueueMessagesVisibleAlarm"
	PoisonVisibleAlarmID     = "PoisonQueueMessagesVisibleAlarm"
	OldestWorkAlarmID        = "WorkQueueOldestMessageAlarm"
	OldestUrgentAlarmID      = "UrgentQueueOldestMessageAlarm"
	WorkerErrorsAlarmID      = "WorkerErrorsAlarm"
	WorkerThrottlesAlarmID   = "WorkerThrottlesAlarm"
	DeadLetterRecordsAlarmID = "DeadLetterRecordsAlarm"
	HistoryFailuresAlarmID   = "HistoryFailuresAlarm"
	HistoryBehindAlarmID     = "HistoryIteratorAgeAlarm"
	AlarmTopicID             = "AlarmTopic"
)

// metricDeadLetterRecords is shared/lambdafn.MetricDeadLetterRecords, the
// dlq function's EMF counter of new dead-letter records (dimension Kind:
// execution or poison).
const metricDeadLetterRecords = "DeadLetterRecords"

// alarmSet holds the alarms and their optional topic.
type alarmSet struct {
	topic awssns.Topic
}

// alarms creates the CloudWatch alarms, and with Settings.AlarmEmail an
// encrypted SNS topic they notify.
//
//   - DLQ queue and poison queue: messages visible > 0. The dlq function
//     consumes both at once, so a visible message means it is failing or
//     throttled and dead letters are not being recorded.
//   - Work queue, and the urgent work queue with the urgent lane: age of
//     the oldest message above the threshold: workers are not keeping
//     up, or failing.
//   - Worker errors and throttles > 0 over 5 minutes.
//   - Dead-letter records > 0 (the dlq function's DeadLetterRecords EMF
//     metric, both kinds): an execution was dead-lettered or a work item
//     was poisoned.
//   - History failure queue: messages visible > 0 (a stream batch the
//     history function gave up on: its executions' histories miss those
//     writes until it is replayed); the history function's iterator age
//     above 5 minutes (histories fall behind the executions).
func (b *builder) alarms() {
	b.alarm = &alarmSet{}
	var action awscloudwatch.IAlarmAction
	if b.s.AlarmEmail != "" {
		key := awskms.NewKey(b.stack, jsii.String("AlarmTopicKey"), &awskms.KeyProps{
			Description:       jsii.String("qasync " + b.s.Stage + " alarm topic encryption"),
			EnableKeyRotation: jsii.Bool(true),
			RemovalPolicy:     b.removal(),
		})
		// CloudWatch publishes to the encrypted topic: it needs the key.
		key.AddToResourcePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid:        jsii.String("CloudWatchAlarmsPublish"),
			Principals: &[]awsiam.IPrincipal{awsiam.NewServicePrincipal(jsii.String("cloudwatch.amazonaws.com"), nil)},
			Actions:    jsii.Strings("kms:Decrypt", "kms:GenerateDataKey"),
			Resources:  jsii.Strings("*"), // in a key policy, "*" is this key
			Conditions: &map[string]any{"StringEquals": map[string]any{"aws:SourceAccount": awscdk.Aws_ACCOUNT_ID()}},
		}), nil)
		topic := awssns.NewTopic(b.stack, jsii.String(AlarmTopicID), &awssns.TopicProps{
			DisplayName: jsii.String("qasync " + b.s.Stage + " alarms"),
			MasterKey:   key,
			EnforceSSL:  jsii.Bool(true),
		})
		setLogicalID(topic, AlarmTopicID)
		topic.AddSubscription(awssnssubscriptions.NewEmailSubscription(jsii.String(b.s.AlarmEmail), nil))
		b.alarm.topic = topic
		action = awscloudwatchactions.NewSnsAction(topic)
	}
	minute := awscdk.Duration_Minutes(jsii.Number(1))
	five := awscdk.Duration_Minutes(jsii.Number(5))
	add := func(id, desc string, metric awscloudwatch.IMetric, threshold float64) {
		alarm := awscloudwatch.NewAlarm(b.stack, jsii.String(id), &awscloudwatch.AlarmProps{
			AlarmName:          jsii.String(b.s.Prefix + "-" + id),
			AlarmDescription:   jsii.String(desc),
			Metric:             metric,
			Threshold:          jsii.Number(threshold),
			EvaluationPeriods:  jsii.Number(1),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		})
		setLogicalID(alarm, id)
		if action != nil {
			alarm.AddAlarmAction(action)
			alarm.AddOkAction(action)
		}
	}
	maxOver := func(p awscdk.Duration) *awscloudwatch.MetricOptions {
		return &awscloudwatch.MetricOptions{Period: p, Statistic: jsii.String("Maximum")}
	}
	sumOver := func(p awscdk.Duration) *awscloudwatch.MetricOptions {
		return &awscloudwatch.MetricOptions{Period: p, Statistic: jsii.String("Sum")}
	}
	add(DLQVisibleAlarmID, "Dead-letter envelopes wait on the DLQ queue: the dlq function is failing or throttled.",
		b.queue[DLQQueueID].MetricApproximateNumberOfMessagesVisible(maxOver(minute)), 0)
	add(PoisonVisibleAlarmID, "Poisoned work items wait on the poison queue: the dlq function is failing or throttled.",
		b.queue[PoisonQueueID].MetricApproximateNumberOfMessagesVisible(maxOver(minute)), 0)
	add(OldestWorkAlarmID, "The oldest work item is older than the threshold: workers are not keeping up or failing.",
		b.queue[WorkQueueID].MetricApproximateAgeOfOldestMessage(maxOver(minute)), b.s.OldestMessageAlarm.Seconds())
	if u, ok := b.queue[UrgentQueueID]; ok {
		add(OldestUrgentAlarmID, "The oldest urgent work item is older than the threshold: the urgent lane's workers are not keeping up (its maximum concurrency?) or failing.",
			u.MetricApproximateAgeOfOldestMessage(maxOver(minute)), b.s.OldestMessageAlarm.Seconds())
	}
	add(WorkerErrorsAlarmID, "Worker invocations failed (a handler error, a crash or a timeout).",
		b.fn[Worker].fn.MetricErrors(sumOver(five)), 0)
	add(WorkerThrottlesAlarmID, "Worker invocations were throttled (reserved or account concurrency).",
		b.fn[Worker].fn.MetricThrottles(sumOver(five)), 0)
	add(HistoryFailuresAlarmID, "A stream batch of the execution table failed in the history function after every retry: the histories of its executions miss its writes (its shard and sequence numbers are in the message).",
		b.historyFailures.MetricApproximateNumberOfMessagesVisible(maxOver(minute)), 0)
	add(HistoryBehindAlarmID, "The history function is more than 5 minutes behind the execution table's stream: histories lag their executions.",
		b.fn[History].fn.Metric(jsii.String("IteratorAge"), maxOver(five)), (5*time.Minute).Seconds()*1000)
	kind := func(k string) awscloudwatch.IMetric {
		return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
			Namespace: jsii.String(b.s.MetricsNamespace), MetricName: jsii.String(metricDeadLetterRecords),
			DimensionsMap: &map[string]*string{"Kind": jsii.String(k)}, Statistic: jsii.String("Sum"), Period: five,
		})
	}
	add(DeadLetterRecordsAlarmID, "New dead-letter records: an execution was dead-lettered or a work item poisoned.",
		awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
			Expression:   jsii.String("FILL(execution, 0) + FILL(poison, 0)"),
			UsingMetrics: &map[string]awscloudwatch.IMetric{"execution": kind("execution"), "poison": kind("poison")},
			Label:        jsii.String("DeadLetterRecords"),
			Period:       five,
		}), 0)
}
