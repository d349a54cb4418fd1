// Package sqsbackend is the SQS provider: the work dispatcher
// (NewDispatcher) and its long-polling receiver (NewPoller), the
// dead-letter publisher (NewDLQ) and the item reject publisher
// (NewRejects), which send JSON envelopes with string message attributes
// (Send), and Consumer, an in-process stand-in for an SQS event source
// mapping. The dispatcher and both publishers pass the suites of package
// backendtest against the local SQS server (TestConformance).
package sqsbackend
