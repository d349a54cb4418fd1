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
	go func() { done <- r.run(append([]string{"watch", e.ExecutionID}, args...)...) }()
	awaitID, token, err := r.tg.ResumeToken(e.ExecutionID)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // let watch see the parked execution first
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

// TestWatchPipedPrintsPlainLines: piped (not a terminal), watch prints one
// plain line per change, without escape sequences (here from status polls:
// the real server has no history yet), then the outcome.
func TestWatchPipedPrintsPlainLines(t *testing.T) {
	t.Parallel()
	r := newRunner(t, clitest.Real(t))
	res := watchAwait(t, r)
	if res.code != 0 || strings.Contains(res.stdout, "\x1b") {
		t.Fatalf("exit %d, output %q", res.code, res.stdout)
	}
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	line := regexp.MustCompile(`^20\S+Z\s+[A-Z_]+\s+step \d \w+\s+attempt \d`)
	for _, l := range lines[:len(lines)-1] {
		if !line.MatchString(l) {
			t.Fatalf("line %q is not a progress line:\n%s", l, res.stdout)
		}
	}
	if !strings.Contains(lines[0], "WAITING_EXTERNAL") || !strings.Contains(lines[0], "step 0 approve") ||
		!strings.HasPrefix(lines[len(lines)-1], "SUCCEEDED after ") {
		t.Fatalf("watch output:\n%s", res.stdout)
	}
	if !strings.Contains(res.stdout, "step 1 finish") {
		t.Fatalf("watch never showed the second step:\n%s", res.stdout)
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

// TestWatchUsesHistory: where the server has the history route, piped
// watch prints the execution's events (SUBMITTED, each step's start and
// success, SUCCEEDED) in commit order.
func TestWatchUsesHistory(t *testing.T) {
	t.Parallel()
	r := newRunner(t, clitest.Operator(t))
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
// its retry shows the failure and the retry's due time while it waits,
// and, once it succeeded, neither (piped: a WAIT_RETRY line with the
// error, then the success; on a terminal: the final screen without it).
func TestWatchShowsARetryThenClearsIt(t *testing.T) {
	t.Parallel()
	r := newRunner(t, clitest.Real(t))
	for _, live := range []bool{false, true} {
		r.terminal = live
		sub := decode[client.Submission](t, r.ok("submit", clitest.PipelineRetry, "--data", `{"live":`+strconv.FormatBool(live)+`}`, "-o", "json"))
		res := r.want(0, "watch", sub.ExecutionID)
		if !live {
			if !regexp.MustCompile(`(?m)^20\S+\s+WAIT_RETRY\s+step 0 work\s+attempt 2\s+`+clitest.ErrorCodeRetry+`: first attempts fail, retry at 20`).MatchString(res.stdout) ||
				!regexp.MustCompile(`(?m)^20\S+\s+SUCCEEDED\s+step 0 work\s+attempt 2$`).MatchString(res.stdout) {
				t.Fatalf("piped watch of a retry:\n%s", res.stdout)
			}
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
