package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/store"
)

// TestStatusShowsTheRateLimit: status prints an execution's rate limit
// and key and, while it waits for its turn, until when; an execution
// without a limit prints neither line.
func TestStatusShowsTheRateLimit(t *testing.T) {
	until := time.Date(2026, 3, 1, 12, 0, 5, 0, time.UTC)
	var out bytes.Buffer
	printExecution(&out, client.Execution{ExecutionID: "x1", PipelineID: "orders", Status: store.Queued, Attempt: 1,
		RateLimit: "carrier", RateKey: "acct-7", RateLimitedUntil: until})
	text := out.String()
	for _, want := range []string{"rate limit", "carrier (key acct-7)", "rate limited until", ts(until)} {
		if !strings.Contains(text, want) {
			t.Errorf("status output lacks %q:\n%s", want, text)
		}
	}
	out.Reset()
	printExecution(&out, client.Execution{ExecutionID: "x2", PipelineID: "orders", Status: store.Queued, Attempt: 1})
	if strings.Contains(out.String(), "rate limit") {
		t.Errorf("an execution without a limit prints one:\n%s", out.String())
	}
}
