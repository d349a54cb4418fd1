package memory_test

import (
	"testing"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/store"
	"github.com/qasync/qasync/shared/store/storetest"
)

func TestStateStoreConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, c clock.Clock) store.Store { return memory.NewStateStore(c) })
}
