package sim

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestTraceKeepsHeadAndTail: an execution's trace keeps its first and
// last lines and says how many it left out between them; global lines
// naming it appear in order; a forgotten execution's lines are gone, so
// the trace of a long run is bounded by what is alive.
func TestTraceKeepsHeadAndTail(t *testing.T) {
	tl := newTraceLog(false)
	const n = traceHead + traceTail + 35
	for i := range n {
		tl.add(time.Duration(i)*time.Second, "e1", fmt.Sprintf("line %d", i))
		if i == 3 {
			tl.add(time.Duration(i)*time.Second, "", "CRASH p1 at commit of e1")
			tl.add(time.Duration(i)*time.Second, "", "CRASH p2 at commit of e2")
		}
		tl.add(time.Duration(i)*time.Second, "e2", "other")
	}
	got := tl.about("e1")
	if len(got) != traceHead+traceTail+2 {
		t.Fatalf("%d lines, want %d (head, marker, tail, one global line):\n%s", len(got), traceHead+traceTail+2, strings.Join(got, "\n"))
	}
	if !strings.HasSuffix(got[3], "line 3") || !strings.HasSuffix(got[4], "CRASH p1 at commit of e1") {
		t.Errorf("global line out of order: %q, %q", got[3], got[4])
	}
	if want := fmt.Sprintf("... %d lines ...", n-traceHead-traceTail); got[traceHead+1] != want {
		t.Errorf("marker %q, want %q", got[traceHead+1], want)
	}
	if !strings.HasSuffix(got[traceHead+2], fmt.Sprintf("line %d", n-traceTail)) || !strings.HasSuffix(got[len(got)-1], fmt.Sprintf("line %d", n-1)) {
		t.Errorf("tail %q .. %q, want lines %d .. %d", got[traceHead+2], got[len(got)-1], n-traceTail, n-1)
	}
	tl.forget("e1")
	if got := tl.about("e1"); len(got) != 1 {
		t.Errorf("after forget: %q, want the global line only", got)
	}
	if tl.all != nil {
		t.Errorf("kept every line without KeepTrace")
	}
}
