package server_test

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/internal/clitest"
	"github.com/qasync/qasync/shared/server"
)

// mainOutput runs server.Main with args and returns its exit code and
// what it wrote to stdout. (Not parallel: it swaps os.Stdout.)
func mainOutput(t *testing.T, args ...string) (int, string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	read := make(chan string)
	go func() { b, _ := io.ReadAll(r); read <- string(b) }()
	code := server.Main(args, nil)
	os.Stdout = stdout
	w.Close()
	return code, <-read
}

// TestMainRunsTheClientCommands: server.Main, the qasync command line,
// hands the client commands, their global flags, `help COMMAND` and
// --version to the client commands, which talk to a running server.
func TestMainRunsTheClientCommands(t *testing.T) {
	tg := clitest.Real(t)
	c, err := client.New(tg.URL)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := c.Submit(context.Background(), client.SubmitRequest{PipelineID: clitest.PipelineOK, Body: []byte(`{"via":"main"}`)})
	if err != nil {
		t.Fatal(err)
	}
	code, out := mainOutput(t, "--url", tg.URL, "status", sub.ExecutionID, "-o", "json")
	var e client.Execution
	if code != 0 || json.Unmarshal([]byte(out), &e) != nil || e.ExecutionID != sub.ExecutionID {
		t.Fatalf("qasync status: exit %d, %q", code, out)
	}
	if code, _ := mainOutput(t, "status", "no-such-execution", "--url", tg.URL); code != 3 {
		t.Fatalf("qasync status of an unknown id: exit %d, want 3", code)
	}
	for _, tc := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"watch", "--help"}, 0, "usage: qasync watch ID"},
		{[]string{"help", "dead-letters"}, 0, "usage: qasync dead-letters"},
		{[]string{"--version"}, 0, "qasync "},
		{[]string{"version"}, 0, "qasync "},
		{[]string{"help"}, 0, "Client commands"},
		{[]string{"status"}, 2, ""},
	} {
		code, out := mainOutput(t, tc.args...)
		if code != tc.code || !strings.Contains(out, tc.out) {
			t.Errorf("qasync %s: exit %d, want %d; stdout %q", strings.Join(tc.args, " "), code, tc.code, out)
		}
	}
}
