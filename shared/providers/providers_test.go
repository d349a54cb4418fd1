package providers_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/providers"
)

func TestOpenRefusesProvidersThisBuildLacks(t *testing.T) {
	c := config.Default()
	c.StateProvider, c.DispatcherProvider, c.DLQProvider = "dynamo", "sqs", "sqs"
	c.QueueURL, c.DLQURL = "http://127.0.0.1:1/q", "http://127.0.0.1:1/d"
	_, err := providers.Open(c, &pipeline.Registry{}, slog.New(slog.DiscardHandler))
	if !errors.Is(err, providers.ErrNotImplemented) {
		t.Fatalf("err = %v, want ErrNotImplemented", err)
	}
	for _, key := range []string{"pipeline.orchestrator.state-provider", "pipeline.orchestrator.dispatcher-provider", "pipeline.orchestrator.dlq-provider"} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("error %q does not name %s", err, key)
		}
	}
}

func TestOpenRefusesInvalidConfig(t *testing.T) {
	c := config.Default()
	c.SweepLimit = 0
	if _, err := providers.Open(c, &pipeline.Registry{}, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "sweep-limit") {
		t.Fatalf("err = %v, want one naming sweep-limit", err)
	}
}

func TestOpenDefaultsMapConfig(t *testing.T) {
	c := config.Default()
	c.Lease, c.MaxRetries = 1234e6, 7
	reg, _ := pipeline.NewRegistry()
	set, err := providers.Open(c, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close(context.Background())
	got := set.Runtime.Config()
	if got.Lease != c.Lease || got.Retry.MaxRetries != 7 || got.InlineBudget != c.InlineBudgetBytes || string(got.IdempotencyPolicy) != c.IdempotencyPolicy {
		t.Fatalf("runtime config = %+v", got)
	}
}
