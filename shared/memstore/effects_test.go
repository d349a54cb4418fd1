package memstore_test

import (
	"testing"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/effect"
	"github.com/qasync/qasync/shared/effect/effecttest"
	"github.com/qasync/qasync/shared/memstore"
)

func TestEffectsConformance(t *testing.T) {
	effecttest.Run(t, func(t *testing.T, c clock.Clock) effect.Log { return memstore.NewEffects(c) })
}
