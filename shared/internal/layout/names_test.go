package layout

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// goPackage is the part of `go list -json` output the name rules read.
type goPackage struct {
	ImportPath string
	Dir        string
	Name       string
	GoFiles    []string
}

// errorPrefix matches an error message's prefix naming its origin:
// "dynamo: ..." (the rule: it is the package's name).
var errorPrefix = regexp.MustCompile(`^([a-z][a-z0-9]*): `)

// namingProblems returns, for the packages of pkgs, the violations of the
// naming rules: each package has exactly one package comment (the doc
// comment of one of its files), which begins "Package <name>" ("Command
// <dir>" for a main package); and every error message built from a
// literal (errors.New, fmt.Errorf, panic) that begins with a prefix
// ("name: ...") begins with the package's name (a main package's: its
// directory's).
func namingProblems(pkgs []goPackage) ([]string, error) {
	var out []string
	for _, p := range pkgs {
		want := p.Name
		if p.Name == "main" {
			want = filepath.Base(p.Dir)
		}
		fset := token.NewFileSet()
		var docs []string
		for _, name := range p.GoFiles {
			path := filepath.Join(p.Dir, name)
			f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
			if err != nil {
				return nil, err
			}
			if f.Doc != nil {
				docs = append(docs, name)
				text := f.Doc.Text()
				lead := "Package " + p.Name + " "
				if p.Name == "main" {
					lead = "Command " + want + " "
				}
				if !strings.HasPrefix(text, lead) {
					out = append(out, fmt.Sprintf("%s: the package comment of %s does not begin %q: %q", p.ImportPath, name, lead, firstLine(text)))
				}
			}
			for _, msg := range errorLiterals(f) {
				m := errorPrefix.FindStringSubmatch(msg.text)
				if m == nil || m[1] == want {
					continue
				}
				out = append(out, fmt.Sprintf("%s: error %q at %s names %q, not the package %q", p.ImportPath, msg.text, fset.Position(msg.pos), m[1], want))
			}
		}
		switch {
		case len(p.GoFiles) == 0:
		case len(docs) == 0:
			out = append(out, fmt.Sprintf("%s: no package comment", p.ImportPath))
		case len(docs) > 1:
			out = append(out, fmt.Sprintf("%s: %d package comments (%s): keep one, make the others file comments", p.ImportPath, len(docs), strings.Join(docs, ", ")))
		}
	}
	slices.Sort(out)
	return out, nil
}

// literal is a string literal and where it is.
type literal struct {
	text string
	pos  token.Pos
}

// errorLiterals returns the messages of f's errors.New, fmt.Errorf and
// panic calls whose first argument is a string literal (also a panic of
// fmt.Sprintf's).
func errorLiterals(f *ast.File) []literal {
	var out []literal
	first := func(call *ast.CallExpr) {
		if len(call.Args) == 0 {
			return
		}
		if lit, ok := call.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if s, err := strconv.Unquote(lit.Value); err == nil {
				out = append(out, literal{s, lit.Pos()})
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		switch fn := call.Fun.(type) {
		case *ast.SelectorExpr:
			if x, ok := fn.X.(*ast.Ident); ok && ((x.Name == "errors" && fn.Sel.Name == "New") || (x.Name == "fmt" && fn.Sel.Name == "Errorf")) {
				first(call)
			}
		case *ast.Ident:
			if fn.Name == "panic" && len(call.Args) == 1 {
				if inner, ok := call.Args[0].(*ast.CallExpr); ok {
					if sel, ok := inner.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Sprintf" {
						first(inner)
					}
				} else {
					first(call)
				}
			}
		}
		return true
	})
	return out
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// listPackages runs `go list -json ./...` at the module root.
func listPackages(t *testing.T) []goPackage {
	t.Helper()
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	cmd := exec.Command("go", "list", "-json=ImportPath,Dir,Name,GoFiles", "./...")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []goPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p goPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			return pkgs
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
}

// TestNamesAreTrue: every package of the module has one package comment
// naming it, and its errors' prefixes name it.
func TestNamesAreTrue(t *testing.T) {
	pkgs := listPackages(t)
	if !slices.ContainsFunc(pkgs, func(p goPackage) bool { return p.ImportPath == module+"/shared/pipeline" }) {
		t.Fatalf("go list listed %d packages, without the library", len(pkgs))
	}
	problems, err := namingProblems(pkgs)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// TestNamingProblemsFindsEach: the rules catch a package without a
// package comment, one with two, a comment naming another package, an
// error prefix naming another package (errors.New, fmt.Errorf, panic and
// panic(fmt.Sprintf)), and a command's prefix other than its directory;
// they let a prefix-less message, a key-named one and the right names
// pass.
func TestNamingProblemsFindsEach(t *testing.T) {
	root := t.TempDir()
	write := func(dir, name, src string) string {
		t.Helper()
		d := filepath.Join(root, dir)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return d
	}
	good := write("good", "a.go", "// Package good is fine.\npackage good\n\nimport (\n\t\"errors\"\n\t\"fmt\"\n)\n\n"+
		"var a = errors.New(\"good: a\")\nvar b = fmt.Errorf(\"pipeline.orchestrator.x: %d\", 1)\nvar c = errors.New(\"no prefix here\")\n")
	write("good", "b.go", "// A file comment.\n\npackage good\n")
	bad := write("bad", "a.go", "// Package other is misnamed.\npackage bad\n\nimport (\n\t\"errors\"\n\t\"fmt\"\n)\n\n"+
		"var a = errors.New(\"old: a\")\nvar b = fmt.Errorf(\"old: %d\", 1)\nfunc f() { panic(\"old: p\") }\nfunc g() { panic(fmt.Sprintf(\"old: %d\", 1)) }\n")
	write("bad", "b.go", "// Package bad again.\npackage bad\n")
	none := write("none", "a.go", "package none\n")
	cmd := write("tool", "main.go", "// Command tool runs.\npackage main\n\nimport \"errors\"\n\nvar a = errors.New(\"main: a\")\nvar b = errors.New(\"tool: b\")\n")
	got, err := namingProblems([]goPackage{
		{ImportPath: "m/good", Dir: good, Name: "good", GoFiles: []string{"a.go", "b.go"}},
		{ImportPath: "m/bad", Dir: bad, Name: "bad", GoFiles: []string{"a.go", "b.go"}},
		{ImportPath: "m/none", Dir: none, Name: "none", GoFiles: []string{"a.go"}},
		{ImportPath: "m/tool", Dir: cmd, Name: "main", GoFiles: []string{"main.go"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	count := func(prefix, substr string) int {
		n := 0
		for _, p := range got {
			if strings.HasPrefix(p, prefix) && strings.Contains(p, substr) {
				n++
			}
		}
		return n
	}
	for _, c := range []struct {
		prefix, substr string
		want           int
	}{
		{"m/good:", "", 0},
		{"m/bad:", `names "old"`, 4},
		{"m/bad:", "does not begin", 1},
		{"m/bad:", "2 package comments", 1},
		{"m/none:", "no package comment", 1},
		{"m/tool:", `names "main"`, 1},
		{"m/tool:", `names "tool"`, 0},
	} {
		if n := count(c.prefix, c.substr); n != c.want {
			t.Errorf("%s %q: %d problems, want %d; all:\n%s", c.prefix, c.substr, n, c.want, strings.Join(got, "\n"))
		}
	}
}
