package cli_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/cli"
	"github.com/qasync/qasync/shared/internal/clitest"
	"github.com/qasync/qasync/shared/store"
)

// The hardening of issue 22: server text escaped before it reaches the
// terminal, the admin token only where the server needs it and never
// across a redirect, bounded answers, and suggestions for mistyped names.

// forge is what a hostile or broken server puts in every string it
// answers: a window title and a screen clear (ESC ... BEL, ESC [2J), a
// carriage return and newline that start a forged SUCCEEDED row, a tab,
// DEL, a C1 CSI and a right-to-left override.
const forge = "boom\x1b]0;pwned\x07\x1b[2J\r\nexec-2  t.ok  SUCCEEDED  \t\x7f\u009b31m\u202eevil"

// forgeShown is forge as the CLI prints it.
const forgeShown = `boom\x1b]0;pwned\x07\x1b[2J\r\nexec-2  t.ok  SUCCEEDED  \t\x7f\x9b31m\u202eevil`

var (
	fakeTime = time.Date(2026, 12, 1, 11, 45, 55, 0, time.UTC)
	// operatorRoutes are the routes the fake API wants the admin token on.
	operatorRoutes = []string{"POST /v1/executions/{id}/cancel", "POST /v1/executions/{id}/redrive", "POST /v1/redrives", "GET /v1/redrives/{id}",
		"GET /v1/inputs/{id}"}
)

// forgedPipeline is a pipeline description with forge in every string,
// its input schema's description too.
func forgedPipeline() client.Pipeline {
	schema, _ := json.Marshal(map[string]any{"type": "object", "description": forge})
	return client.Pipeline{PipelineID: forge, CurrentVersion: forge, Versions: []client.PipelineVersion{
		{Version: forge, Label: forge, Draining: true, Steps: []client.PipelineStep{{Name: forge, Kind: forge}}, InputSchema: schema}}}
}

// forgedExecution is a status document with forge in every string.
func forgedExecution(id string) client.Execution {
	return client.Execution{ExecutionID: id, PipelineID: "t.ok" + forge, PipelineVersion: forge, Status: store.DLQ, StepName: forge, Attempt: 1,
		Version: 3, CreatedAt: fakeTime, UpdatedAt: fakeTime.Add(time.Second),
		Error: &client.ExecutionError{Code: forge, Message: forge, TerminalReason: forge},
		Await: &client.Await{AwaitID: forge, Status: store.AwaitStatus(forge)}, CancelReason: forge, CancelRequestedAt: fakeTime,
		Parent: &client.ParentLink{ExecutionID: forge}}
}

// fakeAPI answers the API's routes with forged documents and records
// which requests carried an Authorization header.
type fakeAPI struct {
	srv  *httptest.Server
	mu   sync.Mutex
	auth map[string][]string // route pattern -> the Authorization of each request
}

func (f *fakeAPI) handler() http.Handler {
	mux := http.NewServeMux()
	send := func(pattern string, answer func(w http.ResponseWriter, r *http.Request) any) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			f.mu.Lock()
			f.auth[pattern] = append(f.auth[pattern], r.Header.Get("Authorization"))
			f.mu.Unlock()
			if slices.Contains(operatorRoutes, pattern) && r.Header.Get("Authorization") != "Bearer "+clitest.AdminToken {
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = w.Write([]byte(`{"type":"urn:qasync:problem:unauthorized","title":"Unauthorized","status":401}`))
				return
			}
			if v := answer(w, r); v != nil {
				b, _ := json.Marshal(v)
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write(b)
			}
		})
	}
	send("GET /v1/executions/{id}", func(w http.ResponseWriter, r *http.Request) any {
		switch r.PathValue("id") {
		case "conflict":
			b, _ := json.Marshal(client.Problem{Type: client.ProblemTypePrefix + "execution-not-succeeded", Title: forge, Status: 409, Detail: forge})
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write(b)
			return nil
		case "proxy":
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = w.Write([]byte(forge))
			return nil
		}
		return forgedExecution(r.PathValue("id"))
	})
	send("GET /v1/executions", func(http.ResponseWriter, *http.Request) any {
		return client.ExecutionPage{Executions: []client.Execution{forgedExecution(forge), forgedExecution("e-2")}, NextCursor: forge}
	})
	send("GET /v1/executions/{id}/history", func(_ http.ResponseWriter, r *http.Request) any {
		h := client.History{ExecutionID: r.PathValue("id"), Events: []client.Event{}, EndCursor: "end"}
		if r.URL.Query().Get("cursor") == "" {
			for i, typ := range []history.Type{history.Submitted, history.StepStarted, history.StepFailed, history.Redriven, history.DeadLettered, history.Type(forge)} {
				h.Events = append(h.Events, client.Event{Seq: i + 1, Type: typ, At: fakeTime, StepName: forge, Attempt: 1, Status: store.DLQ,
					Error: &client.EventError{Code: forge, Message: forge}, Worker: forge, Reason: forge})
			}
		}
		return h
	})
	send("GET /v1/executions/{id}/result", func(w http.ResponseWriter, _ *http.Request) any {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("line 1\tcell\n" + forge))
		return nil
	})
	send("GET /v1/dead-letters", func(http.ResponseWriter, *http.Request) any {
		return client.DeadLetterPage{DeadLetters: []client.DeadLetter{{ID: forge, ExecutionID: forge, PipelineID: forge, StepName: forge,
			TerminalReason: forge, ErrorCode: forge, ErrorMessage: forge, RecordedAt: fakeTime}}}
	})
	send("GET /v1/dead-letters/counts", func(http.ResponseWriter, *http.Request) any {
		return client.DeadLetterCounts{ByCode: map[string]int{"timeout": 1, forge: 3}, OutstandingByCode: map[string]int{forge: 1}, Scanned: 5000}
	})
	send("GET /v1/pipelines", func(http.ResponseWriter, *http.Request) any {
		return client.PipelineList{Pipelines: []client.Pipeline{forgedPipeline()}}
	})
	send("GET /v1/pipelines/{p}", func(http.ResponseWriter, *http.Request) any { return forgedPipeline() })
	send("GET /v1/inputs/{id}", func(w http.ResponseWriter, _ *http.Request) any {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set(client.InputContentTypeHeader, "text/plain")
		_, _ = w.Write([]byte("line 1\tcell\n" + forge))
		return nil
	})
	send("POST /v1/pipelines/{p}/executions", func(http.ResponseWriter, *http.Request) any {
		return client.Submission{ExecutionID: forge, PipelineID: forge, Status: store.Status(forge), SubmittedAt: fakeTime}
	})
	for _, p := range []string{"POST /v1/executions/{id}/cancel", "POST /v1/executions/{id}/redrive"} {
		send(p, func(_ http.ResponseWriter, r *http.Request) any { return forgedExecution(r.PathValue("id")) })
	}
	send("POST /v1/redrives", func(http.ResponseWriter, *http.Request) any {
		return client.BulkRedrive{RedriveID: forge, Matched: 2}
	})
	send("GET /v1/redrives/{id}", func(_ http.ResponseWriter, r *http.Request) any {
		return client.RedriveProgress{RedriveID: r.PathValue("id"), Matched: 2, Redriven: 2, Done: true}
	})
	return mux
}

// newFakeAPI starts a fake API on a loopback port.
func newFakeAPI(t *testing.T) *fakeAPI {
	f := &fakeAPI{auth: map[string][]string{}}
	f.srv = httptest.NewServer(f.handler())
	t.Cleanup(f.srv.Close)
	return f
}

// authorizations returns the Authorization headers the requests of each
// route carried, and forgets them.
func (f *fakeAPI) authorizations() map[string][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.auth
	f.auth = map[string][]string{}
	return a
}

// terminalSafe fails the test unless out holds nothing a terminal acts
// on but newlines: no other control character (C0, DEL, C1), no bidi
// control or line separator, no byte that is not UTF-8.
func terminalSafe(t *testing.T, what, out string) {
	t.Helper()
	for i, r := range out {
		if (r < 0x20 && r != '\n') || (r >= 0x7f && r < 0xa0) || unicode.Is(unicode.Bidi_Control, r) || r == '\u2028' || r == '\u2029' ||
			(r == utf8.RuneError && !strings.HasPrefix(out[i:], "\uFFFD")) {
			t.Errorf("%s: %U at byte %d reaches the terminal:\n%q", what, r, i, out)
			return
		}
	}
}

// noForgedRow fails the test when a line of out starts with the forged
// row, or when out does not show forge escaped.
func noForgedRow(t *testing.T, what, out string) {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "exec-2") {
			t.Errorf("%s: a forged row: %q", what, l)
		}
	}
	if !strings.Contains(out, forgeShown) {
		t.Errorf("%s: forge not shown escaped as %s:\n%s", what, forgeShown, out)
	}
}

// TestServerTextIsEscapedForTheTerminal: every command that prints
// server text (status, list, history, dead letters and their counts,
// pipelines and one pipeline with its input schema, watch piped and
// live, submit, cancel, re-drive, bulk re-drive and its progress, a
// problem's title and detail, a proxy's text answer, the continuation
// cursor, a result and an input on a terminal) prints its control characters escaped (\x1b, \n, \t, \x7f,
// \x9b, \u202e): nothing reaches the terminal that moves the cursor,
// starts a row or recolours; a table has one line per row.
func TestServerTextIsEscapedForTheTerminal(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t)
	r := newRunner(t, &clitest.Target{URL: f.srv.URL, AdminToken: clitest.AdminToken}).admin()
	for _, tc := range []struct {
		code int
		args []string
	}{
		{0, []string{"status", "e-1"}},
		{0, []string{"list", "--limit", "2"}},
		{0, []string{"history", "e-1"}},
		{0, []string{"dead-letters"}},
		{0, []string{"dead-letters", "--counts"}},
		{0, []string{"pipelines"}},
		{0, []string{"pipelines", "p"}},
		{cli.ExitNotSucceeded, []string{"watch", "e-1", "--display", "plain"}},
		{0, []string{"submit", "t.ok"}},
		{0, []string{"cancel", "e-1", "--reason", "r"}},
		{0, []string{"redrive", "e-1", "--reason", "r"}},
		{0, []string{"redrive", "--filter", "status=DLQ", "--reason", "r", "--wait"}},
		{0, []string{"redrive", "--filter", "status=DLQ", "--reason", "r"}},
		{0, []string{"redrive", "--status", forge}},
		{cli.ExitConflict, []string{"status", "conflict"}},
		{cli.ExitFailure, []string{"status", "proxy"}},
	} {
		what := strings.Join(tc.args, " ")
		res := r.want(tc.code, tc.args...)
		terminalSafe(t, what+" (stdout)", res.stdout)
		terminalSafe(t, what+" (stderr)", res.stderr)
		noForgedRow(t, what, res.stdout+res.stderr)
	}
	// One line per row, the header's and each execution's.
	if out := r.ok("list", "--limit", "2"); strings.Count(out, "\n") != 3 {
		t.Errorf("list: %d lines, want 3:\n%s", strings.Count(out, "\n"), out)
	}
	if res := r.run("list", "--limit", "2"); !strings.Contains(res.stderr, "(more: add --cursor "+forgeShown+")") {
		t.Errorf("list's cursor: %q", res.stderr)
	}

	// Live, on a terminal: only watch's own sequences (screen fails on
	// any other), and the lines it leaves are escaped.
	r.terminal = true
	res := r.want(cli.ExitNotSucceeded, "watch", "e-1")
	lines := screen(t, res.stdout)
	terminalSafe(t, "watch live", strings.Join(lines, "\n"))
	noForgedRow(t, "watch live", strings.Join(lines, "\n"))

	// A result on a terminal keeps its newlines and tabs and shows the
	// rest escaped; piped, it is the bytes as they are.
	if got, want := r.ok("result", "e-1"), "line 1\tcell\n"+`boom\x1b]0;pwned\x07\x1b[2J\r`+"\n"+`exec-2  t.ok  SUCCEEDED  `+"\t"+`\x7f\x9b31m\u202eevil`+"\n"; got != want {
		t.Errorf("result on a terminal:\n got %q\nwant %q", got, want)
	}
	if got, want := r.ok("input", "e-1"), "line 1\tcell\n"+`boom\x1b]0;pwned\x07\x1b[2J\r`+"\n"+`exec-2  t.ok  SUCCEEDED  `+"\t"+`\x7f\x9b31m\u202eevil`+"\n"; got != want {
		t.Errorf("input on a terminal:\n got %q\nwant %q", got, want)
	}
	r.terminal = false
	if got := r.ok("result", "e-1"); got != "line 1\tcell\n"+forge {
		t.Errorf("result piped: %q", got)
	}
	if got := r.ok("input", "e-1"); got != "line 1\tcell\n"+forge {
		t.Errorf("input piped: %q", got)
	}
}

// TestJSONOutputStaysExact: with -o json the documents carry the
// server's strings exactly (they decode to forge), as JSON whose bytes a
// terminal cannot act on: encoding/json escapes C0, and the CLI escapes
// DEL, C1 and bidi controls too (\u007f, \u009b, \u202e), which JSON
// reads as the same characters.
func TestJSONOutputStaysExact(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t)
	r := newRunner(t, &clitest.Target{URL: f.srv.URL, AdminToken: clitest.AdminToken}).admin()
	exact := func(what, out string, got func(string) string) {
		t.Helper()
		terminalSafe(t, what, out)
		if g := got(out); g != forge {
			t.Errorf("%s: decoded %q, want %q\n%s", what, g, forge, out)
		}
	}
	exact("status", r.ok("status", "e-1", "-o", "json"), func(out string) string { return decode[client.Execution](t, out).Error.Message })
	exact("list", r.ok("list", "--limit", "2", "-o", "json"), func(out string) string { return decode[client.ExecutionPage](t, out).Executions[0].ExecutionID })
	exact("history", r.ok("history", "e-1", "-o", "json"), func(out string) string { return decode[client.History](t, out).Events[0].Reason })
	exact("dead-letters", r.ok("dead-letters", "-o", "json"), func(out string) string { return decode[client.DeadLetterPage](t, out).DeadLetters[0].ErrorMessage })
	exact("cancel", r.ok("cancel", "e-1", "--reason", "r", "-o", "json"), func(out string) string { return decode[client.Execution](t, out).CancelReason })
	exact("bulk redrive", r.ok("redrive", "--filter", "status=DLQ", "--reason", "r", "-o", "json"), func(out string) string { return decode[client.BulkRedrive](t, out).RedriveID })
	exact("pipelines", r.ok("pipelines", "-o", "json"), func(out string) string {
		return decode[client.PipelineList](t, out).Pipelines[0].Versions[0].Steps[0].Name
	})
	exact("pipeline", r.ok("pipelines", "p", "-o", "json"), func(out string) string {
		var schema struct{ Description string }
		_ = json.Unmarshal(decode[client.Pipeline](t, out).Versions[0].InputSchema, &schema)
		return schema.Description
	})
	exact("dead-letter counts", r.ok("dead-letters", "--counts", "-o", "json"), func(out string) string {
		for code, n := range decode[client.DeadLetterCounts](t, out).ByCode {
			if n == 3 {
				return code
			}
		}
		return ""
	})
	exact("input", r.ok("input", "e-1", "-o", "json"), func(out string) string {
		return strings.TrimPrefix(string(decode[struct{ DataBase64 []byte }](t, out).DataBase64), "line 1\tcell\n")
	})
	res := r.want(cli.ExitNotSucceeded, "watch", "e-1", "-o", "json")
	exact("watch", res.stdout, func(out string) string {
		return decode[client.Execution](t, strings.TrimSpace(out)).Error.TerminalReason
	})
	res = r.want(cli.ExitConflict, "status", "conflict", "-o", "json")
	exact("problem", res.stderr, func(out string) string { return decode[client.Problem](t, out).Detail })
}

// TestAdminTokenOnlyOnOperatorCommands: with QASYNC_ADMIN_TOKEN set, the
// token goes on the operator routes the server checks it on (cancel,
// re-drive, bulk re-drive, its progress, an execution's input) and on no
// other read (pipelines, dead-letter counts ...) or submission.
func TestAdminTokenOnlyOnOperatorCommands(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t)
	r := newRunner(t, &clitest.Target{URL: f.srv.URL, AdminToken: clitest.AdminToken}).admin()
	for _, args := range [][]string{{"status", "e-1"}, {"list"}, {"history", "e-1"}, {"dead-letters"}, {"dead-letters", "--counts"}, {"result", "e-1"},
		{"submit", "t.ok"}, {"pipelines"}, {"pipelines", "p"}, {"input", "e-1"}, {"cancel", "e-1", "--reason", "r"}, {"redrive", "e-1", "--reason", "r"}, {"redrive", "--filter", "status=DLQ", "--reason", "r", "--wait"},
		{"redrive", "--status", "r-1"}} {
		r.ok(args...)
	}
	r.want(cli.ExitNotSucceeded, "watch", "e-1")
	for route, auths := range f.authorizations() {
		want := ""
		if slices.Contains(operatorRoutes, route) {
			want = "Bearer " + clitest.AdminToken
		}
		for _, a := range auths {
			if a != want {
				t.Errorf("%s: Authorization %q, want %q", route, a, want)
			}
		}
	}
}

// dialing is a transport that connects every request to addr, whatever
// its URL's host (a non-loopback name reaches the test's server).
func dialing(addr string, tr *http.Transport) *http.Transport {
	tr = tr.Clone()
	tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	return tr
}

// TestPlainHTTPTokenWarning: an operator command about to send the
// token over plain http to a host that is not loopback warns once on
// stderr (a bulk re-drive with --wait sends it many times); over https,
// to a loopback address, or for a command that sends no token, no
// warning.
func TestPlainHTTPTokenWarning(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t)
	tlsAPI := httptest.NewUnstartedServer(f.handler())
	tlsAPI.StartTLS()
	t.Cleanup(tlsAPI.Close)
	const warning = "over plain http"
	r := newRunner(t, &clitest.Target{URL: "http://ops.example.com:8080", AdminToken: clitest.AdminToken}).admin()
	r.transport = dialing(f.srv.Listener.Addr().String(), http.DefaultTransport.(*http.Transport))
	res := r.want(0, "redrive", "--filter", "status=DLQ", "--reason", "r", "--wait")
	if strings.Count(res.stderr, warning) != 1 || !strings.Contains(res.stderr, "ops.example.com:8080") {
		t.Errorf("bulk re-drive over plain http: stderr %q, want one warning", res.stderr)
	}
	if res := r.want(0, "status", "e-1"); strings.Contains(res.stderr, warning) {
		t.Errorf("status (no token sent): stderr %q", res.stderr)
	}
	for _, u := range []string{f.srv.URL, strings.Replace(f.srv.URL, "127.0.0.1", "localhost", 1)} {
		if res := r.want(0, "cancel", "e-1", "--reason", "r", "--url", u); strings.Contains(res.stderr, warning) {
			t.Errorf("cancel at %s: stderr %q", u, res.stderr)
		}
	}
	r.transport = dialing(tlsAPI.Listener.Addr().String(), tlsAPI.Client().Transport.(*http.Transport))
	if res := r.want(0, "cancel", "e-1", "--reason", "r", "--url", "https://example.com"); strings.Contains(res.stderr, warning) {
		t.Errorf("cancel over https: stderr %q", res.stderr)
	}
}

// TestAdminTokenSources: the token comes from QASYNC_ADMIN_TOKEN
// silently; from --admin-token-file (or QASYNC_ADMIN_TOKEN_FILE), its
// content without the final newline, with a warning when others may
// read the file; from --admin-token with a warning that the process list
// shows it. Both flags, an empty file or a missing one are usage errors
// and send nothing.
func TestAdminTokenSources(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t)
	dir := t.TempDir()
	private, shared, empty := filepath.Join(dir, "private"), filepath.Join(dir, "shared"), filepath.Join(dir, "empty")
	for path, mode := range map[string]os.FileMode{private: 0o600, shared: 0o644, empty: 0o600} {
		content := clitest.AdminToken + "\n"
		if path == empty {
			content = "\n"
		}
		if err := os.WriteFile(path, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil { // whatever the umask
			t.Fatal(err)
		}
	}
	cancel := []string{"cancel", "e-1", "--reason", "r"}
	for _, tc := range []struct {
		name    string
		env     map[string]string
		flags   []string
		code    int
		warning string // "" for none
	}{
		{"environment", map[string]string{"QASYNC_ADMIN_TOKEN": clitest.AdminToken}, nil, 0, ""},
		{"file", nil, []string{"--admin-token-file", private}, 0, ""},
		{"file from the environment", map[string]string{"QASYNC_ADMIN_TOKEN_FILE": private}, nil, 0, ""},
		{"file over the environment", map[string]string{"QASYNC_ADMIN_TOKEN": "wrong"}, []string{"--admin-token-file", private}, 0, ""},
		{"readable file", nil, []string{"--admin-token-file", shared}, 0, "is readable by other users (mode 0644): chmod 600 " + shared},
		{"flag", nil, []string{"--admin-token", clitest.AdminToken}, 0, "visible to other users of this machine"},
		{"both flags", nil, []string{"--admin-token", clitest.AdminToken, "--admin-token-file", private}, cli.ExitUsage, ""},
		{"empty file", nil, []string{"--admin-token-file", empty}, cli.ExitUsage, ""},
		{"missing file", nil, []string{"--admin-token-file", filepath.Join(dir, "none")}, cli.ExitUsage, ""},
	} {
		r := newRunner(t, &clitest.Target{URL: f.srv.URL})
		for k, v := range tc.env {
			r.env[k] = v
		}
		res := r.want(tc.code, append(slices.Clone(cancel), tc.flags...)...)
		if tc.warning != "" && strings.Count(res.stderr, tc.warning) != 1 {
			t.Errorf("%s: stderr %q, want the warning %q once", tc.name, res.stderr, tc.warning)
		}
		if tc.warning == "" && strings.Contains(res.stderr, "warning") {
			t.Errorf("%s: stderr %q, want no warning", tc.name, res.stderr)
		}
		auths := f.authorizations()["POST /v1/executions/{id}/cancel"]
		if tc.code == 0 && (len(auths) != 1 || auths[0] != "Bearer "+clitest.AdminToken) {
			t.Errorf("%s: the cancel carried %q", tc.name, auths)
		}
		if tc.code != 0 && len(auths) != 0 {
			t.Errorf("%s: a usage error sent %d requests", tc.name, len(auths))
		}
	}
}

// TestRedirectSendsNothingElsewhere: an API that redirects an operator
// call to another port gets an error naming the Location (exit 1), and
// the other port gets no request, so no token.
func TestRedirectSendsNothingElsewhere(t *testing.T) {
	t.Parallel()
	other := newFakeAPI(t)
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		http.Redirect(w, req, other.srv.URL+req.URL.Path, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirector.Close)
	r := newRunner(t, &clitest.Target{URL: redirector.URL, AdminToken: clitest.AdminToken}).admin()
	for _, args := range [][]string{{"cancel", "e-1", "--reason", "r"}, {"status", "e-1"}, {"result", "e-1"}} {
		res := r.want(cli.ExitFailure, args...)
		if !strings.Contains(res.stderr, "307 Temporary Redirect: the answer redirects to "+other.srv.URL+"/v1/executions/e-1") {
			t.Errorf("%v: stderr %q", args, res.stderr)
		}
	}
	if got := other.authorizations(); len(got) != 0 {
		t.Fatalf("the redirect target got requests: %v", got)
	}
}

// TestAnswersAreBounded: a document answer without end fails with a
// clear error instead of taking the memory; result -o json (which must
// hold the result) likewise, with a hint; result without -o json streams
// a result larger than the bound.
func TestAnswersAreBounded(t *testing.T) {
	t.Parallel()
	big := client.MaxDocumentBytes + 1<<20
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		chunk := []byte(strings.Repeat("x", 64<<10))
		if strings.HasPrefix(req.URL.Path, "/v1/executions/big/") {
			w.Header().Set("Content-Type", "application/octet-stream")
			for range big / len(chunk) {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		for req.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	r := newRunner(t, &clitest.Target{URL: srv.URL})
	res := r.want(cli.ExitFailure, "status", "e-1")
	if !strings.Contains(res.stderr, "response too large: GET /v1/executions/e-1: the 200 answer exceeds 16 MiB") {
		t.Errorf("status: stderr %q", res.stderr)
	}
	res = r.want(cli.ExitFailure, "result", "e-1", "-o", "json")
	if !strings.Contains(res.stderr, "response too large") || !strings.Contains(res.stderr, "without -o json, result streams") {
		t.Errorf("result -o json: stderr %q", res.stderr)
	}
	if out := r.ok("result", "big"); len(out) != big {
		t.Errorf("result: %d bytes, want %d", len(out), big)
	}
}

// TestUnknownNamesSuggestTheNearest: a mistyped flag of a command, a
// global flag, or a command name is a usage error naming the nearest
// known name; a flag of another command says whose it is; a name near
// nothing gets no suggestion.
func TestUnknownNamesSuggestTheNearest(t *testing.T) {
	t.Parallel()
	r := newRunner(t, &clitest.Target{URL: "http://127.0.0.1:1"})
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"list", "--pipelin", "p"}, "qasync list: unknown flag --pipelin (did you mean --pipeline?)"},
		{[]string{"list", "--pipe", "p"}, "unknown flag --pipe (did you mean --pipeline?)"},
		{[]string{"redrive", "--filter", "status=DLQ", "--reason", "r", "--dryrun"}, "unknown flag --dryrun (did you mean --dry-run?)"},
		{[]string{"history", "x", "--limt", "3"}, "unknown flag --limt (did you mean --limit?)"},
		{[]string{"status", "x", "--tenat", "t"}, "unknown flag --tenat (did you mean --tenant?)"},
		{[]string{"status", "x", "--admin-token-fil", "f"}, "unknown flag --admin-token-fil (did you mean --admin-token-file?)"},
		{[]string{"--urll", "http://x", "status", "x"}, "qasync: unknown flag --urll (did you mean --url?)"},
		{[]string{"--reason", "r", "cancel", "x"}, "unknown flag --reason (a flag of cancel, redrive, pause, resume: give it after the command name)"},
		{[]string{"list", "--reason", "r"}, "unknown flag --reason (a flag of cancel, redrive, pause, resume, not of list)"},
		{[]string{"--url", "http://x", "statsu", "x"}, `qasync: unknown command "statsu" (did you mean "status"?)`},
		{[]string{"--url", "http://x", "dead-letter"}, `unknown command "dead-letter" (did you mean "dead-letters"?)`},
		{[]string{"status", "x", "--bogus"}, "qasync status: unknown flag --bogus\n"},
		{[]string{"status", "x", "-x"}, "qasync status: unknown flag -x\n"},
		{[]string{"--url", "http://x", "frobnicate"}, `qasync: unknown command "frobnicate"` + "\n"},
		{[]string{"--url", "http://x", "pipeline"}, `unknown command "pipeline" (did you mean "pipelines"?)`},
		{[]string{"--url", "http://x", "inptu", "x"}, `unknown command "inptu" (did you mean "input"?)`},
		{[]string{"dead-letters", "--outstandin"}, "unknown flag --outstandin (did you mean --outstanding?)"},
		{[]string{"dead-letters", "--count"}, "unknown flag --count (did you mean --counts?)"},
		{[]string{"list", "--ky", "k"}, "unknown flag --ky (did you mean --key?)"},
		{[]string{"status", "x", "--key", "k"}, "unknown flag --key (a flag of submit, list, redrive, pause, resume, not of status)"},
		{[]string{"list", "--counts"}, "unknown flag --counts (a flag of dead-letters, not of list)"},
	} {
		res := r.want(cli.ExitUsage, tc.args...)
		if !strings.Contains(res.stderr, tc.want) {
			t.Errorf("qasync %s: stderr %q, want %q", strings.Join(tc.args, " "), res.stderr, tc.want)
		}
	}
	if got := cli.UnknownCommand("serv", "serve", "keys"); got != `unknown command "serv" (did you mean "serve"?)` {
		t.Errorf("UnknownCommand: %q", got)
	}
}
