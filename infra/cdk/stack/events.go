package stack

// EventsDir is the repository's directory of example events, relative to
// infra/cdk (the CDK module's root).
const EventsDir = "../../events"

// EventTargets maps each example event in events/ to the logical id of the
// function it is for: `sam local invoke <id> -e events/<file>` (see
// docs/deployment.md's Deploy section). TestEventTargets checks that every file in
// events/ is listed with a function of the template and the right event
// shape, and that every function has at least one event.
var EventTargets = map[string]string{
	"submit-post.json":          SubmitFunctionID,
	"status-get.json":           SubmitFunctionID,
	"result-get.json":           SubmitFunctionID,
	"history-get.json":          SubmitFunctionID,
	"worker-sqs-batch.json":     WorkerFunctionID,
	"sweeper-schedule.json":     SweeperFunctionID,
	"dlq-envelope.json":         DLQFunctionID,
	"dlq-poison-item.json":      DLQFunctionID,
	"history-stream-batch.json": HistoryFunctionID,
}
