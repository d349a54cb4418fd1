package cli_test

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/internal/clitest"
	"github.com/qasync/qasync/shared/store"
)

// statusUntil polls status until execution id is in want and check (of
// its status document) holds.
func (r *runner) statusUntil(id string, want store.Status, check func(client.Execution) bool) client.Execution {
	r.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		e := decode[client.Execution](r.t, r.ok("status", id, "-o", "json"))
		if e.Status == want && check(e) {
			return e
		}
		if (e.Status.Terminal() && e.Status != want) || time.Now().After(deadline) {
			r.t.Fatalf("execution %s is %s with children %+v, want %s", id, e.Status, e.Children, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// children lists the executions whose parent is parentID, by element
// index, once the list has all n of them (a DynamoDB deployment's list
// trails the rows).
func (r *runner) children(parentID string, n int) []client.Execution {
	r.t.Helper()
	var kids []client.Execution
	clitest.Eventually(r.t, func() error {
		page := decode[client.ExecutionPage](r.t, r.ok("list", "--limit", "0", "-o", "json"))
		kids = slices.DeleteFunc(page.Executions, func(e client.Execution) bool { return e.Parent == nil || e.Parent.ExecutionID != parentID })
		if len(kids) != n {
			return fmt.Errorf("the list shows %d children of %s, want %d", len(kids), parentID, n)
		}
		return nil
	})
	slices.SortFunc(kids, func(a, b client.Execution) int { return a.Parent.Index - b.Parent.Index })
	return kids
}

// complete completes the await of a PipelineWait child once it is parked
// (the await step hands out its token before the row is committed).
func (r *runner) complete(c *client.Client, id string) {
	r.t.Helper()
	r.statusUntil(id, store.WaitingExternal, func(client.Execution) bool { return true })
	awaitID, token, err := r.tg.ResumeToken(id)
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := c.CompleteAwait(r.t.Context(), id, awaitID, token, []byte(`{"approved":true}`), ""); err != nil {
		r.t.Fatal(err)
	}
}

// TestFanOutInStatusAndList: status prints a map parent's children
// counts while it waits (of two children run one at a time: one running,
// one pending) and after (two succeeded), and a child's parent; list
// marks the parent with its number of children and each child with its
// index and parent (FAN-OUT); -o json carries the same documents.
func TestFanOutInStatusAndList(t *testing.T) {
	t.Parallel()
	r := newRunner(t, clitest.Real(t))
	c, err := client.New(r.tg.URL, client.WithTenant(r.tenant))
	if err != nil {
		t.Fatal(err)
	}
	sub := decode[client.Submission](t, r.ok("submit", clitest.PipelineMap, "--data", `[{"n":0},{"n":1}]`, "-o", "json"))
	parent := sub.ExecutionID
	r.statusUntil(parent, store.WaitingChildren, func(e client.Execution) bool { return e.Children != nil })
	out := r.ok("status", parent)
	hasField(t, out, "status", "WAITING_CHILDREN")
	hasField(t, out, "children", "2: 0 succeeded, 0 failed, 1 running, 1 pending")
	if strings.Contains(out, "parent") {
		t.Errorf("a parent submitted on its own prints a parent:\n%s", out)
	}

	kids := r.children(parent, 2)
	// The second child waits for the first to end.
	child := r.ok("status", kids[1].ExecutionID)
	hasField(t, child, "status", "PENDING")
	hasField(t, child, "parent", parent+" (child #1, map step 0)")
	if strings.Contains(child, "children") {
		t.Errorf("a child without a map of its own prints children:\n%s", child)
	}
	rows := map[string]string{}
	lines := strings.Split(strings.TrimSpace(r.ok("list")), "\n")
	if !strings.HasSuffix(lines[0], "ERROR  FAN-OUT") {
		t.Fatalf("list header %q", lines[0])
	}
	for _, l := range lines[1:] {
		rows[strings.Fields(l)[0]] = l
	}
	for id, want := range map[string]string{
		parent:              `\s+-\s+2 children$`,
		kids[0].ExecutionID: `\s+-\s+child #0 of ` + regexp.QuoteMeta(parent) + `$`,
		kids[1].ExecutionID: `\s+PENDING\s+.*\s+-\s+child #1 of ` + regexp.QuoteMeta(parent) + `$`,
	} {
		if !regexp.MustCompile(want).MatchString(rows[id]) {
			t.Errorf("list row of %s %q, want it to match %s", id, rows[id], want)
		}
	}

	// The children run one at a time: each completion releases the next.
	r.complete(c, kids[0].ExecutionID)
	r.statusUntil(parent, store.WaitingChildren, func(e client.Execution) bool { return e.Children.Succeeded == 1 })
	hasField(t, r.ok("status", parent), "children", "2: 1 succeeded, 0 failed, 1 running, 0 pending")
	r.complete(c, kids[1].ExecutionID)
	done := r.statusUntil(parent, store.Succeeded, func(client.Execution) bool { return true })
	if want := (client.ChildCounts{Total: 2, Succeeded: 2}); done.Children == nil || *done.Children != want {
		t.Errorf("after the map: children %+v, want %+v", done.Children, want)
	}
	hasField(t, r.ok("status", parent), "children", "2: 2 succeeded, 0 failed, 0 running, 0 pending")
}
