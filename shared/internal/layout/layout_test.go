package layout

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// module is the module path.
const module = "github.com/qasync/qasync"

// examples is the import path of the example pipelines; it and every
// package under it are what the rule keeps out of the library.
const examples = module + "/pipelines"

// allowed are the trees that may import the examples: the examples
// themselves, and the binaries and example programs that serve them.
var allowed = []string{module + "/pipelines", module + "/functions", module + "/cmd", module + "/examples"}

// listed is the part of `go list -json` output the rule reads.
type listed struct {
	ImportPath string
	Imports    []string
}

// under reports whether path is root or a package under it.
func under(path, root string) bool {
	return path == root || strings.HasPrefix(path, root+"/")
}

// owner is the directory package a listed package belongs to: the test
// variants "p [p.test]", the external test package "p_test" and the test
// main "p.test" all belong to p.
func owner(importPath string) string {
	p, _, _ := strings.Cut(importPath, " ")
	if s, ok := strings.CutSuffix(p, ".test"); ok {
		return s
	}
	if s, ok := strings.CutSuffix(p, "_test"); ok {
		return s
	}
	return p
}

// violations returns, for every package of the module outside the allowed
// trees that imports the examples directly or through its dependencies,
// the shortest import chain from it (or from its test variant) to an
// example package ("a -> b -> pipelines/diag"), sorted. pkgs is `go list
// -deps -test -json` output: it has the test variants ("p [p.test]",
// "p_test [p.test]"), so the imports of test files are followed too.
func violations(pkgs []listed) []string {
	imports := map[string][]string{}
	for _, p := range pkgs {
		imports[p.ImportPath] = p.Imports
	}
	// chain finds the shortest import chain from start to an example
	// package (breadth first), nil when there is none.
	chain := func(start string) []string {
		prev := map[string]string{start: ""}
		queue := []string{start}
		for len(queue) > 0 {
			cur := queue[0]
			queue = queue[1:]
			if under(owner(cur), examples) {
				var path []string
				for p := cur; p != ""; p = prev[p] {
					path = append(path, p)
				}
				slices.Reverse(path)
				return path
			}
			for _, next := range imports[cur] {
				if _, seen := prev[next]; !seen {
					prev[next] = cur
					queue = append(queue, next)
				}
			}
		}
		return nil
	}
	shortest := map[string][]string{} // by owner
	for _, p := range pkgs {
		o := owner(p.ImportPath)
		if strings.HasSuffix(p.ImportPath, ".test") || !under(o, module) ||
			slices.ContainsFunc(allowed, func(root string) bool { return under(o, root) }) {
			continue // a test main imports the test variants, which are checked themselves
		}
		c := chain(p.ImportPath)
		if old, ok := shortest[o]; c != nil && (!ok || len(c) < len(old) || (len(c) == len(old) && slices.Compare(c, old) < 0)) {
			shortest[o] = c
		}
	}
	var out []string
	for _, c := range shortest {
		out = append(out, strings.Join(c, " -> "))
	}
	slices.Sort(out)
	return out
}

// decode reads a stream of `go list -json` objects.
func decode(r io.Reader) ([]listed, error) {
	var pkgs []listed
	dec := json.NewDecoder(r)
	for {
		var p listed
		err := dec.Decode(&p)
		if errors.Is(err, io.EOF) {
			return pkgs, nil
		}
		if err != nil {
			return nil, err
		}
		pkgs = append(pkgs, p)
	}
}

// TestLibraryDoesNotImportTheExamples runs `go list -deps -test -json ./...`
// from the module root and fails naming each package outside pipelines/,
// functions/, cmd/ and examples/ that imports the example pipelines, with
// the import chain that brings them in.
func TestLibraryDoesNotImportTheExamples(t *testing.T) {
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	cmd := exec.Command("go", "list", "-deps", "-test", "-json=ImportPath,Imports", "./...")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list in %s: %v\n%s", cmd.Dir, err, stderr.String())
	}
	pkgs, err := decode(bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(pkgs, func(p listed) bool { return p.ImportPath == module+"/shared/pipeline" }) ||
		!slices.ContainsFunc(pkgs, func(p listed) bool { return under(p.ImportPath, examples) }) {
		t.Fatalf("go list in %s listed %d packages, without the library or the examples", cmd.Dir, len(pkgs))
	}
	for _, v := range violations(pkgs) {
		t.Errorf("only pipelines/, functions/, cmd/ and examples/ may import the example pipelines: %s", v)
	}
}

// TestViolationsNameTheChain: the rule catches a library package importing
// an example directly, one reaching it through another package, and one
// whose test files alone import it (its test variant); it lets the
// allowed trees and the examples import them.
func TestViolationsNameTheChain(t *testing.T) {
	m := func(p string) string { return module + "/" + p }
	pkgs := []listed{
		{ImportPath: m("pipelines/diag"), Imports: []string{m("shared/pipeline")}},
		{ImportPath: m("pipelines"), Imports: []string{m("pipelines/diag")}},
		{ImportPath: m("shared/pipeline")},
		{ImportPath: m("shared/direct"), Imports: []string{m("pipelines/diag")}},
		{ImportPath: m("shared/helper"), Imports: []string{m("pipelines")}},
		{ImportPath: m("shared/indirect"), Imports: []string{m("shared/helper")}},
		{ImportPath: m("shared/clean"), Imports: []string{m("shared/pipeline")}},
		{ImportPath: m("shared/clean_test") + " [" + m("shared/clean.test") + "]", Imports: []string{m("shared/clean"), m("pipelines/diag")}},
		{ImportPath: m("cmd/qasync"), Imports: []string{m("pipelines")}},
		{ImportPath: m("functions/worker"), Imports: []string{m("pipelines")}},
		{ImportPath: m("examples/hello"), Imports: []string{m("pipelines/diag")}},
		{ImportPath: "example.com/other", Imports: []string{m("pipelines")}},
	}
	got := violations(pkgs)
	want := []string{
		m("shared/clean_test") + " [" + m("shared/clean.test") + "] -> " + m("pipelines/diag"),
		m("shared/direct") + " -> " + m("pipelines/diag"),
		m("shared/helper") + " -> " + m("pipelines"),
		m("shared/indirect") + " -> " + m("shared/helper") + " -> " + m("pipelines"),
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
