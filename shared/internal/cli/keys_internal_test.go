package cli

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/store"
)

// TestStatusShowsTheConcurrencyKey: status prints an execution's
// concurrency key and, while it is WAITING_KEY, since when it waits; list
// takes --status WAITING_KEY.
func TestStatusShowsTheConcurrencyKey(t *testing.T) {
	since := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var out bytes.Buffer
	printExecution(&out, client.Execution{ExecutionID: "x1", PipelineID: "orders", Status: store.WaitingKey, Attempt: 1,
		ConcurrencyKey: "cust-42", KeyWaitSince: since})
	text := out.String()
	for _, want := range []string{"WAITING_KEY", "concurrency key", "cust-42", "waiting for key since", ts(since)} {
		if !strings.Contains(text, want) {
			t.Errorf("status output lacks %q:\n%s", want, text)
		}
	}
	got, err := parseStatuses("--status", "WAITING_KEY,PAUSED")
	if err != nil || !slices.Equal(got, []store.Status{store.WaitingKey, store.Paused}) {
		t.Fatalf("parseStatuses = %v, %v", got, err)
	}
}
