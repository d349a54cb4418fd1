package doctest

import (
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// module is the root module's path.
const module = "github.com/qasync/qasync"

// stackPkg is the CDK construct's package, which CDK blocks use.
const stackPkg = module + "/infra/cdk/stack"

// page is a Markdown file of the documentation.
type page struct {
	rel  string // from the repository root, slash-separated: README.md, docs/cli.md
	text string
}

// block is a fenced code block of a page.
type block struct {
	info   string // the fence's info string: go, sh, console, ...
	line   int    // the page's line of the block's first content line, from 1
	body   string // the content, each line ending in a newline
	marker string // what the doctest comment before the fence says ("file go.mod"); "" without one
}

// markerRE matches a doctest comment: <!-- doctest: WHAT -->.
var markerRE = regexp.MustCompile(`^<!--\s*doctest:\s*(.*?)\s*-->$`)

// blocks returns the fenced code blocks of a Markdown text (``` fences,
// indented by up to three spaces), each with the doctest comment on the
// last non-blank line before its fence.
func blocks(text string) []block {
	lines := strings.Split(text, "\n")
	var out []block
	prev := "" // the last non-blank line outside blocks
	for i := 0; i < len(lines); i++ {
		trimmed := strings.TrimLeft(lines[i], " ")
		indent := len(lines[i]) - len(trimmed)
		if indent > 3 || !strings.HasPrefix(trimmed, "```") {
			if strings.TrimSpace(lines[i]) != "" {
				prev = strings.TrimSpace(lines[i])
			}
			continue
		}
		fence := trimmed[:len(trimmed)-len(strings.TrimLeft(trimmed, "`"))]
		b := block{info: strings.TrimSpace(trimmed[len(fence):]), line: i + 2}
		if m := markerRE.FindStringSubmatch(prev); m != nil {
			b.marker = m[1]
		}
		var body strings.Builder
		j := i + 1
		for ; j < len(lines); j++ {
			c := strings.TrimLeft(lines[j], " ")
			if strings.HasPrefix(c, fence) && strings.Trim(c, "` ") == "" {
				break
			}
			line := lines[j]
			for k := 0; k < indent && strings.HasPrefix(line, " "); k++ {
				line = line[1:]
			}
			body.WriteString(line + "\n")
		}
		b.body = body.String()
		out = append(out, b)
		i, prev = j, ""
	}
	return out
}

// prose returns the lines of a Markdown text outside its code blocks,
// with inline code spans blanked out; the lines inside blocks are empty,
// so that indexes stay line numbers (from 0).
func prose(text string) []string {
	lines := strings.Split(text, "\n")
	fence := ""
	for i, l := range lines {
		trimmed := strings.TrimLeft(l, " ")
		switch {
		case fence == "" && len(l)-len(trimmed) <= 3 && strings.HasPrefix(trimmed, "```"):
			fence = trimmed[:len(trimmed)-len(strings.TrimLeft(trimmed, "`"))]
			lines[i] = ""
		case fence != "":
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, "` ") == "" {
				fence = ""
			}
			lines[i] = ""
		default:
			lines[i] = codeSpanRE.ReplaceAllStringFunc(l, func(s string) string { return strings.Repeat(" ", len(s)) })
		}
	}
	return lines
}

// codeSpanRE matches an inline code span (of one or two backticks).
var codeSpanRE = regexp.MustCompile("``[^`]+``|`[^`]+`")

// linkRE matches a Markdown link's or image's target: ](target) or
// ](target "title").
var linkRE = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// anchorRE matches an HTML anchor: <a id="x"> or <a name="x">.
var anchorRE = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)

// headingRE matches an ATX heading.
var headingRE = regexp.MustCompile(`^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$`)

// inlineLinkRE matches an inline link, whose text alone a heading's
// anchor keeps.
var inlineLinkRE = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// anchors returns the anchors of a Markdown text as GitHub makes them: one
// per heading (its text lower-cased, everything but letters, digits,
// spaces, '-' and '_' dropped, spaces as '-', a repeat numbered -1, -2,
// ...) and one per <a id> or <a name>.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range prose(codeHeadings(text)) {
		for _, m := range anchorRE.FindAllStringSubmatch(l, -1) {
			out[m[1]] = true
		}
		m := headingRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		h := inlineLinkRE.ReplaceAllString(m[1], "$1")
		var slug strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				slug.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
				slug.WriteRune(r)
			}
		}
		s := slug.String()
		if n := seen[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// linkProblems returns, for each page, its relative links that do not
// resolve: to no file or directory under root, outside root, or into a
// Markdown file without that anchor. Links with a scheme (https:,
// mailto:) are not followed.
func linkProblems(root string, pages []page) []string {
	var out []string
	texts := map[string]string{}
	for _, p := range pages {
		texts[p.rel] = p.text
	}
	for _, p := range pages {
		for i, l := range prose(p.text) {
			for _, m := range linkRE.FindAllStringSubmatch(l, -1) {
				target := m[1]
				if regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`).MatchString(target) {
					continue
				}
				where := fmt.Sprintf("%s:%d: link %s", p.rel, i+1, target)
				file, frag, _ := strings.Cut(target, "#")
				rel := p.rel
				if file != "" {
					rel = path.Join(path.Dir(p.rel), file)
				}
				if rel == ".." || strings.HasPrefix(rel, "../") || path.IsAbs(file) {
					out = append(out, where+": outside the repository")
					continue
				}
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel))); err != nil {
					out = append(out, where+": no such file or directory")
					continue
				}
				if frag == "" || !strings.HasSuffix(rel, ".md") {
					continue
				}
				text, ok := texts[rel]
				if !ok {
					b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
					if err != nil {
						out = append(out, where+": "+err.Error())
						continue
					}
					text = string(b)
				}
				if !anchors(text)[frag] {
					out = append(out, fmt.Sprintf("%s: %s has no heading or anchor #%s", where, rel, frag))
				}
			}
		}
	}
	return out
}

// codeHeadings returns text with the backticks of its headings' code
// spans removed, so that anchors sees their words (prose blanks code
// spans).
func codeHeadings(text string) string {
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		if headingRE.MatchString(l) {
			lines[i] = strings.ReplaceAll(l, "`", "")
		}
	}
	return strings.Join(lines, "\n")
}

// imports are the packages a snippet may use without importing them: the
// name its selectors use -> the import path.
var imports = map[string]string{
	"pipeline":     module + "/shared/pipeline",
	"command":      module + "/shared/command",
	"remote":       module + "/shared/remote",
	"await":        module + "/shared/await",
	"reject":       module + "/shared/reject",
	"payload":      module + "/shared/payload",
	"pipelinetest": module + "/shared/pipelinetest",
	"server":       module + "/shared/server",
	"lambdafn":     module + "/shared/lambdafn",
	"client":       module + "/shared/client",
	"backend":      module + "/shared/backend",
	"config":       module + "/shared/config",
	"context":      "context",
	"errors":       "errors",
	"fmt":          "fmt",
	"http":         "net/http",
	"io":           "io",
	"json":         "encoding/json",
	"os":           "os",
	"slog":         "log/slog",
	"strings":      "strings",
	"testing":      "testing",
	"time":         "time",
}

// unchecked are the Go blocks left unchecked, by page and first line,
// with the reason: keep this list short.
var unchecked = map[[2]string]string{
	{"docs/design-fan-out.md", "// Each element of the step's input list runs as an execution of"}: "a design sketch written before the code " +
		"(\"...\" stands for a step's body); docs/pipelines.md's fan-out block is the compiled one",
}

// laidOut is a page's Go blocks as a module: the file sets to check in
// order (each stage before a file was replaced, then the final one), and
// its CDK blocks.
type laidOut struct {
	stages    []map[string]string
	cdk       []block
	unchecked [][2]string // the keys of unchecked it skipped
}

// lineDirective makes the compiler report the lines that follow as the
// page's, from line.
func lineDirective(root string, p page, line int) string {
	return fmt.Sprintf("//line %s:%d\n", filepath.Join(root, filepath.FromSlash(p.rel)), line)
}

// packageOf returns the package name of a block that starts with its
// package clause, or "".
func packageOf(body string) string {
	f, err := parser.ParseFile(token.NewFileSet(), "", body, parser.PackageClauseOnly)
	if err != nil {
		return ""
	}
	return f.Name.Name
}

// layout lays out a page's Go blocks (see the package comment) and
// returns the problems it finds on the way: an unknown doctest comment, a
// block that is not gofmt'd.
func layout(root string, p page) (laidOut, []string) {
	var lo laidOut
	var problems []string
	files := map[string]string{}
	snippet := "" // the page's snippet package
	var gos []block
	for _, b := range blocks(p.text) {
		first, _, _ := strings.Cut(b.body, "\n")
		if key := [2]string{p.rel, first}; unchecked[key] != "" {
			lo.unchecked = append(lo.unchecked, key)
			continue
		}
		if b.info == "go" || strings.HasPrefix(b.marker, "file ") {
			gos = append(gos, b)
		}
		if pkg := packageOf(b.body); b.info == "go" && b.marker == "" && snippet == "" && pkg != "" && pkg != "main" {
			snippet = pkg
		}
	}
	if snippet == "" {
		snippet = "doc"
	}
	for _, b := range gos {
		where := fmt.Sprintf("%s:%d", p.rel, b.line)
		if b.info == "go" {
			if src, err := format.Source([]byte(b.body)); err != nil {
				problems = append(problems, fmt.Sprintf("%s: the Go block does not parse: %v", where, err))
			} else if string(src) != b.body {
				problems = append(problems, where+": the Go block is not gofmt'd")
			}
		}
		kind, arg, _ := strings.Cut(b.marker, " ")
		switch kind {
		case "file":
			name := filepath.ToSlash(filepath.Clean(strings.TrimSpace(arg)))
			if name == "." || strings.HasPrefix(name, "../") || path.IsAbs(name) {
				problems = append(problems, fmt.Sprintf("%s: file %q is outside the page's module", where, arg))
				continue
			}
			if _, ok := files[name]; ok {
				lo.stages = append(lo.stages, maps.Clone(files))
			}
			body := b.body
			if strings.HasSuffix(name, ".go") {
				body = lineDirective(root, p, b.line) + body
			}
			files[name] = body
		case "cdk":
			lo.cdk = append(lo.cdk, b)
		case "func", "":
			if pkg := packageOf(b.body); kind == "" && pkg != "" {
				dir := pkg
				if pkg == "main" {
					dir = fmt.Sprintf("main%d", b.line)
				}
				files[fmt.Sprintf("%s/l%d.go", dir, b.line)] = lineDirective(root, p, b.line) + b.body
				continue
			}
			files[fmt.Sprintf("%s/l%d.go", snippet, b.line)] = fragment(root, p, b, snippet, kind == "func")
		default:
			problems = append(problems, fmt.Sprintf("%s: unknown doctest comment %q (want file PATH, func or cdk)", where, b.marker))
		}
	}
	lo.stages = append(lo.stages, files)
	return lo, problems
}

// fragment returns a fragment block as a file of package pkg: its
// declarations (or, with wrap, its statements as a function body), with
// the imports of the selectors it uses that it does not import itself.
func fragment(root string, p page, b block, pkg string, wrap bool) string {
	body := b.body
	if wrap {
		body = "func _() {\n" + lineDirective(root, p, b.line) + b.body + "}\n"
	} else {
		body = lineDirective(root, p, b.line) + b.body
	}
	need := map[string]bool{}
	if f, err := parser.ParseFile(token.NewFileSet(), "", "package "+pkg+"\n"+body, 0); err == nil {
		own := map[string]bool{}
		for _, im := range f.Imports {
			name := path.Base(strings.Trim(im.Path.Value, `"`))
			if im.Name != nil {
				name = im.Name.Name
			}
			own[name] = true
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if id, ok := sel.X.(*ast.Ident); ok && id.Obj == nil && imports[id.Name] != "" && !own[id.Name] {
					need[id.Name] = true
				}
			}
			return true
		})
	} // else: the compiler reports it, at the page's line
	var src strings.Builder
	src.WriteString("package " + pkg + "\n\n")
	for _, name := range slices.Sorted(maps.Keys(need)) {
		fmt.Fprintf(&src, "import %q\n", imports[name])
	}
	src.WriteString("\n" + body)
	return src.String()
}

// replaceRE matches the replace line of module github.com/qasync/qasync
// (alone or in a replace block), its target in group 2.
var replaceRE = regexp.MustCompile(`(?m)^(\s*(?:replace\s+)?github\.com/qasync/qasync\s*=>\s*)(\S+)\s*$`)

// compile writes files as a module in a new directory and runs `go vet`
// there (and `go test` when it has a test file), offline: qasync comes
// from root (the module's replace line is pointed there, or a go.mod
// requiring it is written), the other modules from the module cache, with
// root's go.sum. It returns the go command's output on failure.
func compile(t *testing.T, root string, files map[string]string) error {
	t.Helper()
	dir := t.TempDir()
	files = maps.Clone(files)
	if mod, ok := files["go.mod"]; ok {
		if !replaceRE.MatchString(mod) {
			return fmt.Errorf("the page's go.mod has no replace line for %s", module)
		}
		files["go.mod"] = replaceRE.ReplaceAllString(mod, "${1}"+root)
	} else {
		files["go.mod"] = fmt.Sprintf("module example.com/doctest\n\ngo 1.26.0\n\nrequire %s v0.0.0-00010101000000-000000000000\n\nreplace %s => %s\n", module, module, root)
	}
	if _, ok := files["go.sum"]; !ok {
		sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
		if err != nil {
			return err
		}
		files["go.sum"] = string(sum)
	}
	tests := false
	for name, body := range files {
		tests = tests || strings.HasSuffix(name, "_test.go")
		full := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			return err
		}
	}
	run := func(args ...string) error {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOPROXY=off", "GOWORK=off", "GOTOOLCHAIN=local")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := run("vet", "-mod=mod", "./..."); err != nil {
		return err
	}
	if tests {
		return run("test", "-mod=mod", "-count=1", "./...")
	}
	return nil
}

// goSources parses the non-test Go files of the directories dirs (under
// root) and returns them.
func goSources(root string, dirs ...string) ([]*ast.File, error) {
	var out []*ast.File
	fset := token.NewFileSet()
	for _, d := range dirs {
		names, err := filepath.Glob(filepath.Join(root, d, "*.go"))
		if err != nil {
			return nil, err
		}
		for _, name := range names {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, name, nil, 0)
			if err != nil {
				return nil, err
			}
			out = append(out, f)
		}
	}
	return out, nil
}

// importNames maps each import of f to the name f uses for it.
func importNames(f *ast.File) map[string]string {
	out := map[string]string{}
	for _, im := range f.Imports {
		p := strings.Trim(im.Path.Value, `"`)
		name := path.Base(p)
		if strings.HasPrefix(name, "v") && strings.Trim(name[1:], "0123456789") == "" {
			name = path.Base(path.Dir(p)) // .../awscdk/v2 is awscdk
		}
		if strings.HasSuffix(name, "-go") {
			name = strings.TrimSuffix(strings.TrimSuffix(name, "-go"), "-runtime") // jsii-runtime-go is jsii
		}
		if im.Name != nil {
			name = im.Name.Name
		}
		out[name] = p
	}
	return out
}

// cdkProblems checks a CDK block (see the package comment) against the
// construct's package and the CDK apps that are compiled elsewhere.
func cdkProblems(root string, p page, b block) []string {
	where := func(pos token.Position) string { return fmt.Sprintf("%s:%d", p.rel, b.line+pos.Line-1) }
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "", b.body, 0)
	if err != nil {
		return []string{fmt.Sprintf("%s:%d: the CDK block does not parse: %v", p.rel, b.line, err)}
	}
	stackFiles, err := goSources(root, "infra/cdk/stack")
	if err != nil || len(stackFiles) == 0 {
		return []string{fmt.Sprintf("%s:%d: reading infra/cdk/stack: %v", p.rel, b.line, err)}
	}
	exported := map[string]bool{}
	fields := map[string]map[string]bool{} // type -> field names
	for _, sf := range stackFiles {
		for _, d := range sf.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					exported[d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						exported[s.Name.Name] = true
						if st, ok := s.Type.(*ast.StructType); ok {
							fields[s.Name.Name] = map[string]bool{}
							for _, fl := range st.Fields.List {
								for _, n := range fl.Names {
									fields[s.Name.Name][n.Name] = true
								}
								if len(fl.Names) == 0 { // embedded: named after its type
									typ := fl.Type
									if star, ok := typ.(*ast.StarExpr); ok {
										typ = star.X
									}
									switch typ := typ.(type) {
									case *ast.Ident:
										fields[s.Name.Name][typ.Name] = true
									case *ast.SelectorExpr:
										fields[s.Name.Name][typ.Sel.Name] = true
									}
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							exported[n.Name] = true
						}
					}
				}
			}
		}
	}
	refs, err := goSources(root, "infra/cdk", "infra/cdk/stack", "examples/invoices/infra")
	if err != nil {
		return []string{fmt.Sprintf("%s:%d: reading the CDK apps: %v", p.rel, b.line, err)}
	}
	used := map[string]map[string]bool{} // import path -> selectors used
	for _, rf := range refs {
		names := importNames(rf)
		ast.Inspect(rf, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if id, ok := sel.X.(*ast.Ident); ok && names[id.Name] != "" {
					if used[names[id.Name]] == nil {
						used[names[id.Name]] = map[string]bool{}
					}
					used[names[id.Name]][sel.Sel.Name] = true
				}
			}
			return true
		})
	}
	var out []string
	names := importNames(f)
	for _, imp := range slices.Sorted(maps.Values(names)) {
		if std := !strings.Contains(strings.Split(imp, "/")[0], "."); !std && imp != stackPkg && used[imp] == nil {
			out = append(out, fmt.Sprintf("%s:%d: the CDK block imports %s, which no compiled CDK app uses", p.rel, b.line, imp))
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			id, ok := n.X.(*ast.Ident)
			if !ok || names[id.Name] == "" {
				return true
			}
			imp := names[id.Name]
			switch {
			case imp == stackPkg && !exported[n.Sel.Name]:
				out = append(out, fmt.Sprintf("%s: stack.%s does not exist in infra/cdk/stack", where(fset.Position(n.Pos())), n.Sel.Name))
			case imp != stackPkg && used[imp] != nil && !used[imp][n.Sel.Name]:
				out = append(out, fmt.Sprintf("%s: %s.%s is used by no compiled CDK app", where(fset.Position(n.Pos())), id.Name, n.Sel.Name))
			}
		case *ast.CompositeLit:
			sel, ok := n.Type.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); !ok || names[id.Name] != stackPkg || fields[sel.Sel.Name] == nil {
				return true
			}
			for _, e := range n.Elts {
				if kv, ok := e.(*ast.KeyValueExpr); ok {
					if k, ok := kv.Key.(*ast.Ident); ok && !fields[sel.Sel.Name][k.Name] {
						out = append(out, fmt.Sprintf("%s: stack.%s has no field %s", where(fset.Position(kv.Pos())), sel.Sel.Name, k.Name))
					}
				}
			}
		}
		return true
	})
	return out
}

// repoRoot is the directory of the module's go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(gomod)))
}

// readPages reads README.md and docs/*.md under root.
func readPages(t *testing.T, root string) []page {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	names = append([]string{filepath.Join(root, "README.md")}, names...)
	var out []page
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		rel, err := filepath.Rel(root, name)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, page{rel: filepath.ToSlash(rel), text: string(b)})
	}
	return out
}

// TestLinksResolve: every relative link of README.md and docs/*.md leads
// to a file or directory of the repository, and into a Markdown file to
// one of its anchors.
func TestLinksResolve(t *testing.T) {
	root := repoRoot(t)
	pages := readPages(t, root)
	if len(pages) < 2 {
		t.Fatalf("read %d pages under %s, want README.md and docs/", len(pages), root)
	}
	n := 0
	for _, p := range pages {
		for _, l := range prose(p.text) {
			n += len(linkRE.FindAllString(l, -1))
		}
	}
	if n == 0 {
		t.Fatal("no links found: the link pattern is broken")
	}
	for _, problem := range linkProblems(root, pages) {
		t.Error(problem)
	}
}

// TestGoBlocksCompile: every Go block of README.md and docs/*.md is
// gofmt'd and compiles (laid out as the package comment says), and each
// CDK block names only what exists.
func TestGoBlocksCompile(t *testing.T) {
	root := repoRoot(t)
	checked := 0
	skipped := map[[2]string]bool{}
	for _, p := range readPages(t, root) {
		lo, problems := layout(root, p)
		for _, key := range lo.unchecked {
			skipped[key] = true
			t.Logf("%s: a Go block left unchecked: %s", key[0], unchecked[key])
		}
		for _, problem := range problems {
			t.Error(problem)
		}
		for _, b := range lo.cdk {
			for _, problem := range cdkProblems(root, p, b) {
				t.Error(problem)
			}
			checked++
		}
		last := lo.stages[len(lo.stages)-1]
		if len(last) == 0 {
			continue
		}
		for i, files := range lo.stages {
			if err := compile(t, root, files); err != nil {
				t.Errorf("%s (stage %d of %d): %v", p.rel, i+1, len(lo.stages), err)
			}
		}
		for name := range last {
			if strings.HasSuffix(name, ".go") {
				checked++
			}
		}
	}
	if checked == 0 {
		t.Fatal("no Go block found: the docs have some")
	}
	for key := range unchecked {
		if !skipped[key] {
			t.Errorf("unchecked lists a block %s no longer has (first line %q): remove it from the list", key[0], key[1])
		}
	}
	t.Logf("%d Go blocks checked", checked)
}

// TestRulesFindEach: the rules catch a link to a missing file, one to a
// missing anchor, one leaving the repository, a Go block that does not
// compile, one that is not gofmt'd, an unknown doctest comment and a CDK
// block naming what infra/cdk/stack lacks; they let a good link, a
// fragment with its imports left out, a func block and a replaced file
// pass.
func TestRulesFindEach(t *testing.T) {
	root := repoRoot(t)
	doc := page{rel: "docs/x.md", text: "# Title\n\n## A `code` heading\n\n" +
		"[ok](../README.md) [ok](#a-code-heading) [self](x.md#title) [web](https://example.com/x)\n" +
		"[missing](nope.md) [anchor](#nope) [out](../../etc/passwd) `[code](nope.md)`\n\n" +
		"```go\nvar step = pipeline.NewStep(\"a\", func(ctx context.Context, info pipeline.StepInfo, in string) (string, error) {\n\treturn strings.ToUpper(in), nil\n})\n```\n\n" +
		"<!-- doctest: func -->\n\n```go\n_ = step\n```\n\n" +
		"```go\nvar bad = undefinedThing\n```\n\n" +
		"```go\nvar  ugly = 1\n```\n\n" +
		"<!-- doctest: nonsense -->\n```go\nvar fine = 2\n```\n\n" +
		"<!-- doctest: cdk -->\n```go\npackage main\n\nimport \"github.com/qasync/qasync/infra/cdk/stack\"\n\n" +
		"var p = stack.Props{Settings: stack.Settings{}, Nope: 1}\nvar q = stack.NoSuchFunc\n```\n\n" +
		"<!-- doctest: file a.go -->\n```go\npackage m\n\nvar A = 1\n```\n\n" +
		"<!-- doctest: file a.go -->\n```go\npackage m\n\nvar A = \"two\"\n```\n"}
	// The page lives in a copy of the repository's top level, so that
	// its links resolve there.
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "docs"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"README.md": "# R\n", "docs/x.md": doc.text} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := strings.Join(linkProblems(dir, []page{doc}), "\n")
	for _, want := range []string{"docs/x.md:6: link nope.md: no such file", "docs/x.md:6: link #nope: docs/x.md has no heading or anchor #nope",
		"docs/x.md:6: link ../../etc/passwd: outside the repository"} {
		if !strings.Contains(got, want) {
			t.Errorf("link problems\n%s\nwant %q", got, want)
		}
	}
	if n := strings.Count(got, "\n") + 1; got == "" || n != 3 {
		t.Errorf("link problems: %d, want 3:\n%s", n, got)
	}

	lo, problems := layout(root, doc)
	got = strings.Join(problems, "\n")
	for _, want := range []string{"docs/x.md:25: the Go block is not gofmt'd", `docs/x.md:30: unknown doctest comment "nonsense"`} {
		if !strings.Contains(got, want) {
			t.Errorf("layout problems\n%s\nwant %q", got, want)
		}
	}
	if len(problems) != 2 || len(lo.cdk) != 1 || len(lo.stages) != 2 {
		t.Errorf("layout: %d problems, %d CDK blocks, %d stages; want 2, 1, 2:\n%s", len(problems), len(lo.cdk), len(lo.stages), got)
	}
	got = strings.Join(cdkProblems(root, doc, lo.cdk[0]), "\n")
	for _, want := range []string{"docs/x.md:39: stack.Props has no field Nope", "docs/x.md:40: stack.NoSuchFunc does not exist"} {
		if !strings.Contains(got, want) {
			t.Errorf("CDK problems\n%s\nwant %q", got, want)
		}
	}
	// The first stage has a.go with an int, the last with a string; both
	// hold the undefined name, which the compiler reports at the page's line.
	for i, files := range lo.stages {
		err := compile(t, root, files)
		if err == nil || !strings.Contains(err.Error(), filepath.Join(root, "docs", "x.md")+":21") || !strings.Contains(err.Error(), "undefined: undefinedThing") {
			t.Errorf("stage %d: compile: %v; want undefinedThing reported at docs/x.md:21", i+1, err)
		}
	}
	delete(lo.stages[1], "doc/l21.go")
	if err := compile(t, root, lo.stages[1]); err != nil {
		t.Errorf("without the bad block: %v", err)
	}
	if f := lo.stages[1]["doc/l9.go"]; !strings.Contains(f, `import "github.com/qasync/qasync/shared/pipeline"`) || !strings.Contains(f, `import "strings"`) {
		t.Errorf("the fragment's file lacks its imports:\n%s", f)
	}
}
