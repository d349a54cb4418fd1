// Package sqsbackend is the SQS provider: the work dispatcher
// (NewDispatcher) and its long-polling receiver (NewPoller), the
// dead-letter publisher (NewDLQ) and the item reject publisher
// (NewRejects), which send JSON envelopes with string message attributes
// (Send), and Consumer, an in-process stand-in for an SQS event source
// mapping. The dispatcher and both publishers pass the suites of package
// backendtest against the local SQS server (TestConformance).
//
// The urgent lane: with an urgent work queue (WithUrgentLane,
// PollerOptions.UrgentURL; config key queue.urgent-url) the dispatcher
// sends the work items of urgent executions (Urgent: priority 1 to
// priority.urgent-at) there, and the poller receives from it first, from
// the work queue at least every WorkEvery-th receive.
//
// Deferral is how both consumers of the work queue (the Lambda worker
// handler and the poller) hand back a work item that is not due yet
// without counting a receive towards the poison queue: as a fresh message
// delayed by up to 900 s, or, for a longer wait on a message's first
// receive, as the received message kept invisible for up to 12 h (one
// request and one receive for the whole wait instead of a fresh message
// every 15 minutes).
package sqsbackend
