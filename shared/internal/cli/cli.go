// Package cli is the client half of the qasync command line: pipelines,
// submit, status, result, input, watch, list, history, cancel, redrive
// and dead-letters against any deployment's HTTP API, through package client. server.Main
// dispatches these commands here (Handles says which arguments are ours).
//
// Output is a human table by default and JSON with -o json; errors go to
// stderr. Every server-supplied string printed as text goes through
// visible, which escapes what a terminal would act on. The exit codes (ExitOK ...) tell scripts a missing execution
// from a conflicting state from any other failure.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/qasync/qasync/shared/client"
)

// Exit codes of the client commands.
const (
	// ExitOK: the command did what it was asked.
	ExitOK = 0
	// ExitFailure: any other failure (the server unreachable, a 5xx, a
	// refused token or signature, a bad request the server refused).
	ExitFailure = 1
	// ExitUsage: the command line is wrong (unknown flag, missing argument).
	ExitUsage = 2
	// ExitNotFound: the execution (or pipeline, re-drive, route) does not
	// exist for this tenant (HTTP 404).
	ExitNotFound = 3
	// ExitConflict: the execution's state forbids the request (HTTP 409:
	// result before success, re-drive of a running execution, cancel of a
	// finished one, a version that moved).
	ExitConflict = 4
	// ExitNotSucceeded: watch saw the execution end FAILED, DLQ or
	// CANCELLED.
	ExitNotSucceeded = 5
	// ExitInterrupted: the command was interrupted (Ctrl-C).
	ExitInterrupted = 130
)

// exitCodesHelp documents the exit codes in every --help.
const exitCodesHelp = `Exit codes: 0 ok, 1 failure, 2 usage error, 3 not found (404), 4 conflict (409),
5 watch: the execution ended FAILED, DLQ or CANCELLED, 130 interrupted.
`

// Env is what the commands read and write: the process's streams and
// environment in production (OSEnv), buffers in tests.
type Env struct {
	// Stdin is read by submit --data @-.
	Stdin io.Reader
	// Stdout receives the output, Stderr the errors and hints.
	Stdout, Stderr io.Writer
	// Getenv reads an environment variable (QASYNC_URL, QASYNC_ADMIN_TOKEN,
	// QASYNC_ADMIN_TOKEN_FILE, and the AWS SDK's own, which it reads
	// itself).
	Getenv func(string) string
	// Terminal reports whether Stdout is a terminal: watch then rewrites
	// its progress lines in place. Nil means not a terminal.
	Terminal func() bool
	// HTTPClient, when set, sends the requests (tests).
	HTTPClient *http.Client
	// PollMin and PollMax bound watch's pause between status polls
	// (defaults 200 ms and 3 s).
	PollMin, PollMax time.Duration
}

// OSEnv is the Env of the process: its streams and environment, and a
// terminal check of stdout.
func OSEnv() Env {
	return Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv, Terminal: func() bool {
		fi, err := os.Stdout.Stat()
		return err == nil && fi.Mode()&os.ModeCharDevice != 0 && os.Getenv("TERM") != "dumb"
	}}
}

// globals are the flags every command takes, before or after its name.
type globals struct {
	url, tenant, output, sigv4, region string
	// adminToken and adminTokenFile are the flags --admin-token and
	// --admin-token-file (no default: session.adminToken reads the
	// environment's when neither is given).
	adminToken, adminTokenFile string
	timeout                    time.Duration
	version                    bool
}

// globalFlags are the names of the global flags (for Handles).
var globalFlags = []string{"url", "tenant", "admin-token", "admin-token-file", "o", "output", "sigv4", "region", "timeout", "version"}

// defaultGlobals are the global flags' defaults: the environment's
// QASYNC_* variables, else the built-in defaults.
func defaultGlobals(env Env) globals {
	def := func(name, fallback string) string {
		if v := env.Getenv(name); v != "" {
			return v
		}
		return fallback
	}
	return globals{url: def("QASYNC_URL", client.DefaultURL), tenant: def("QASYNC_TENANT", ""),
		output: "table", sigv4: def("QASYNC_SIGV4", "auto"), timeout: client.DefaultTimeout}
}

// register adds the global flags to fs, into g, with the defaults def.
func (g *globals) register(fs *flag.FlagSet, def globals) {
	fs.StringVar(&g.url, "url", def.url, "base URL of the API (env QASYNC_URL); an API Gateway URL is signed with SigV4")
	fs.StringVar(&g.tenant, "tenant", def.tenant, "tenant to send in X-Tenant-Id (servers with http.tenant-source=header; env QASYNC_TENANT)")
	fs.StringVar(&g.adminToken, "admin-token", def.adminToken, "operator token of qasync serve for cancel, redrive and input; other users can read it in the process list: prefer env QASYNC_ADMIN_TOKEN or --admin-token-file")
	fs.StringVar(&g.adminTokenFile, "admin-token-file", def.adminTokenFile, "read the operator token from this `file` (mode 0600; env QASYNC_ADMIN_TOKEN_FILE)")
	fs.StringVar(&g.output, "o", def.output, "output: table or json")
	fs.StringVar(&g.output, "output", def.output, "output: table or json")
	fs.StringVar(&g.sigv4, "sigv4", def.sigv4, "SigV4 signing: auto (API Gateway URLs only), always, never (env QASYNC_SIGV4)")
	fs.StringVar(&g.region, "region", def.region, "AWS region to sign for (default: the URL's, else AWS_REGION or the profile's)")
	fs.DurationVar(&g.timeout, "timeout", def.timeout, "timeout of each request")
	fs.BoolVar(&g.version, "version", def.version, "print the version and exit")
}

// Handles reports whether arg, the first argument of the command line,
// starts a client command: a command name or a global flag.
func Handles(arg string) bool {
	if _, ok := commandByName(arg); ok {
		return true
	}
	name, ok := strings.CutPrefix(arg, "-")
	if !ok {
		return false
	}
	name = strings.TrimPrefix(name, "-")
	name, _, _ = strings.Cut(name, "=")
	return slices.Contains(globalFlags, name)
}

// Version returns the binary's version line: module version, VCS
// revision and Go version, as recorded in the build.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "qasync (unknown version)"
	}
	rev, modified := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	v := "qasync " + bi.Main.Version
	if rev != "" {
		v += " " + rev[:min(12, len(rev))]
		if modified {
			v += "+modified"
		}
	}
	return v + " " + bi.GoVersion
}

// Usage writes the summary of the client commands (server.Main's usage
// includes it).
func Usage(w io.Writer) {
	fmt.Fprintln(w, "Client commands (against --url, env QASYNC_URL, default "+client.DefaultURL+"):")
	for _, c := range commands {
		fmt.Fprintf(w, "  qasync %s\n      %s\n", c.usage, c.summary)
	}
	fmt.Fprint(w, `
Global flags (before or after the command): --url, --tenant, --admin-token-file,
-o table|json, --sigv4 auto|always|never, --region, --timeout, --version.
The operator token: env QASYNC_ADMIN_TOKEN or --admin-token-file (--admin-token
shows it to every user of the machine). 'qasync COMMAND --help' describes a command.
`+exitCodesHelp)
}

// usageError is a wrong command line: exit code 2.
type usageError struct{ msg string }

// Error returns the message.
func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

// Main runs the client command of args (a command name or global flags
// first) and returns the exit code.
func Main(ctx context.Context, args []string, env Env) int {
	if env.Getenv == nil {
		env.Getenv = func(string) string { return "" }
	}
	if env.Stdin == nil {
		env.Stdin = strings.NewReader("")
	}
	// Global flags may come before the command name.
	var g globals
	pre := flag.NewFlagSet("qasync", flag.ContinueOnError)
	pre.SetOutput(io.Discard)
	g.register(pre, defaultGlobals(env))
	if err := pre.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			Usage(env.Stdout)
			return ExitOK
		}
		fmt.Fprintf(env.Stderr, "qasync: %v\n", flagError(err, pre, ""))
		Usage(env.Stderr)
		return ExitUsage
	}
	if g.version {
		fmt.Fprintln(env.Stdout, Version())
		return ExitOK
	}
	rest := pre.Args()
	if len(rest) == 0 {
		Usage(env.Stderr)
		return ExitUsage
	}
	cmd, ok := commandByName(rest[0])
	if !ok {
		fmt.Fprintf(env.Stderr, "qasync: %s\n", UnknownCommand(rest[0]))
		Usage(env.Stderr)
		return ExitUsage
	}
	return cmd.main(ctx, rest[1:], env, g)
}

// command is one client command.
type command struct {
	name    string
	usage   string // "status ID"
	summary string
	help    string // the long description
	// flags registers the command's own flags and returns the function
	// that runs it with its positional arguments.
	flags func(fs *flag.FlagSet) func(ctx context.Context, s *session, args []string) error
}

func commandByName(name string) (*command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return nil, false
}

// main parses the command's flags (interspersed with its arguments, the
// global flags among them) and runs it.
func (c *command) main(ctx context.Context, args []string, env Env, g globals) int {
	fs := flag.NewFlagSet("qasync "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	pre := g
	g.register(fs, pre) // what came before the command name is the default
	run := c.flags(fs)
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		c.printHelp(env.Stdout, fs)
		return ExitOK
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "qasync %s: %v\nusage: qasync %s (qasync %s --help)\n", c.name, flagError(err, fs, c.name), c.usage, c.name)
		return ExitUsage
	}
	if g.version {
		fmt.Fprintln(env.Stdout, Version())
		return ExitOK
	}
	s := &session{env: env, g: g, cmd: c.name}
	if s.g.output != "table" && s.g.output != "json" {
		return s.report(ctx, usagef("-o %q: want table or json", s.g.output))
	}
	return s.report(ctx, run(ctx, s, pos))
}

// parseInterspersed parses flags anywhere among the positional
// arguments, which it returns in order.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos, args = append(pos, args[0]), args[1:]
	}
}

// printHelp writes the command's --help: usage, description, its flags,
// the global flags and the exit codes.
func (c *command) printHelp(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: qasync %s\n\n%s\n", c.usage, strings.TrimSpace(c.help))
	var own, global strings.Builder
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == "output" {
			return // shown with -o
		}
		b := &own
		if slices.Contains(globalFlags, f.Name) {
			b = &global
		}
		name, usage := flag.UnquoteUsage(f)
		dash := "--"
		if len(f.Name) == 1 {
			dash = "-"
		}
		line := "  " + dash + f.Name
		if f.Name == "o" {
			line += ", --output"
		}
		if name != "" {
			line += " " + name
		}
		fmt.Fprintf(b, "%-30s %s", line, usage)
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.Name != "admin-token" {
			fmt.Fprintf(b, " (default %s)", f.DefValue)
		}
		b.WriteString("\n")
	})
	if own.Len() > 0 {
		fmt.Fprintf(w, "\nFlags:\n%s", own.String())
	}
	fmt.Fprintf(w, "\nGlobal flags:\n%s\n%s", global.String(), exitCodesHelp)
}

// session is one command's run: its environment, global flags and client.
type session struct {
	env Env
	g   globals
	cmd string
	c   *client.Client
	// warned are the warnings written (warnf writes each once).
	warned []string
}

// client builds the API client from the global flags.
func (s *session) client() (*client.Client, error) {
	if s.c != nil {
		return s.c, nil
	}
	sign, err := client.ParseSigning(s.g.sigv4)
	if err != nil {
		return nil, usagef("--sigv4 %q: want auto, always or never", s.g.sigv4)
	}
	hc := s.env.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: s.g.timeout}
	}
	opts := []client.Option{client.WithHTTPClient(hc), client.WithSigning(sign), client.WithUserAgent("qasync-cli/" + strings.TrimPrefix(Version(), "qasync "))}
	if s.g.tenant != "" {
		opts = append(opts, client.WithTenant(s.g.tenant))
	}
	if s.g.region != "" {
		opts = append(opts, client.WithRegion(s.g.region))
	}
	token, err := s.adminToken()
	if err != nil {
		return nil, err
	}
	if token != "" {
		opts = append(opts, client.WithAdminToken(token))
	}
	c, err := client.New(s.g.url, opts...)
	if err != nil {
		return nil, usagef("--url: %v", strings.TrimPrefix(err.Error(), "client: "))
	}
	if token != "" && slices.Contains(operatorCommands, s.cmd) && !c.Signs() {
		if u, err := url.Parse(c.BaseURL()); err == nil && u.Scheme == "http" && !loopback(u.Hostname()) {
			s.warnf("the admin token goes to %s over plain http: anyone on the way can read it; use https (or a loopback address)", u.Host)
		}
	}
	s.c = c
	return c, nil
}

// maxTokenFile bounds the admin token file read (a token is a line).
const maxTokenFile = 64 << 10

// adminToken returns the operator token: --admin-token (with a warning:
// the process list shows it to every user of the machine), else the
// content of --admin-token-file, else QASYNC_ADMIN_TOKEN, else the
// file QASYNC_ADMIN_TOKEN_FILE names; "" for none. Both flags at once
// are a usage error, as is a file that cannot be read or is empty.
func (s *session) adminToken() (string, error) {
	switch {
	case s.g.adminToken != "" && s.g.adminTokenFile != "":
		return "", usagef("--admin-token and --admin-token-file: give one")
	case s.g.adminToken != "":
		s.warnf("--admin-token on the command line is visible to other users of this machine (ps, /proc/<pid>/cmdline): prefer QASYNC_ADMIN_TOKEN or --admin-token-file")
		return s.g.adminToken, nil
	case s.g.adminTokenFile != "":
		return s.readTokenFile("--admin-token-file", s.g.adminTokenFile)
	case s.env.Getenv("QASYNC_ADMIN_TOKEN") != "":
		return s.env.Getenv("QASYNC_ADMIN_TOKEN"), nil
	case s.env.Getenv("QASYNC_ADMIN_TOKEN_FILE") != "":
		return s.readTokenFile("QASYNC_ADMIN_TOKEN_FILE", s.env.Getenv("QASYNC_ADMIN_TOKEN_FILE"))
	}
	return "", nil
}

// readTokenFile reads the token in path (surrounding white space
// dropped), warning when group or others may read the file.
func (s *session) readTokenFile(source, path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", usagef("%s: %v", source, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", usagef("%s: %v", source, err)
	}
	if perm := fi.Mode().Perm(); perm&0o044 != 0 {
		s.warnf("%s %s is readable by other users (mode %04o): chmod 600 %s", source, path, perm, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	switch {
	case err != nil:
		return "", usagef("%s: %v", source, err)
	case len(b) > maxTokenFile:
		return "", usagef("%s %s: larger than %d KiB, not a token", source, path, maxTokenFile>>10)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", usagef("%s %s is empty", source, path)
	}
	return token, nil
}

// loopback reports whether host (a URL's host name) is this machine:
// localhost, or a loopback address.
func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// warnf writes a warning to stderr, once per text.
func (s *session) warnf(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	if slices.Contains(s.warned, msg) {
		return
	}
	s.warned = append(s.warned, msg)
	fmt.Fprintf(s.env.Stderr, "qasync %s: warning: %s\n", s.cmd, visible(msg))
}

// json reports whether the output is JSON.
func (s *session) json() bool { return s.g.output == "json" }

// errNotSucceeded ends a watch whose execution did not succeed.
var errNotSucceeded = errors.New("the execution did not succeed")

// report writes err (if any) to stderr and returns the exit code.
func (s *session) report(ctx context.Context, err error) int {
	var ue *usageError
	var ce *client.Error
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, errNotSucceeded):
		return ExitNotSucceeded
	case errors.As(err, &ue):
		fmt.Fprintf(s.env.Stderr, "qasync %s: %s\nusage: %s (qasync %s --help)\n", s.cmd, visible(ue.msg), s.usage(), s.cmd)
		return ExitUsage
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		fmt.Fprintf(s.env.Stderr, "qasync %s: interrupted\n", s.cmd)
		return ExitInterrupted
	case errors.As(err, &ce):
		if s.json() {
			writeJSON(s.env.Stderr, ce.Problem)
		} else {
			fmt.Fprintf(s.env.Stderr, "qasync %s: %d %s", s.cmd, ce.StatusCode, visible(ce.Problem.Title))
			if ce.Problem.Detail != "" {
				fmt.Fprintf(s.env.Stderr, ": %s", visible(ce.Problem.Detail))
			}
			fmt.Fprintln(s.env.Stderr)
			if hint := s.hint(ce); hint != "" {
				fmt.Fprintf(s.env.Stderr, "hint: %s\n", hint)
			}
		}
		switch ce.StatusCode {
		case http.StatusNotFound:
			return ExitNotFound
		case http.StatusConflict:
			return ExitConflict
		}
		return ExitFailure
	}
	fmt.Fprintf(s.env.Stderr, "qasync %s: %s\n", s.cmd, visible(strings.TrimPrefix(err.Error(), "client: ")))
	if errors.Is(err, client.ErrResponseTooLarge) && s.cmd == "result" {
		fmt.Fprintln(s.env.Stderr, "hint: without -o json, result streams a result of any size")
	}
	return ExitFailure
}

func (s *session) usage() string {
	if c, ok := commandByName(s.cmd); ok {
		return "qasync " + c.usage
	}
	return "qasync"
}

// operatorCommands are the commands whose routes need the operator's
// authorization.
var operatorCommands = []string{"cancel", "redrive", "input"}

// hint explains the likely cause of some answers.
func (s *session) hint(e *client.Error) string {
	signed := s.c != nil && s.c.Signs()
	switch {
	case e.StatusCode == http.StatusNotFound && e.Problem.Kind() == "not-found" && slices.Contains(operatorCommands, s.cmd):
		return "the server has no such route: it predates the route, or it has no admin.token (operator routes are off without one)"
	case e.StatusCode == http.StatusNotFound && (e.Problem.Kind() == "not-found" || e.Problem.Type == "about:blank"):
		return "the server has no such route: it predates the route, or --url is not a qasync API"
	case e.StatusCode == http.StatusUnauthorized && !signed:
		return "pass the operator token in QASYNC_ADMIN_TOKEN or with --admin-token-file FILE"
	case e.StatusCode == http.StatusForbidden && signed:
		return "API Gateway refused the signed request: check the AWS credentials and region, and that the principal may execute-api:Invoke this route"
	}
	return ""
}
