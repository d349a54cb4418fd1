package cli_test

import (
	"context"
	"encoding/json"
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
	if len(lines) != 2 || !regexp.MustCompile(`^EXECUTION\s+PIPELINE\s+STATUS\s+PRIORITY\s+STEP\s+ATTEMPT\s+CREATED\s+UPDATED\s+ERROR\s+FAN-OUT$`).MatchString(lines[0]) ||
		!regexp.MustCompile(`^`+dlq.ExecutionID+`\s+t\.fail\s+DLQ\s+3\s+0 work\s+1\s+20\S+\s+20\S+\s+`+clitest.ErrorCodeFail+`\s+-$`).MatchString(lines[1]) {
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
// first with the step, reason, the execution's status now, whether the
// record is outstanding, and the error; filters by pipeline, and follows
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
	if len(lines) != 3 || !regexp.MustCompile(`^RECORDED\s+EXECUTION\s+PIPELINE\s+STEP\s+REASON\s+NOW\s+OUTSTANDING\s+ERROR$`).MatchString(lines[0]) {
		t.Fatalf("dead-letters table:\n%s", out)
	}
	for _, d := range page.DeadLetters {
		row := regexp.MustCompile(`^` + regexp.QuoteMeta(ts(d.RecordedAt)) + `\s+` + d.ExecutionID + `\s+t\.fail\s+0 work\s+non_retryable\s+DLQ\s+yes\s+` + clitest.ErrorCodeFail + `: this step always fails$`)
		if !slices.ContainsFunc(lines[1:], row.MatchString) {
			t.Fatalf("dead-letters table has no line for %+v:\n%s", d, out)
		}
	}
	if p := decode[client.DeadLetterPage](t, r.ok("dead-letters", "--pipeline", clitest.PipelineOK, "-o", "json")); len(p.DeadLetters) != 0 {
		t.Fatalf("dead letters of t.ok %+v", p)
	}
}

// TestDeadLettersAfterARedrive: after a re-drive that failed again, the
// first record's execution is DLQ now (NOW) and the record is no longer
// outstanding, the second is; --outstanding lists the second only (table
// and JSON); --counts counts both records and the one outstanding by
// error code (table and the server's JSON document), of one pipeline
// with --pipeline; --counts with a listing flag is a usage error.
func TestDeadLettersAfterARedrive(t *testing.T) {
	t.Parallel()
	r := newRunner(t, clitest.Real(t)).admin()
	e := r.settle(clitest.PipelineFail, store.DLQ)
	clitest.Eventually(t, func() error {
		if p := decode[client.DeadLetterPage](t, r.ok("dead-letters", "-o", "json")); len(p.DeadLetters) != 1 {
			return fmt.Errorf("dead letters %+v, want one", p)
		}
		return nil
	})
	r.ok("redrive", e.ExecutionID, "--reason", "one more try")
	var page client.DeadLetterPage
	clitest.Eventually(t, func() error {
		if page = decode[client.DeadLetterPage](t, r.ok("dead-letters", "-o", "json")); len(page.DeadLetters) != 2 || page.DeadLetters[0].CurrentStatus != store.DLQ {
			return fmt.Errorf("dead letters %+v, want two, the execution DLQ again", page)
		}
		return nil
	})
	newer, older := page.DeadLetters[0], page.DeadLetters[1]
	if !newer.Outstanding || older.Outstanding || older.CurrentStatus != store.DLQ || older.CurrentVersion != newer.CurrentVersion {
		t.Fatalf("dead letters after a re-drive %+v", page)
	}
	out := r.ok("dead-letters")
	for _, d := range []struct {
		rec  client.DeadLetter
		want string
	}{{newer, "yes"}, {older, "no"}} {
		row := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(ts(d.rec.RecordedAt)) + `\s+` + e.ExecutionID + `\s+t\.fail\s+0 work\s+non_retryable\s+DLQ\s+` + d.want + `\s+` + clitest.ErrorCodeFail + `: `)
		if !row.MatchString(out) {
			t.Fatalf("dead-letters: no row of the record %s with NOW DLQ, OUTSTANDING %s:\n%s", d.rec.ID, d.want, out)
		}
	}
	only := decode[client.DeadLetterPage](t, r.ok("dead-letters", "--outstanding", "-o", "json"))
	if len(only.DeadLetters) != 1 || only.DeadLetters[0].ID != newer.ID {
		t.Fatalf("dead-letters --outstanding: %+v, want the record %s", only, newer.ID)
	}
	if lines := strings.Split(strings.TrimSpace(r.ok("dead-letters", "--outstanding")), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[1], ts(newer.RecordedAt)) {
		t.Fatalf("dead-letters --outstanding: %q", lines)
	}

	counts := r.ok("dead-letters", "--counts")
	if !regexp.MustCompile(`^CODE\s+RECORDS\s+OUTSTANDING\n` + clitest.ErrorCodeFail + `\s+2\s+1\n$`).MatchString(counts) {
		t.Fatalf("dead-letters --counts:\n%s", counts)
	}
	sameDocument(t, "dead-letters --counts", r.ok("dead-letters", "--counts", "-o", "json"), r.serverDocument("/v1/dead-letters/counts"))
	n := decode[client.DeadLetterCounts](t, r.ok("dead-letters", "--counts", "--pipeline", clitest.PipelineFail, "-o", "json"))
	if n.ByCode[clitest.ErrorCodeFail] != 2 || n.OutstandingByCode[clitest.ErrorCodeFail] != 1 || n.Scanned != 2 || !n.Complete {
		t.Fatalf("dead-letters --counts --pipeline %s: %+v", clitest.PipelineFail, n)
	}
	if out := r.ok("dead-letters", "--counts", "--pipeline", clitest.PipelineOK); !regexp.MustCompile(`^CODE\s+RECORDS\s+OUTSTANDING\n$`).MatchString(out) {
		t.Fatalf("dead-letters --counts of a pipeline without records:\n%s", out)
	}
	for _, flag := range [][]string{{"--outstanding"}, {"--limit", "5"}, {"--cursor", "c"}} {
		res := r.want(cli.ExitUsage, append([]string{"dead-letters", "--counts"}, flag...)...)
		if !strings.Contains(res.stderr, "--counts counts every record (of --pipeline): not with "+flag[0]) {
			t.Errorf("dead-letters --counts %s: %s", flag[0], res.stderr)
		}
	}
}

// TestDeadLettersGoneAndPartialCounts: a record whose execution's row is
// gone shows NOW "gone"; counts over fewer records than there are say of
// how many (what a real server shows only after a retention or 5,000
// records: a fake API answers them).
func TestDeadLettersGoneAndPartialCounts(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t)
	r := newRunner(t, &clitest.Target{URL: f.srv.URL})
	out := r.ok("dead-letters")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !regexp.MustCompile(`\s+gone\s+no\s+`).MatchString(lines[1]) {
		t.Fatalf("dead-letters of a gone execution:\n%s", out)
	}
	out = r.ok("dead-letters", "--counts")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !regexp.MustCompile(`^boom.*evil\s+3\s+1$`).MatchString(lines[1]) || !regexp.MustCompile(`^timeout\s+1\s+0$`).MatchString(lines[2]) ||
		lines[3] != "(of the newest 5000 records: there are more)" {
		t.Fatalf("dead-letters --counts, the most records first, not complete:\n%s", out)
	}
}

// TestInputCommand: input without the operator token is refused (401,
// with the hint); with it, it prints the bytes the execution was
// submitted with: piped exactly, on a terminal with control characters
// escaped and a final newline, as JSON the input document; an unknown
// execution exits 3. Its help says the route is the operator's and
// audited.
func TestInputCommand(t *testing.T) {
	t.Parallel()
	tg := clitest.Real(t)
	anon, r := newRunner(t, tg), newRunner(t, tg)
	r.tenant = anon.tenant
	r.admin()
	// JSON with a newline, a tab and a carriage return between its
	// tokens, and a DEL and a right-to-left override in a string.
	const input = "{\"a\":1,\n\t\"b\":\"x\x7fy\u202ez\"}\r"
	sub := decode[client.Submission](t, anon.ok("submit", clitest.PipelineOK, "--data", input, "-o", "json"))
	res := anon.want(cli.ExitFailure, "input", sub.ExecutionID)
	if !strings.Contains(res.stderr, "401") || !strings.Contains(res.stderr, "QASYNC_ADMIN_TOKEN") || res.stdout != "" {
		t.Fatalf("input without the token: stdout %q stderr %q", res.stdout, res.stderr)
	}
	if got := r.ok("input", sub.ExecutionID); got != input {
		t.Fatalf("input piped: %q, want %q", got, input)
	}
	r.terminal = true
	if got, want := r.ok("input", sub.ExecutionID), "{\"a\":1,\n\t\"b\":\"x\\x7fy\\u202ez\"}\\r\n"; got != want {
		t.Fatalf("input on a terminal: %q, want %q", got, want)
	}
	r.terminal = false
	doc := decode[struct {
		ContentType string          `json:"contentType"`
		Data        json.RawMessage `json:"data"`
	}](t, r.ok("input", sub.ExecutionID, "-o", "json"))
	var data map[string]any
	if err := json.Unmarshal(doc.Data, &data); err != nil || !strings.HasPrefix(doc.ContentType, "application/json") || data["b"] != "x\x7fy\u202ez" {
		t.Fatalf("input -o json: %+v (%v)", doc, err)
	}
	r.want(cli.ExitNotFound, "input", "no-such-execution")
	if help := r.ok("input", "--help"); !strings.Contains(help, "the server logs every input it serves") || !strings.Contains(help, "An operator route") {
		t.Fatalf("input --help does not say it is an audited operator route:\n%s", help)
	}
}

// ts is the table's time format.
func ts(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }
