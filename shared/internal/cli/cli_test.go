package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/internal/cli"
	"github.com/qasync/qasync/shared/internal/clitest"
	"github.com/qasync/qasync/shared/store"
)

// result is one run of a command.
type result struct {
	code           int
	stdout, stderr string
}

// runner runs commands against a target as one tenant.
type runner struct {
	t        *testing.T
	tg       *clitest.Target
	tenant   string
	env      map[string]string
	terminal bool
	stdin    string
	requests atomic.Int64 // requests sent and answered (or failed)
	// loseAnswers makes every request reach the server and its answer
	// be lost on the way back (the connection dropped).
	loseAnswers atomic.Bool
	inputs      atomic.Int64 // numbers settle's inputs, so that none is a duplicate
	// reads records the history answers the commands got.
	reads historyLog
	// transport, when set, sends the requests instead of
	// http.DefaultTransport.
	transport http.RoundTripper
}

// historyLog records the history answers a runner's commands got: the
// cursor each request sent and the seqs of the events it got back.
type historyLog struct {
	mu    sync.Mutex
	reads []historyRead
}

// historyRead is one history request and its answer.
type historyRead struct {
	cursor string
	seqs   []int
}

func (l *historyLog) all() []historyRead {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]historyRead(nil), l.reads...)
}

// record notes a history answer, leaving its body readable.
func (l *historyLog) record(req *http.Request, resp *http.Response) error {
	if !strings.HasSuffix(req.URL.Path, "/history") || resp.StatusCode != http.StatusOK {
		return nil
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	if err != nil {
		return err
	}
	var h client.History
	if err := json.Unmarshal(b, &h); err != nil {
		return err
	}
	read := historyRead{cursor: req.URL.Query().Get("cursor")}
	for _, ev := range h.Events {
		read.seqs = append(read.seqs, ev.Seq)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reads = append(l.reads, read)
	return nil
}

func newRunner(t *testing.T, tg *clitest.Target) *runner {
	return &runner{t: t, tg: tg, tenant: regexp.MustCompile(`[^A-Za-z0-9._-]`).ReplaceAllString(t.Name(), "-"),
		env: map[string]string{"QASYNC_URL": tg.URL}}
}

// admin makes the runner send the target's admin token (QASYNC_ADMIN_TOKEN).
func (r *runner) admin() *runner {
	r.env["QASYNC_ADMIN_TOKEN"] = r.tg.AdminToken
	return r
}

// counting counts the requests it sends once their answers are in (or
// they failed), and loses the answers while lose is set.
type counting struct {
	next  http.RoundTripper
	n     *atomic.Int64
	lose  *atomic.Bool
	reads *historyLog
}

func (c counting) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	if err == nil {
		err = c.reads.record(req, resp)
	}
	c.n.Add(1)
	if err == nil && c.lose.Load() {
		resp.Body.Close()
		return nil, errors.New("connection reset by peer (the test lost the answer)")
	}
	return resp, err
}

// run runs `qasync --tenant <tenant> args...`.
func (r *runner) run(args ...string) result {
	r.t.Helper()
	var out, errOut bytes.Buffer
	next := r.transport
	if next == nil {
		next = http.DefaultTransport
	}
	env := cli.Env{Stdin: strings.NewReader(r.stdin), Stdout: &out, Stderr: &errOut,
		Getenv:     func(k string) string { return r.env[k] },
		Terminal:   func() bool { return r.terminal },
		HTTPClient: &http.Client{Timeout: 10 * time.Second, Transport: counting{next, &r.requests, &r.loseAnswers, &r.reads}},
		PollMin:    5 * time.Millisecond, PollMax: 50 * time.Millisecond}
	ctx, cancel := context.WithTimeout(r.t.Context(), 30*time.Second)
	defer cancel()
	code := cli.Main(ctx, append([]string{"--tenant", r.tenant}, args...), env)
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

// ok runs args and fails the test unless the exit code is 0.
func (r *runner) ok(args ...string) string {
	r.t.Helper()
	res := r.run(args...)
	if res.code != 0 {
		r.t.Fatalf("qasync %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), res.code, res.stdout, res.stderr)
	}
	return res.stdout
}

// want runs args and checks the exit code.
func (r *runner) want(code int, args ...string) result {
	r.t.Helper()
	res := r.run(args...)
	if res.code != code {
		r.t.Fatalf("qasync %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), res.code, code, res.stdout, res.stderr)
	}
	return res
}

// decode parses a command's JSON output.
func decode[T any](t *testing.T, out string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("output is not the JSON document: %v\n%s", err, out)
	}
	return v
}

// settle submits to pipeline and waits (with status) until the execution
// rests in want.
func (r *runner) settle(pipelineID string, want store.Status) client.Execution {
	r.t.Helper()
	data := fmt.Sprintf(`{"n":%d}`, r.inputs.Add(1))
	sub := decode[client.Submission](r.t, r.ok("submit", pipelineID, "--data", data, "-o", "json"))
	deadline := time.Now().Add(20 * time.Second)
	for {
		e := decode[client.Execution](r.t, r.ok("status", sub.ExecutionID, "-o", "json"))
		if e.Status == want {
			return e
		}
		// FAILED comes before DLQ (the dead letter is published, then
		// recorded on the row): only another terminal status is an end.
		if (e.Status.Terminal() && !(e.Status == store.Failed && want == store.DLQ)) || time.Now().After(deadline) {
			r.t.Fatalf("execution %s is %s, want %s", e.ExecutionID, e.Status, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// hasField fails the test unless a name-value table has a line with name
// and a value starting with value.
func hasField(t *testing.T, out, name, value string) {
	t.Helper()
	if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s+` + regexp.QuoteMeta(value)).MatchString(out) {
		t.Fatalf("table lacks %s %q:\n%s", name, value, out)
	}
}

// TestSubmitStatusResultCommands: submit (JSON text, @file, @- stdin,
// idempotent with --key), status as a table and as JSON, and result as
// the bytes themselves and as a JSON document, against the real server.
func TestSubmitStatusResultCommands(t *testing.T) {
	t.Parallel()
	r := newRunner(t, clitest.Real(t))
	out := r.ok("submit", clitest.PipelineOK, "--key", "order-7", "--data", `{"order":7}`)
	for _, want := range [][2]string{{"execution", ""}, {"pipeline", clitest.PipelineOK}, {"status", "QUEUED"}, {"duplicate", "false"}, {"submitted", "20"}} {
		hasField(t, out, want[0], want[1])
	}
	id := regexp.MustCompile(`execution\s+(\S+)`).FindStringSubmatch(out)[1]
	dup := decode[client.Submission](t, r.ok("submit", clitest.PipelineOK, "--key", "order-7", "--data", `{"order":7}`, "-o", "json"))
	if !dup.Duplicate || dup.ExecutionID != id {
		t.Fatalf("duplicate submit %+v, want %s", dup, id)
	}
	r.ok("watch", id)
	status := r.ok("status", id)
	for _, want := range [][2]string{{"execution", id}, {"status", "SUCCEEDED"}, {"step", "1 finish (attempt 1)"}, {"pipeline", "t.ok (version "}, {"version", ""}} {
		hasField(t, status, want[0], want[1])
	}
	if e := decode[client.Execution](t, r.ok("status", id, "-o", "json")); e.ExecutionID != id || e.Status != store.Succeeded {
		t.Fatalf("status -o json %+v", e)
	}
	if got := r.ok("result", id); got != `{"finished":true,"order":7,"prepared":true}` {
		t.Fatalf("result %q", got)
	}
	doc := decode[map[string]any](t, r.ok("result", id, "-o", "json"))
	if doc["data"].(map[string]any)["order"] != 7.0 || !strings.HasPrefix(doc["contentType"].(string), "application/json") {
		t.Fatalf("result -o json %v", doc)
	}

	file := filepath.Join(t.TempDir(), "in.json")
	if err := os.WriteFile(file, []byte(`{"order":8}`), 0o600); err != nil {
		t.Fatal(err)
	}
	fromFile := decode[client.Submission](t, r.ok("submit", clitest.PipelineOK, "--data", "@"+file, "-o", "json"))
	r.stdin = `{"order":9}`
	fromStdin := decode[client.Submission](t, r.ok("submit", clitest.PipelineOK, "--data", "@-", "-o", "json"))
	r.ok("watch", fromFile.ExecutionID)
	r.ok("watch", fromStdin.ExecutionID)
	if got := r.ok("result", fromFile.ExecutionID); !strings.Contains(got, `"order":8`) {
		t.Fatalf("result of the @file input %q", got)
	}
	if got := r.ok("result", fromStdin.ExecutionID); !strings.Contains(got, `"order":9`) {
		t.Fatalf("result of the @- input %q", got)
	}
}

// TestExitCodes: 3 for a missing execution or pipeline, 4 for a conflict,
// 5 for a watch that did not succeed, 1 for other failures (a refused
// token, an unreachable server, a refused body), 2 for usage errors; the
// problem goes to stderr (as JSON with -o json).
func TestExitCodes(t *testing.T) {
	t.Parallel()
	tg := clitest.Real(t)
	r := newRunner(t, tg)
	res := r.want(cli.ExitNotFound, "status", "no-such-execution")
	if !strings.Contains(res.stderr, "404 Execution not found") || res.stdout != "" {
		t.Fatalf("stderr %q stdout %q", res.stderr, res.stdout)
	}
	p := decode[client.Problem](t, r.want(cli.ExitNotFound, "status", "no-such-execution", "-o", "json").stderr)
	if p.Status != 404 || p.Kind() != "execution-not-found" {
		t.Fatalf("problem %+v", p)
	}
	r.want(cli.ExitNotFound, "submit", "no.such.pipeline")
	r.want(cli.ExitNotFound, "result", "no-such-execution")
	parked := r.settle(clitest.PipelineWait, store.WaitingExternal)
	res = r.want(cli.ExitConflict, "result", parked.ExecutionID)
	if !strings.Contains(res.stderr, "409") {
		t.Fatalf("stderr %q", res.stderr)
	}
	dlq := r.settle(clitest.PipelineFail, store.DLQ)
	res = r.want(cli.ExitNotSucceeded, "watch", dlq.ExecutionID)
	if !strings.Contains(res.stdout, "DLQ after") || !strings.Contains(res.stdout, clitest.ErrorCodeFail) {
		t.Fatalf("watch of a dead-lettered execution:\n%s", res.stdout)
	}
	res = r.want(cli.ExitFailure, "redrive", dlq.ExecutionID, "--reason", "no token")
	if !strings.Contains(res.stderr, "401") || !strings.Contains(res.stderr, "--admin-token") {
		t.Fatalf("stderr %q", res.stderr)
	}
	ok := r.settle(clitest.PipelineOK, store.Succeeded)
	r.admin().want(cli.ExitConflict, "redrive", ok.ExecutionID, "--reason", "again")
	r.want(cli.ExitFailure, "submit", clitest.PipelineOK, "--data", "{not json")
	r.want(cli.ExitFailure, "status", "x", "--url", "http://127.0.0.1:1")

	for _, args := range [][]string{
		{"status"}, {"status", "a", "b"}, {"status", "x", "--bogus"}, {"frobnicate"}, {"status", "x", "-o", "yaml"},
		{"list", "--status", "SLEEPING"}, {"list", "--limit", "-1"}, {"cancel", "x"}, {"redrive", "x"},
		{"redrive", "--filter", "color=blue", "--reason", "r"}, {"redrive", "--filter", "createdAfter=yesterday", "--reason", "r"},
		{"redrive", "x", "--filter", "status=DLQ", "--reason", "r"}, {"watch", "x", "--display", "fancy"},
		{"status", "x", "--sigv4", "sometimes"}, {"status", "x", "--url", "ftp://x"},
		{"status", "x", "--url", "https://a1b2c3.execute-api.eu-west-1.amazonaws.com", "--admin-token", "t"},
		{"submit", clitest.PipelineOK, "--data", "@/no/such/file"},
		{"pipelines", "a", "b"}, {"input"}, {"input", "a", "b"}, {"list", "--key", "k", "--status", "DLQ"},
		{"dead-letters", "--counts", "--outstanding"}, {"dead-letters", "--counts", "--page-size", "5"},
	} {
		res := r.run(args...)
		if res.code != cli.ExitUsage || (!strings.Contains(res.stderr, "usage: qasync") && !strings.Contains(res.stderr, "Client commands")) {
			t.Errorf("qasync %s: exit %d, want 2 with the usage\nstderr: %s", strings.Join(args, " "), res.code, res.stderr)
		}
	}
}

// TestGlobalFlagsAnywhere: the global flags work before the command name,
// after it, and from the environment, and --version prints the version.
func TestGlobalFlagsAnywhere(t *testing.T) {
	t.Parallel()
	tg := clitest.Real(t)
	r := newRunner(t, tg)
	e := r.settle(clitest.PipelineOK, store.Succeeded)
	r.env["QASYNC_URL"] = "http://127.0.0.1:1" // wrong: the flags below win
	for _, args := range [][]string{
		{"--url", tg.URL, "-o", "json", "status", e.ExecutionID},
		{"status", "--url", tg.URL, e.ExecutionID, "--output=json"},
		{"--url=" + tg.URL, "status", e.ExecutionID, "-o", "json"},
	} {
		if got := decode[client.Execution](t, r.ok(args...)); got.ExecutionID != e.ExecutionID {
			t.Fatalf("qasync %v: %+v", args, got)
		}
	}
	// The tenant is part of the request: another tenant's execution is unknown.
	r.want(cli.ExitNotFound, "--url", tg.URL, "status", e.ExecutionID, "--tenant", "someone-else")
	for _, args := range [][]string{{"--version"}, {"status", "--version"}} {
		if out := r.ok(args...); !strings.HasPrefix(out, "qasync ") {
			t.Fatalf("qasync %v: %q", args, out)
		}
	}
}

// TestHelpOfEveryCommand: --help (and -h) of every command exits 0 with
// its usage, its flags, the global flags and the exit codes on stdout.
func TestHelpOfEveryCommand(t *testing.T) {
	t.Parallel()
	r := newRunner(t, &clitest.Target{URL: "http://127.0.0.1:1"})
	for _, name := range []string{"pipelines", "submit", "status", "result", "input", "watch", "list", "history", "cancel", "redrive", "dead-letters"} {
		for _, flag := range []string{"--help", "-h"} {
			res := r.run(name, flag)
			if res.code != 0 || res.stderr != "" || !strings.HasPrefix(res.stdout, "usage: qasync "+name) ||
				!strings.Contains(res.stdout, "Global flags:") || !strings.Contains(res.stdout, "--url") ||
				!strings.Contains(res.stdout, "Exit codes: 0 ok, 1 failure, 2 usage error, 3 not found (404), 4 conflict (409)") {
				t.Errorf("qasync %s %s: exit %d\nstdout: %s\nstderr: %s", name, flag, res.code, res.stdout, res.stderr)
			}
		}
	}
	res := r.run("--help")
	if res.code != 0 || !strings.Contains(res.stdout, "qasync dead-letters") || !strings.Contains(res.stdout, "qasync pipelines [ID]") ||
		!strings.Contains(res.stdout, "qasync input ID") || !strings.Contains(res.stdout, "Exit codes") {
		t.Fatalf("qasync --help: exit %d\n%s", res.code, res.stdout)
	}
	if res := r.run(); res.code != cli.ExitUsage || !strings.Contains(res.stderr, "Client commands") {
		t.Fatalf("qasync with no command: exit %d\n%s", res.code, res.stderr)
	}
	for arg, want := range map[string]bool{"status": true, "dead-letters": true, "pipelines": true, "input": true, "--url": true, "--url=x": true, "-o": true,
		"--version": true, "serve": false, "keys": false, "--addr": false} {
		if cli.Handles(arg) != want {
			t.Errorf("Handles(%q) = %v", arg, !want)
		}
	}
}
