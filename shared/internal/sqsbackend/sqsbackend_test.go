package sqsbackend_test

import (
	"testing"

	"github.com/qasync/qasync/shared/backendtest"
)

// TestConformance runs every seam's suite on the SQS provider (the local
// stack), each case on a fresh queue: the dispatcher with its poller, the
// DLQ publisher and the reject publisher.
func TestConformance(t *testing.T) {
	t.Parallel()
	backendtest.Exercise(t, backendtest.Provider{
		Dispatcher:  newDispatcher,
		DeadLetters: newDLQ,
		Rejects:     newRejects,
	})
}
