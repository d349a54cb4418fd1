package cli

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/qasync/qasync/shared/internal/suggest"
)

// nearest returns the name of known closest to name, for a "did you
// mean" in the error of a mistyped command or flag: the one at the
// smallest edit distance (suggest.Distance; the first of known on a tie) when it
// is at most 1 for a name of up to 4 characters and 2 for a longer one,
// else the only name of known that starts with name (a flag cut short:
// --pipe for --pipeline), else "".
func nearest(name string, known []string) string {
	name = strings.ToLower(name)
	limit := 1
	if len([]rune(name)) > 4 {
		limit = 2
	}
	best, bestD := "", limit+1
	for _, k := range known {
		if d := suggest.Distance(name, k); d < bestD && d < len([]rune(k)) {
			best, bestD = k, d
		}
	}
	if best != "" {
		return best
	}
	var prefixed []string
	for _, k := range known {
		if len(name) >= 2 && strings.HasPrefix(k, name) && !slices.Contains(prefixed, k) {
			prefixed = append(prefixed, k)
		}
	}
	if len(prefixed) == 1 {
		return prefixed[0]
	}
	return ""
}

// UnknownCommand is the error text of an unknown command name: the
// client commands and others (server.Main's own: serve, keys, ...) are
// the names it suggests the nearest of.
func UnknownCommand(name string, others ...string) string {
	known := make([]string, 0, len(commands)+len(others))
	for _, c := range commands {
		known = append(known, c.name)
	}
	known = append(known, others...)
	msg := fmt.Sprintf("unknown command %q", name)
	if n := nearest(name, known); n != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", n)
	}
	return msg
}

// dashed is a flag name as written on a command line: -o, --url.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// undefinedFlag is the flag package's error for a flag it does not know.
const undefinedFlag = "flag provided but not defined: -"

// flagError rewrites the flag package's error of a flag fs does not
// define as "unknown flag --x", saying which other commands take the
// flag where some do, else the nearest flag fs defines; cmd is the
// command whose flags fs holds ("" before the command name, where fs has
// the global flags only). Other errors are returned as they are.
func flagError(err error, fs *flag.FlagSet, cmd string) error {
	name, ok := strings.CutPrefix(err.Error(), undefinedFlag)
	if !ok {
		return err
	}
	msg := "unknown flag " + dashed(name)
	if others := commandsWithFlag(name, cmd); len(others) > 0 {
		if cmd == "" {
			return fmt.Errorf("%s (a flag of %s: give it after the command name)", msg, strings.Join(others, ", "))
		}
		return fmt.Errorf("%s (a flag of %s, not of %s)", msg, strings.Join(others, ", "), cmd)
	}
	var known []string
	fs.VisitAll(func(f *flag.Flag) { known = append(known, f.Name) })
	if n := nearest(name, known); n != "" {
		return fmt.Errorf("%s (did you mean %s?)", msg, dashed(n))
	}
	return errors.New(msg)
}

// commandsWithFlag returns the client commands other than except whose
// own flags include name.
func commandsWithFlag(name, except string) []string {
	var out []string
	for _, c := range commands {
		fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
		c.flags(fs)
		if c.name != except && fs.Lookup(name) != nil {
			out = append(out, c.name)
		}
	}
	return out
}
