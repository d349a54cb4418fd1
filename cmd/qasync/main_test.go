package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestMain runs the command itself when QASYNC_TEST_RUN_MAIN is set, so
// that a test can run the binary's main as a process of its own (the
// test binary with that variable and the command's arguments).
func TestMain(m *testing.M) {
	if os.Getenv("QASYNC_TEST_RUN_MAIN") == "1" {
		os.Args = append(os.Args[:1], strings.Fields(os.Getenv("QASYNC_TEST_ARGS"))...)
		main()
	}
	os.Exit(m.Run())
}

// TestUnknownCommandSuggestsTheNearest: a mistyped command name, a
// client command's or the server's own, exits 2 with the nearest name in
// the error; a name near none gets no suggestion.
func TestUnknownCommandSuggestsTheNearest(t *testing.T) {
	for args, want := range map[string]string{
		"statu":       `unknown command "statu" (did you mean "status"?)`,
		"deadletters": `unknown command "deadletters" (did you mean "dead-letters"?)`,
		"redrvie x":   `unknown command "redrvie" (did you mean "redrive"?)`,
		"serv":        `unknown command "serv" (did you mean "serve"?)`,
		"provison":    `unknown command "provison" (did you mean "provision"?)`,
		"frobnicate":  `unknown command "frobnicate"` + "\n",
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "QASYNC_TEST_RUN_MAIN=1", "QASYNC_TEST_ARGS="+args)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), want) {
			t.Errorf("qasync %s: %v\n%s\nwant %q", args, err, out, want)
		}
	}
}
