package cli_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/cli"
	"github.com/qasync/qasync/shared/internal/clitest"
	"github.com/qasync/qasync/shared/store"
)

// The commands of the operator routes (list, history, cancel, bulk
// re-drives, dead letters) against the real server.

// ids returns the executions' ids, in their order.
func ids(es []client.Execution) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.ExecutionID
	}
	return out
}

// listed fails the test unless es holds each of want exactly once and
// nothing else, newest first by creation millisecond (the list's order;
// executions created in the same millisecond come in the server's order).
func listed(t *testing.T, what string, es []client.Execution, want ...string) {
	t.Helper()
	if got := slices.Sorted(slices.Values(ids(es))); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Fatalf("%s: executions %v, want each of %v once", what, ids(es), want)
	}
	for i := 1; i < len(es); i++ {
		if es[i].CreatedAt.Truncate(time.Millisecond).After(es[i-1].CreatedAt.Truncate(time.Millisecond)) {
			t.Fatalf("%s: not newest first: %s created %v after %s created %v", what, es[i].ExecutionID, es[i].CreatedAt, es[i-1].ExecutionID, es[i-1].CreatedAt)
		}
	}
}

// TestListCommand: list follows the cursors (page by page), filters by
// pipeline and status, stops at --limit with the cursor that continues,
// and prints a table or the JSON page.
func TestListCommand(t *testing.T) {
	t.Parallel()
	r := newRunner(t, clitest.Real(t))
	var oks []string
	for range 5 {
		oks = append(oks, r.settle(clitest.PipelineOK, store.Succeeded).ExecutionID)
	}
	dlq := r.settle(clitest.PipelineFail, store.DLQ)
	everything := append(slices.Clone(oks), dlq.ExecutionID)

	before := r.requests.Load()
	all := decode[client.ExecutionPage](t, r.ok("list", "--limit", "0", "--page-size", "2", "-o", "json"))
	// Three full pages; a store may learn only at one more request that
	// the third was the last (DynamoDB answers a query that filled its
	// limit with a LastEvaluatedKey even when nothing follows, and which
	// list bucket an execution falls in is random).
	if n := r.requests.Load() - before; n != 3 && n != 4 {
		t.Fatalf("6 executions in pages of 2 took %d requests, want 3 (or 4, the last one empty)", n)
	}
	if all.NextCursor != "" {
		t.Fatalf("list of all: cursor %q", all.NextCursor)
	}
	listed(t, "list in pages of 2", all.Executions, everything...)
	first := decode[client.ExecutionPage](t, r.ok("list", "--limit", "4", "--page-size", "3", "-o", "json"))
	if len(first.Executions) != 4 || first.NextCursor == "" {
		t.Fatalf("list --limit 4: %d executions, cursor %q", len(first.Executions), first.NextCursor)
	}
	rest := decode[client.ExecutionPage](t, r.ok("list", "--limit", "0", "--cursor", first.NextCursor, "-o", "json"))
	listed(t, "list in two parts", append(first.Executions, rest.Executions...), everything...)
	ok := decode[client.ExecutionPage](t, r.ok("list", "--pipeline", clitest.PipelineOK, "--status", "succeeded,RUNNING", "-o", "json"))
	listed(t, "list --pipeline --status", ok.Executions, oks...)
	res := r.want(0, "list", "--status", "DLQ", "--limit", "1")
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	if len(lines) != 2 || !regexp.MustCompile(`^EXECUTION\s+PIPELINE\s+STATUS\s+STEP\s+ATTEMPT\s+CREATED\s+UPDATED\s+ERROR\s+FAN-OUT$`).MatchString(lines[0]) ||
		!regexp.MustCompile(`^`+dlq.ExecutionID+`\s+t\.fail\s+DLQ\s+0 work\s+1\s+20\S+\s+20\S+\s+`+clitest.ErrorCodeFail+`\s+-$`).MatchString(lines[1]) {
		t.Fatalf("list table:\n%s", res.stdout)
	}
}

// TestHistoryCommand: history prints the events in commit order as a
// table and as the JSON document; an unknown id exits 3.
func TestHistoryCommand(t *testing.T) {
	t.Parallel()
	r := newRunner(t, clitest.Real(t))
	e := r.settle(clitest.PipelineFail, store.DLQ)
	var h client.History
	clitest.Eventually(t, func() error {
		if h = decode[client.History](t, r.ok("history", e.ExecutionID, "-o", "json")); !slices.ContainsFunc(h.Events, func(ev client.Event) bool { return ev.Type == history.DeadLettered }) {
			return fmt.Errorf("no DEAD_LETTERED event yet: %+v", h.Events)
		}
		return nil
	})
	if h.ExecutionID != e.ExecutionID || len(h.Events) < 3 || h.Events[0].Type != history.Submitted || h.Events[0].Seq != 1 {
		t.Fatalf("history %+v", h)
	}
	if !slices.ContainsFunc(h.Events, func(ev client.Event) bool { return ev.Type == history.DeadLettered }) {
		t.Fatalf("no DEAD_LETTERED event: %+v", h.Events)
	}
	out := r.ok("history", e.ExecutionID)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(h.Events)+1 || !regexp.MustCompile(`^SEQ\s+AT\s+TYPE\s+STEP\s+ATTEMPT\s+STATUS\s+DETAIL$`).MatchString(lines[0]) ||
		!regexp.MustCompile(`^1\s+20\S+\s+SUBMITTED\s`).MatchString(lines[1]) || !strings.Contains(out, clitest.ErrorCodeFail+": ") {
		t.Fatalf("history table:\n%s", out)
	}
	r.want(cli.ExitNotFound, "history", "no-such-execution")
}

// TestHistoryCommandPages: history --limit N prints the first N events
// and on stderr the --cursor that continues; following those cursors
// prints every event of the history once, in order, as history without
// --limit prints them; -o json carries nextCursor (absent at the end)
// and endCursor, with which history later prints only newer events (none
// here). A bad --limit is a usage error, a cursor that names no event of
// the history a failure the server explains.
func TestHistoryCommandPages(t *testing.T) {
	t.Parallel()
	r := newRunner(t, clitest.Real(t))
	sub := decode[client.Submission](t, r.ok("submit", clitest.PipelineRetry, "-o", "json"))
	r.ok("watch", sub.ExecutionID, "-o", "json")
	var full client.History
	clitest.Eventually(t, func() error {
		if full = decode[client.History](t, r.ok("history", sub.ExecutionID, "-o", "json")); len(full.Events) == 0 || full.Events[len(full.Events)-1].Type != history.Succeeded {
			return fmt.Errorf("the history does not end SUCCEEDED yet: %+v", full.Events)
		}
		return nil
	})
	if len(full.Events) < 5 || full.NextCursor != "" || full.EndCursor == "" {
		t.Fatalf("the whole history of a retry: %d events, nextCursor %q, endCursor %q", len(full.Events), full.NextCursor, full.EndCursor)
	}

	res := r.want(0, "history", sub.ExecutionID, "--limit", "2")
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	more := regexp.MustCompile(`^\(more: add --cursor (\S+)\)$`).FindStringSubmatch(strings.TrimSpace(res.stderr))
	if len(lines) != 3 || !regexp.MustCompile(`^2\s+20\S+\s+STEP_STARTED\s`).MatchString(lines[2]) || more == nil {
		t.Fatalf("history --limit 2:\n%s\nstderr: %s", res.stdout, res.stderr)
	}
	var seqs []int
	cursor := ""
	for pages := 0; ; pages++ {
		args := []string{"history", sub.ExecutionID, "--limit", "2", "-o", "json"}
		if cursor != "" {
			args = append(args, "--cursor", cursor)
		}
		h := decode[client.History](t, r.ok(args...))
		if pages == 0 && h.NextCursor != more[1] {
			t.Fatalf("the JSON's nextCursor %q is not the table's --cursor %q", h.NextCursor, more[1])
		}
		if len(h.Events) > 2 || pages > len(full.Events) || (h.NextCursor != "" && h.NextCursor != h.EndCursor) {
			t.Fatalf("page %d: %+v", pages+1, h)
		}
		for _, ev := range h.Events {
			seqs = append(seqs, ev.Seq)
		}
		if h.NextCursor == "" {
			if h.EndCursor != full.EndCursor {
				t.Fatalf("the last page ends at %q, the whole history at %q", h.EndCursor, full.EndCursor)
			}
			break
		}
		cursor = h.NextCursor
	}
	for i, seq := range seqs {
		if seq != i+1 || i >= len(full.Events) {
			t.Fatalf("the pages gave seqs %v; the history has %d events", seqs, len(full.Events))
		}
	}
	if len(seqs) != len(full.Events) {
		t.Fatalf("the pages gave %d events; the history has %d", len(seqs), len(full.Events))
	}

	// After the end: nothing new, as a table (the header only) and as JSON.
	if out := strings.TrimSpace(r.ok("history", sub.ExecutionID, "--cursor", full.EndCursor)); strings.Contains(out, "\n") {
		t.Fatalf("history after its end cursor:\n%s", out)
	}
	if h := decode[client.History](t, r.ok("history", sub.ExecutionID, "--cursor", full.EndCursor, "-o", "json")); len(h.Events) != 0 || h.Events == nil || h.EndCursor != full.EndCursor {
		t.Fatalf("history after its end cursor: %+v", h)
	}

	r.want(cli.ExitUsage, "history", sub.ExecutionID, "--limit", "-1")
	if res := r.want(cli.ExitFailure, "history", sub.ExecutionID, "--cursor", "h1.999.0.999"); !strings.Contains(res.stderr, "cursor") {
		t.Fatalf("a cursor of no event of the history: %s", res.stderr)
	}
}

// TestCancelCommand: cancel of a parked execution prints it CANCELLED,
// a second cancel exits 0, a finished one exits 4, an unknown one 3, and
// without the operator token 1.
func TestCancelCommand(t *testing.T) {
	t.Parallel()
	tg := clitest.Real(t)
	anon, r := newRunner(t, tg), newRunner(t, tg).admin()
	parked := r.settle(clitest.PipelineWait, store.WaitingExternal)
	if res := anon.want(cli.ExitFailure, "cancel", parked.ExecutionID, "--reason", "no"); !strings.Contains(res.stderr, "401") {
		t.Fatalf("cancel without a token: %s", res.stderr)
	}
	hasField(t, r.ok("cancel", parked.ExecutionID, "--reason", "customer withdrew"), "status", "CANCELLED")
	if e := decode[client.Execution](t, r.ok("cancel", parked.ExecutionID, "--reason", "again", "-o", "json")); e.Status != store.Cancelled {
		t.Fatalf("second cancel %+v", e)
	}
	done := r.settle(clitest.PipelineOK, store.Succeeded)
	r.want(cli.ExitConflict, "cancel", done.ExecutionID, "--reason", "late")
	r.want(cli.ExitNotFound, "cancel", "no-such-execution", "--reason", "x")
	// watch of a cancelled execution ends at once, not succeeded.
	if res := r.want(cli.ExitNotSucceeded, "watch", parked.ExecutionID); !strings.Contains(res.stdout, "CANCELLED after") {
		t.Fatalf("watch of a cancelled execution:\n%s", res.stdout)
	}
}

// TestRedriveCommands: redrive ID re-drives one DLQ execution; redrive
// --filter --dry-run counts, --filter --wait re-drives and follows the
// progress until done, and redrive --status prints a job's progress; an
// unknown job exits 3.
func TestRedriveCommands(t *testing.T) {
	t.Parallel()
	r := newRunner(t, clitest.Real(t)).admin()
	one := r.settle(clitest.PipelineFail, store.DLQ)
	again := decode[client.Execution](t, r.ok("redrive", one.ExecutionID, "--reason", "one more try", "--expected-version",
		strconv.FormatInt(one.Version, 10), "-o", "json"))
	if again.ExecutionID != one.ExecutionID || again.Version <= one.Version {
		t.Fatalf("redrive %+v", again)
	}
	two := r.settle(clitest.PipelineFail, store.DLQ)
	r.settle(clitest.PipelineOK, store.Succeeded)
	// The re-driven one dead-letters again; wait for it.
	waitFor(t, r, one.ExecutionID, store.DLQ)

	filter := "pipelineId=" + clitest.PipelineFail + ",status=DLQ,errorCode=" + clitest.ErrorCodeFail +
		",createdAfter=" + one.CreatedAt.Add(-time.Minute).Format(time.RFC3339) + ",createdBefore=" + time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	dry := decode[client.BulkRedrive](t, r.ok("redrive", "--filter", filter, "--reason", "count", "--dry-run", "-o", "json"))
	if dry.Matched != 2 || dry.RedriveID == "" {
		t.Fatalf("dry run %+v", dry)
	}
	res := r.want(0, "redrive", "--filter", filter, "--reason", "fixed, OPS-9", "--rate", "20", "--wait")
	hasField(t, res.stdout, "matched", "2")
	hasField(t, res.stdout, "redriven", "2")
	hasField(t, res.stdout, "done", "true")
	id := regexp.MustCompile(`(?m)^redrive\s+(\S+)`).FindStringSubmatch(res.stdout)[1]
	p := decode[client.RedriveProgress](t, r.ok("redrive", "--status", id, "-o", "json"))
	if !p.Done || p.Matched != 2 || p.Redriven != 2 {
		t.Fatalf("redrive --status %+v", p)
	}
	// Both, re-driven, fail again: FAILED until their dead letter is
	// published, then DLQ. Once both are DLQ, no execution is FAILED.
	waitFor(t, r, one.ExecutionID, store.DLQ)
	waitFor(t, r, two.ExecutionID, store.DLQ)
	started := r.ok("redrive", "--filter", "status=FAILED", "--reason", "none")
	hasField(t, started, "matched", "0")
	r.want(cli.ExitNotFound, "redrive", "--status", "no-such-redrive")
	r.want(cli.ExitUsage, "redrive", "--status", id, "--reason", "x")
}

// TestBulkRedriveRetriedCommand: a bulk re-drive whose answer is lost
// prints its idempotency key; the same command again with --key answers
// the job the first one started (duplicate), not a second job; the key
// with another reason is refused (422, exit 1); --key is for a bulk
// re-drive only.
func TestBulkRedriveRetriedCommand(t *testing.T) {
	t.Parallel()
	r := newRunner(t, clitest.Real(t)).admin()
	r.settle(clitest.PipelineFail, store.DLQ)
	r.settle(clitest.PipelineFail, store.DLQ)
	filter := "pipelineId=" + clitest.PipelineFail + ",status=DLQ"
	r.loseAnswers.Store(true)
	lost := r.want(cli.ExitFailure, "redrive", "--filter", filter, "--reason", "fixed, OPS-11", "--rate", "50")
	m := regexp.MustCompile(`run the command again with --key (\S+)`).FindStringSubmatch(lost.stderr)
	if m == nil {
		t.Fatalf("a bulk re-drive whose answer was lost does not tell its key:\n%s", lost.stderr)
	}
	r.loseAnswers.Store(false)
	retried := decode[client.BulkRedrive](t, r.ok("redrive", "--filter", filter, "--reason", "fixed, OPS-11", "--rate", "50", "--key", m[1], "-o", "json"))
	if !retried.Duplicate || retried.Matched != 2 {
		t.Fatalf("the retried command: %+v; want the first command's job (duplicate), 2 matched", retried)
	}
	text := r.ok("redrive", "--filter", filter, "--reason", "fixed, OPS-11", "--rate", "50", "--key", m[1])
	hasField(t, text, "redrive", retried.RedriveID)
	hasField(t, text, "duplicate", "true")
	res := r.want(cli.ExitFailure, "redrive", "--filter", filter, "--reason", "another reason", "--key", m[1])
	if !strings.Contains(res.stderr, "422") || strings.Contains(res.stderr, "--key") {
		t.Fatalf("the key with another reason:\n%s", res.stderr)
	}
	r.want(cli.ExitUsage, "redrive", "some-id", "--reason", "x", "--key", "k")
}

// waitFor polls status until the execution is in want.
func waitFor(t *testing.T, r *runner, id string, want store.Status) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		if e := decode[client.Execution](t, r.ok("status", id, "-o", "json")); e.Status == want {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("execution %s never %s", id, want)
}

// TestDeadLettersCommand: dead-letters lists the tenant's records newest
// first with the step, reason and error, filters by pipeline, and follows
// cursors.
func TestDeadLettersCommand(t *testing.T) {
	t.Parallel()
	r := newRunner(t, clitest.Real(t))
	a := r.settle(clitest.PipelineFail, store.DLQ)
	b := r.settle(clitest.PipelineFail, store.DLQ)
	var page client.DeadLetterPage
	clitest.Eventually(t, func() error {
		if page = decode[client.DeadLetterPage](t, r.ok("dead-letters", "--pipeline", clitest.PipelineFail, "--page-size", "1", "-o", "json")); len(page.DeadLetters) < 2 {
			return fmt.Errorf("dead letters %+v, want two", page)
		}
		return nil
	})
	var got []string
	for i, d := range page.DeadLetters {
		got = append(got, d.ExecutionID)
		if d.PipelineID != clitest.PipelineFail || d.StepName != "work" || d.ErrorCode != clitest.ErrorCodeFail || d.TerminalReason != "non_retryable" ||
			(i > 0 && d.RecordedAt.Truncate(time.Millisecond).After(page.DeadLetters[i-1].RecordedAt.Truncate(time.Millisecond))) {
			t.Fatalf("dead letters (newest first) %+v", page)
		}
	}
	if slices.Sort(got); !slices.Equal(got, slices.Sorted(slices.Values([]string{a.ExecutionID, b.ExecutionID}))) || page.NextCursor != "" {
		t.Fatalf("dead letters %+v, want one of %s and one of %s", page, a.ExecutionID, b.ExecutionID)
	}
	out := r.ok("dead-letters")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !regexp.MustCompile(`^RECORDED\s+EXECUTION\s+PIPELINE\s+STEP\s+REASON\s+ERROR$`).MatchString(lines[0]) {
		t.Fatalf("dead-letters table:\n%s", out)
	}
	for _, d := range page.DeadLetters {
		row := regexp.MustCompile(`^` + regexp.QuoteMeta(ts(d.RecordedAt)) + `\s+` + d.ExecutionID + `\s+t\.fail\s+0 work\s+non_retryable\s+` + clitest.ErrorCodeFail + `: this step always fails$`)
		if !slices.ContainsFunc(lines[1:], row.MatchString) {
			t.Fatalf("dead-letters table has no line for %+v:\n%s", d, out)
		}
	}
	if p := decode[client.DeadLetterPage](t, r.ok("dead-letters", "--pipeline", clitest.PipelineOK, "-o", "json")); len(p.DeadLetters) != 0 {
		t.Fatalf("dead letters of t.ok %+v", p)
	}
}

// ts is the table's time format.
func ts(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }
