package memory_test

import (
	"testing"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/effect"
	"github.com/qasync/qasync/shared/effect/effecttest"
	"github.com/qasync/qasync/shared/internal/memory"
)

func TestEffectsConformance(t *testing.T) {
	effecttest.Run(t, func(t *testing.T, c clock.Clock) effect.Log { return memory.NewEffects(c) })
}
