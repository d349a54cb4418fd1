package cli_test

import (
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/internal/cli"
	"github.com/qasync/qasync/shared/internal/clitest"
)

// serverDocument GETs path from the target as the runner's tenant and
// returns the answer decoded as generic JSON: the document the server
// sent, member for member.
func (r *runner) serverDocument(path string) any {
	r.t.Helper()
	req, err := http.NewRequestWithContext(r.t.Context(), http.MethodGet, r.tg.URL+path, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	req.Header.Set("X-Tenant-Id", r.tenant)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		r.t.Fatalf("GET %s: %d %s %v", path, resp.StatusCode, b, err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		r.t.Fatal(err)
	}
	return v
}

// sameDocument fails the test unless out, a command's JSON output, is
// the server's document want.
func sameDocument(t *testing.T, what, out string, want any) {
	t.Helper()
	if got := decode[any](t, out); !reflect.DeepEqual(got, want) {
		t.Fatalf("%s -o json is not the server's document:\n got %v\nwant %v", what, got, want)
	}
}

// TestPipelinesCommand: pipelines lists the server's pipelines, sorted
// by id, with the current version, the number of versions (draining ones
// marked) and the current version's steps with their kinds; pipelines
// ID describes one, each version with its steps and its input schema
// pretty-printed ("any input" without one); -o json prints the server's
// documents; an unknown pipeline exits 3 naming the id.
func TestPipelinesCommand(t *testing.T) {
	t.Parallel()
	r := newRunner(t, clitest.Real(t))
	list := decode[client.PipelineList](t, r.ok("pipelines", "-o", "json"))
	sameDocument(t, "pipelines", r.ok("pipelines", "-o", "json"), r.serverDocument("/v1/pipelines"))
	current := map[string]string{}
	for _, p := range list.Pipelines {
		current[p.PipelineID] = p.CurrentVersion
	}
	out := r.ok("pipelines")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(list.Pipelines)+1 || !regexp.MustCompile(`^PIPELINE\s+CURRENT VERSION\s+VERSIONS\s+STEPS$`).MatchString(lines[0]) {
		t.Fatalf("pipelines table:\n%s", out)
	}
	for i, row := range []string{
		`t\.fail\s+` + current[clitest.PipelineFail] + `\s+1\s+work \(step\)`,
		`t\.map\s+` + current[clitest.PipelineMap] + `\s+1\s+fan \(map\)`,
		`t\.ok\s+` + current[clitest.PipelineOK] + `\s+1\s+prepare \(step\), finish \(step\)`,
		`t\.retry\s+` + current[clitest.PipelineRetry] + `\s+1\s+work \(step\)`,
		`t\.versioned\s+v2-[0-9a-f]{12}\s+2 \(1 draining\)\s+take \(step\)`,
		`t\.wait\s+` + current[clitest.PipelineWait] + `\s+1\s+approve \(step\), finish \(step\)`,
	} {
		if !regexp.MustCompile(`^` + row + `$`).MatchString(lines[i+1]) {
			t.Fatalf("pipelines table: line %d is not %s:\n%s", i+2, row, out)
		}
	}

	one := decode[client.Pipeline](t, r.ok("pipelines", clitest.PipelineVersioned, "-o", "json"))
	sameDocument(t, "pipelines ID", r.ok("pipelines", clitest.PipelineVersioned, "-o", "json"), r.serverDocument("/v1/pipelines/"+clitest.PipelineVersioned))
	if len(one.Versions) != 2 || !one.Versions[0].Draining || one.Versions[1].Version != one.CurrentVersion {
		t.Fatalf("pipelines %s -o json: %+v", clitest.PipelineVersioned, one)
	}
	out = r.ok("pipelines", clitest.PipelineVersioned)
	hasField(t, out, "pipeline", clitest.PipelineVersioned)
	hasField(t, out, "current version", one.CurrentVersion)
	hasField(t, out, "versions", "2 (1 draining)")
	old, cur, ok := strings.Cut(out, "\nversion "+one.CurrentVersion+" (current, label v2)\n")
	if !ok || !strings.Contains(old, "\nversion "+one.Versions[0].Version+" (draining, label v1)\n") {
		t.Fatalf("pipelines %s: no line per version, the current one last:\n%s", clitest.PipelineVersioned, out)
	}
	if !regexp.MustCompile(`(?m)^STEP\s+NAME\s+KIND\n0\s+old\s+step$`).MatchString(old) ||
		!regexp.MustCompile(`^STEP\s+NAME\s+KIND\n0\s+take\s+step\ninput schema:\n\{\n`).MatchString(cur) {
		t.Fatalf("pipelines %s: the versions' steps:\n%s", clitest.PipelineVersioned, out)
	}
	// The current version's schema, pretty-printed: the schema the
	// server sent, over several lines.
	schema := strings.TrimPrefix(cur[strings.Index(cur, "input schema:\n"):], "input schema:\n")
	var got, want any
	if err := json.Unmarshal([]byte(schema), &got); err != nil {
		t.Fatalf("the input schema printed is not JSON: %v\n%s", err, schema)
	}
	if err := json.Unmarshal(one.Versions[1].InputSchema, &want); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("the input schema printed:\n%s\nthe server's: %s", schema, one.Versions[1].InputSchema)
	}
	if !strings.Contains(schema, "\n  \"required\": [\n    \"orderId\"\n  ]") {
		t.Fatalf("the input schema is not pretty-printed:\n%s", schema)
	}
	// A map takes a list of any elements: no schema.
	if out := r.ok("pipelines", clitest.PipelineMap); !strings.HasSuffix(out, "\ninput: any input\n") || strings.Contains(out, "input schema") {
		t.Fatalf("pipelines %s:\n%s", clitest.PipelineMap, out)
	}

	res := r.want(cli.ExitNotFound, "pipelines", "no.such.pipeline")
	if !strings.Contains(res.stderr, `404 Pipeline not found: No pipeline "no.such.pipeline"`) || res.stdout != "" {
		t.Fatalf("an unknown pipeline: stderr %q, stdout %q", res.stderr, res.stdout)
	}
	if p := decode[client.Problem](t, r.want(cli.ExitNotFound, "pipelines", "no.such.pipeline", "-o", "json").stderr); p.Kind() != "pipeline-not-found" || !strings.Contains(p.Detail, "no.such.pipeline") {
		t.Fatalf("an unknown pipeline's problem: %+v", p)
	}
	r.want(cli.ExitUsage, "pipelines", clitest.PipelineOK, clitest.PipelineMap)
}

// TestListByKeyCommand: status shows the idempotency key an execution
// was submitted under (no key line without one); list --key finds that
// execution (a table row, a JSON page of one) for its tenant, and
// nothing for another key or another tenant (exit 0, the header and a
// note; a JSON page of none); --key with --pipeline, --status or
// --cursor is a usage error that sends nothing.
func TestListByKeyCommand(t *testing.T) {
	t.Parallel()
	tg := clitest.Real(t)
	r := newRunner(t, tg)
	const key = "order 1001/a?&b=c#d" // characters a query string must escape
	sub := decode[client.Submission](t, r.ok("submit", clitest.PipelineOK, "--key", key, "-o", "json"))
	hasField(t, r.ok("status", sub.ExecutionID), "key", key)
	if e := decode[client.Execution](t, r.ok("status", sub.ExecutionID, "-o", "json")); e.IdempotencyKey != key {
		t.Fatalf("status -o json: key %q", e.IdempotencyKey)
	}
	keyless := decode[client.Submission](t, r.ok("submit", clitest.PipelineOK, "--data", `{"keyless":true}`, "-o", "json"))
	if out := r.ok("status", keyless.ExecutionID); regexp.MustCompile(`(?m)^key\s`).MatchString(out) {
		t.Fatalf("status of an execution submitted without a key:\n%s", out)
	}

	page := decode[client.ExecutionPage](t, r.ok("list", "--key", key, "-o", "json"))
	if len(page.Executions) != 1 || page.Executions[0].ExecutionID != sub.ExecutionID || page.Executions[0].IdempotencyKey != key || page.NextCursor != "" {
		t.Fatalf("list --key -o json: %+v", page)
	}
	res := r.want(0, "list", "--key", key)
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "EXECUTION ") || !regexp.MustCompile(`^`+regexp.QuoteMeta(sub.ExecutionID)+`\s+t\.ok\s`).MatchString(lines[1]) || res.stderr != "" {
		t.Fatalf("list --key:\n%s\nstderr: %s", res.stdout, res.stderr)
	}

	for _, other := range []*runner{r, newRunner(t, tg)} {
		k := "no-such-key"
		if other != r {
			other.tenant += "-other"
			k = key
		}
		res := other.want(0, "list", "--key", k)
		if !regexp.MustCompile(`^EXECUTION\s+PIPELINE\s+STATUS\s+PRIORITY\s+STEP\s+ATTEMPT\s+CREATED\s+UPDATED\s+ERROR\s+FAN-OUT\n$`).MatchString(res.stdout) {
			t.Fatalf("list --key %s (tenant %s): %q", k, other.tenant, res.stdout)
		}
		if res.stderr != "(no execution under the key "+k+")\n" {
			t.Fatalf("list --key %s (tenant %s): stderr %q", k, other.tenant, res.stderr)
		}
		if out := other.ok("list", "--key", k, "-o", "json"); strings.TrimSpace(out) != "{\n  \"executions\": []\n}" {
			t.Fatalf("list --key %s -o json (tenant %s): %s", k, other.tenant, out)
		}
	}

	before := r.requests.Load()
	for _, tc := range [][]string{{"--pipeline", clitest.PipelineOK}, {"--status", "QUEUED"}, {"--cursor", "c"}} {
		res := r.want(cli.ExitUsage, append([]string{"list", "--key", key}, tc...)...)
		if !strings.Contains(res.stderr, "qasync list: --key cannot be combined with "+tc[0]) {
			t.Errorf("list --key %s: stderr %q", tc[0], res.stderr)
		}
	}
	if n := r.requests.Load() - before; n != 0 {
		t.Fatalf("the usage errors sent %d requests", n)
	}
}
