package cli_test

import (
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/internal/clitest"
	"github.com/qasync/qasync/shared/store"
)

// screen replays what a terminal shows for out: it understands the
// sequences watch's live display writes (cursor up "ESC[nA", carriage
// return, erase line "ESC[2K", newline) and returns the visible lines.
func screen(t *testing.T, out string) []string {
	t.Helper()
	var lines []string
	row := 0
	set := func(s string) {
		for len(lines) <= row {
			lines = append(lines, "")
		}
		lines[row] += s
	}
	up := regexp.MustCompile(`^\x1b\[(\d+)A`)
	for len(out) > 0 {
		switch {
		case strings.HasPrefix(out, "\x1b[2K"):
			for len(lines) <= row {
				lines = append(lines, "")
			}
			lines[row], out = "", out[4:]
		case up.MatchString(out):
			m := up.FindStringSubmatch(out)
			n, _ := strconv.Atoi(m[1])
			row, out = max(0, row-n), out[len(m[0]):]
		case out[0] == '\x1b':
			t.Fatalf("unexpected escape sequence %q", out[:min(8, len(out))])
		case out[0] == '\r':
			out = out[1:]
		case out[0] == '\n':
			row, out = row+1, out[1:]
		default:
			i := strings.IndexAny(out, "\x1b\r\n")
			if i < 0 {
				i = len(out)
			}
			set(out[:i])
			out = out[i:]
		}
	}
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// watchAwait runs watch on a PipelineWait execution, completes its await
// once the execution is parked, and returns watch's result: the watch
// sees the execution wait, then run its second step and succeed.
func watchAwait(t *testing.T, r *runner, args ...string) result {
	t.Helper()
	c, err := client.New(r.tg.URL, client.WithTenant(r.tenant))
	if err != nil {
		t.Fatal(err)
	}
	e := r.settle(clitest.PipelineWait, store.WaitingExternal)
	done := make(chan result, 1)
	before := r.requests.Load()
	go func() { done <- r.run(append([]string{"watch", e.ExecutionID}, args...)...) }()
	awaitID, token, err := r.tg.ResumeToken(e.ExecutionID)
	if err != nil {
		t.Fatal(err)
	}
	// Let watch see the parked execution first: its first answer is in.
	for seen := time.Now().Add(20 * time.Second); r.requests.Load() == before; time.Sleep(time.Millisecond) {
		if time.Now().After(seen) {
			t.Fatal("watch made no request")
		}
	}
	if _, err := c.CompleteAwait(t.Context(), e.ExecutionID, awaitID, token, []byte(`{"approved":true}`), ""); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-done:
		return res
	case <-time.After(20 * time.Second):
		t.Fatal("watch did not end")
	}
	return result{}
}

// progressLine is a plain progress line of watch.
var progressLine = regexp.MustCompile(`^20\S+Z\s+[A-Z_]+\s+step \d \w+\s+attempt \d`)

// inOrder fails the test unless each of want matches a line of lines, in
// this order (other lines possibly between).
func inOrder(t *testing.T, out string, lines []string, want ...string) {
	t.Helper()
	rest := lines
	for _, w := range want {
		re := regexp.MustCompile(w)
		i := slices.IndexFunc(rest, re.MatchString)
		if i < 0 {
			t.Fatalf("no line matching %s in order:\n%s", w, out)
		}
		rest = rest[i+1:]
	}
}

// TestWatchPipedPrintsPlainLines: piped (not a terminal), watch prints one
// plain line per history event, without escape sequences, then the
// outcome: the await step started, parked (AWAITING), its completion
// (AWAIT_COMPLETED) queued it to run again with the completion (started,
// succeeded), then the second step ran and the execution succeeded.
func TestWatchPipedPrintsPlainLines(t *testing.T) {
	t.Parallel()
	r := newRunner(t, clitest.Real(t))
	res := watchAwait(t, r)
	if res.code != 0 || strings.Contains(res.stdout, "\x1b") {
		t.Fatalf("exit %d, output %q", res.code, res.stdout)
	}
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	for _, l := range lines[:len(lines)-1] {
		if !progressLine.MatchString(l) {
			t.Fatalf("line %q is not a progress line:\n%s", l, res.stdout)
		}
	}
	if !strings.HasPrefix(lines[0], "20") || !strings.Contains(lines[0], "SUBMITTED") || !strings.HasPrefix(lines[len(lines)-1], "SUCCEEDED after ") {
		t.Fatalf("watch output:\n%s", res.stdout)
	}
	inOrder(t, res.stdout, lines,
		`SUBMITTED\s+step 0 approve\s+attempt 1$`,
		`STEP_STARTED\s+step 0 approve\s+attempt 1\s+worker \S+$`,
		`AWAITING\s+step 0 approve\s+attempt 1\s+worker \S+; reason: await \S+$`,
		`AWAIT_COMPLETED\s+step 0 approve\s+attempt 1\s+reason: await \S+ completed$`,
		`STEP_STARTED\s+step 0 approve\s+attempt 1`,
		`STEP_SUCCEEDED\s+step 0 approve\s+attempt 1`,
		`STEP_STARTED\s+step 1 finish\s+attempt 1`,
		`STEP_SUCCEEDED\s+step 1 finish\s+attempt 1`,
		`^20\S+\s+SUCCEEDED\s+step 1 finish\s+attempt 1$`,
	)
}

// TestWatchReadsOnlyNewEvents: watch keeps the history's cursor between
// its polls: it reads the history several times while the execution
// parks, resumes and succeeds, every read after the first sends the
// cursor where the last one ended, and together the reads got every
// event of the history exactly once (none fetched again).
func TestWatchReadsOnlyNewEvents(t *testing.T) {
	t.Parallel()
	r := newRunner(t, clitest.Real(t))
	res := watchAwait(t, r)
	if res.code != 0 {
		t.Fatalf("exit %d, output %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	reads := r.reads.all()
	if len(reads) < 2 {
		t.Fatalf("watch read the history %d times", len(reads))
	}
	var seqs []int
	for i, rd := range reads {
		if i > 0 && rd.cursor == "" {
			t.Fatalf("history read %d of %d sent no cursor: %+v", i+1, len(reads), reads)
		}
		seqs = append(seqs, rd.seqs...)
	}
	for i, seq := range seqs {
		if seq != i+1 {
			t.Fatalf("the reads got seqs %v, want each event once in order", seqs)
		}
	}
	// The last line before the outcome is the last event: all were read.
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	if len(lines)-1 != len(seqs) {
		t.Fatalf("watch printed %d events, its reads got %d:\n%s", len(lines)-1, len(seqs), res.stdout)
	}
}

// TestWatchWaitsForALaggingHistory: against a history that trails the
// status by a second (clitest.LaggingHistory, as a DynamoDB deployment's
// stream-fed one does), piped watch still prints every event, the
// terminal one included, before its outcome line.
func TestWatchWaitsForALaggingHistory(t *testing.T) {
	t.Parallel()
	r := newRunner(t, clitest.LaggingHistory(t, clitest.Real(t), time.Second))
	res := watchAwait(t, r)
	if res.code != 0 {
		t.Fatalf("exit %d, output %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	if !strings.HasPrefix(lines[len(lines)-1], "SUCCEEDED after ") {
		t.Fatalf("watch output:\n%s", res.stdout)
	}
	inOrder(t, res.stdout, lines,
		`SUBMITTED\s+step 0 approve\s+attempt 1$`,
		`AWAIT_COMPLETED\s+step 0 approve\s+attempt 1\s+reason: await \S+ completed$`,
		`STEP_SUCCEEDED\s+step 1 finish\s+attempt 1`,
		`^20\S+\s+SUCCEEDED\s+step 1 finish\s+attempt 1$`,
	)
}

// TestWatchWithoutHistoryPollsTheStatus: against a server without the
// history route (one that predates it; clitest.WithoutHistory), piped
// watch prints one plain line per change of the status document instead:
// the parked execution, the second step, the outcome; and a retry shows
// the WAIT_RETRY status with the error and the retry's due time.
func TestWatchWithoutHistoryPollsTheStatus(t *testing.T) {
	t.Parallel()
	r := newRunner(t, clitest.WithoutHistory(t, clitest.Real(t)))
	res := watchAwait(t, r)
	if res.code != 0 || strings.Contains(res.stdout, "\x1b") {
		t.Fatalf("exit %d, output %q", res.code, res.stdout)
	}
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	for _, l := range lines[:len(lines)-1] {
		if !progressLine.MatchString(l) {
			t.Fatalf("line %q is not a progress line:\n%s", l, res.stdout)
		}
	}
	if !regexp.MustCompile(`^20\S+\s+WAITING_EXTERNAL\s+step 0 approve\s+attempt 1$`).MatchString(lines[0]) ||
		!strings.Contains(res.stdout, "step 1 finish") || !strings.HasPrefix(lines[len(lines)-1], "SUCCEEDED after ") {
		t.Fatalf("watch output:\n%s", res.stdout)
	}
	sub := decode[client.Submission](t, r.ok("submit", clitest.PipelineRetry, "--data", `{"history":false}`, "-o", "json"))
	res = r.want(0, "watch", sub.ExecutionID)
	if !regexp.MustCompile(`(?m)^20\S+\s+WAIT_RETRY\s+step 0 work\s+attempt 2\s+`+clitest.ErrorCodeRetry+`: first attempts fail, retry at 20\S+$`).MatchString(res.stdout) ||
		!regexp.MustCompile(`(?m)^20\S+\s+SUCCEEDED\s+step 0 work\s+attempt 2$`).MatchString(res.stdout) {
		t.Fatalf("watch of a retry from status polls:\n%s", res.stdout)
	}
}

// TestWatchOnTerminalRewritesLinesInPlace: on a terminal (forced by the
// Env), watch draws one line per step and rewrites them in place: the
// output holds several drawings, and the screen they leave shows each
// step once, both succeeded, then the outcome. --display plain turns it
// off on a terminal, --display live on when piped.
func TestWatchOnTerminalRewritesLinesInPlace(t *testing.T) {
	t.Parallel()
	r := newRunner(t, clitest.Real(t))
	r.terminal = true
	res := watchAwait(t, r)
	if res.code != 0 || !strings.Contains(res.stdout, "\x1b[") || strings.Count(res.stdout, "0 approve") < 2 {
		t.Fatalf("exit %d, output %q", res.code, res.stdout)
	}
	got := screen(t, res.stdout)
	want := []*regexp.Regexp{
		regexp.MustCompile(`^execution \S+  pipeline t\.wait  SUCCEEDED$`),
		regexp.MustCompile(`^  ok 0 approve\s+SUCCEEDED\s+attempt 1`),
		regexp.MustCompile(`^  ok 1 finish\s+SUCCEEDED\s+attempt 1`),
		regexp.MustCompile(`^SUCCEEDED after `),
	}
	if len(got) != len(want) {
		t.Fatalf("screen has %d lines, want %d:\n%s\nraw: %q", len(got), len(want), strings.Join(got, "\n"), res.stdout)
	}
	for i, re := range want {
		if !re.MatchString(got[i]) {
			t.Fatalf("screen line %d %q does not match %s:\n%s", i, got[i], re, strings.Join(got, "\n"))
		}
	}

	if res := watchAwait(t, r, "--display", "plain"); res.code != 0 || strings.Contains(res.stdout, "\x1b") {
		t.Fatalf("--display plain on a terminal: exit %d, %q", res.code, res.stdout)
	}
	r.terminal = false
	if res := watchAwait(t, r, "--display", "live"); res.code != 0 || !strings.Contains(res.stdout, "\x1b[") {
		t.Fatalf("--display live when piped: exit %d, %q", res.code, res.stdout)
	}
}

// TestWatchJSONStreamsStatusDocuments: with -o json, watch prints each new
// status document as one JSON line, the last one terminal.
func TestWatchJSONStreamsStatusDocuments(t *testing.T) {
	t.Parallel()
	r := newRunner(t, clitest.Real(t))
	res := watchAwait(t, r, "-o", "json")
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	if res.code != 0 || len(lines) < 2 {
		t.Fatalf("exit %d, output %s", res.code, res.stdout)
	}
	var statuses []store.Status
	for _, l := range lines {
		var e client.Execution
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		statuses = append(statuses, e.Status)
	}
	if statuses[0] != store.WaitingExternal || statuses[len(statuses)-1] != store.Succeeded {
		t.Fatalf("statuses %v", statuses)
	}
}

// TestWatchUsesHistory: piped watch prints the execution's events
// (SUBMITTED, each step's start and success, SUCCEEDED) in commit order.
func TestWatchUsesHistory(t *testing.T) {
	t.Parallel()
	r := newRunner(t, clitest.Real(t))
	sub := decode[client.Submission](t, r.ok("submit", clitest.PipelineOK, "-o", "json"))
	out := r.ok("watch", sub.ExecutionID)
	var types []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(l); len(f) > 1 && strings.HasPrefix(f[0], "20") {
			types = append(types, f[1])
		}
	}
	// In this order, other events (a lease taken over) possibly between.
	want := []string{"SUBMITTED", "STEP_STARTED", "STEP_SUCCEEDED", "STEP_STARTED", "STEP_SUCCEEDED", "SUCCEEDED"}
	rest := types
	for _, w := range want {
		i := slices.Index(rest, w)
		if i < 0 {
			t.Fatalf("watch events %v, want %v in order:\n%s", types, want, out)
		}
		rest = rest[i+1:]
	}
	if types[0] != "SUBMITTED" || types[len(types)-1] != "SUCCEEDED" || !strings.Contains(out, "\nSUCCEEDED after ") {
		t.Fatalf("watch output:\n%s", out)
	}
}

// TestWatchShowsARetryThenClearsIt: a step that fails once and succeeds on
// its retry shows the failure and the retry's due time, and, once it
// succeeded, no more (piped: the STEP_FAILED event of attempt 1 with the
// error and the retry time, then attempt 2's start and success; on a
// terminal: the retry while it waits, and a final screen without it).
func TestWatchShowsARetryThenClearsIt(t *testing.T) {
	t.Parallel()
	r := newRunner(t, clitest.Real(t))
	for _, live := range []bool{false, true} {
		r.terminal = live
		sub := decode[client.Submission](t, r.ok("submit", clitest.PipelineRetry, "--data", `{"live":`+strconv.FormatBool(live)+`}`, "-o", "json"))
		res := r.want(0, "watch", sub.ExecutionID)
		if !live {
			lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
			inOrder(t, res.stdout, lines,
				`^20\S+\s+STEP_STARTED\s+step 0 work\s+attempt 1\s+worker \S+$`,
				`^20\S+\s+STEP_FAILED\s+step 0 work\s+attempt 1\s+`+clitest.ErrorCodeRetry+`: first attempts fail; retry at 20\S+; worker \S+$`,
				`^20\S+\s+STEP_STARTED\s+step 0 work\s+attempt 2\s+worker \S+$`,
				`^20\S+\s+STEP_SUCCEEDED\s+step 0 work\s+attempt 2\s+worker \S+$`,
				`^20\S+\s+SUCCEEDED\s+step 0 work\s+attempt 2$`,
				`^SUCCEEDED after `,
			)
			continue
		}
		if !strings.Contains(res.stdout, clitest.ErrorCodeRetry+": first attempts fail, retry at") {
			t.Fatalf("the live display never showed the retry: %q", res.stdout)
		}
		got := screen(t, res.stdout)
		if len(got) != 3 || !regexp.MustCompile(`^  ok 0 work\s+SUCCEEDED\s+attempt 2\s+\S+$`).MatchString(got[1]) {
			t.Fatalf("final screen:\n%s", strings.Join(got, "\n"))
		}
	}
}
