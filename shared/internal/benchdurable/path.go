package benchdurable

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/qasync/qasync/shared/internal/crashtest"
	"github.com/qasync/qasync/shared/schema"
	"github.com/qasync/qasync/shared/store"
)

// PathRequest is one request of an execution's path as the proxies saw
// it. Times are milliseconds from the submit request's start.
type PathRequest struct {
	// Op is the operation ("DynamoDB.UpdateItem"), Target the table or
	// queue it addressed, by its role ("execution table", "work queue").
	Op     string `json:"op"`
	Target string `json:"target,omitempty"`
	// StartMs and EndMs are when the proxy forwarded it and got the
	// answer; Status is the answer's HTTP status (0: none).
	StartMs float64 `json:"start_ms"`
	EndMs   float64 `json:"end_ms"`
	Status  int     `json:"status"`
	// AfterSuccess: it started after the execution_succeeded log line
	// (the work item's delete, the history feed): off the critical path.
	AfterSuccess bool `json:"after_success,omitempty"`
}

// Path is the requests of one execution run alone on an idle process
// (Run traces one after the steady load): its critical path, from the
// submit to the SUCCEEDED commit, then what follows it.
type Path struct {
	// Requests are in the order they started.
	Requests []PathRequest `json:"requests"`
	// AnsweredMs is when the submit's HTTP answer arrived,
	// SucceededMs the time of the execution_succeeded log line.
	AnsweredMs  float64 `json:"answered_ms"`
	SucceededMs float64 `json:"succeeded_ms"`
}

// Critical is the number of requests before the execution succeeded.
func (p Path) Critical() int {
	n := 0
	for _, r := range p.Requests {
		if !r.AfterSuccess {
			n++
		}
	}
	return n
}

// pathOf picks the requests of execution id out of traced (every request
// the proxies forwarded meanwhile): those whose request or answer names
// it (its slot, store.Slot: the execution table's keys carry the slot,
// the work items the whole id; the submit's write, the work item's send and receive, the reads and
// writes of its row, the stream records and history pages), and the
// deletes and visibility changes of the messages received for it (their
// requests name only a receipt handle). Times are taken from start (the
// submit request's start); succeeded is the execution_succeeded log
// line's time.
func pathOf(id string, traced []Traced, start, answered, succeeded time.Time, names schema.Names) Path {
	ms := func(t time.Time) float64 { return float64(t.Sub(start)) / float64(time.Millisecond) }
	slot := store.Slot(id)
	handles := map[string]bool{}
	for _, t := range traced {
		if t.Op == "SQS.ReceiveMessage" {
			var out struct {
				Messages []struct{ ReceiptHandle, Body string }
			}
			if json.Unmarshal(t.Response, &out) == nil {
				for _, m := range out.Messages {
					if strings.Contains(m.Body, slot) {
						handles[m.ReceiptHandle] = true
					}
				}
			}
		}
	}
	p := Path{AnsweredMs: ms(answered), SucceededMs: ms(succeeded)}
	for _, t := range traced {
		mine := bytes.Contains(t.Request, []byte(slot)) || bytes.Contains(t.Response, []byte(slot))
		if !mine && (t.Op == "SQS.DeleteMessage" || t.Op == "SQS.ChangeMessageVisibility") {
			var in struct{ ReceiptHandle string }
			mine = json.Unmarshal(t.Request, &in) == nil && handles[in.ReceiptHandle]
		}
		if !mine {
			continue
		}
		p.Requests = append(p.Requests, PathRequest{Op: t.Op, Target: target(t.Request, names),
			StartMs: ms(t.Start), EndMs: ms(t.End), Status: t.Status, AfterSuccess: t.Start.After(succeeded)})
	}
	slices.SortStableFunc(p.Requests, func(a, b PathRequest) int {
		switch {
		case a.StartMs < b.StartMs:
			return -1
		case a.StartMs > b.StartMs:
			return 1
		}
		return 0
	})
	return p
}

// target names the table, stream or queue a request addressed by its
// role.
func target(body []byte, n schema.Names) string {
	var in struct{ TableName, QueueUrl, StreamArn, ShardIterator string }
	if json.Unmarshal(body, &in) != nil {
		return ""
	}
	// A stream's ARN, and DynamoDB Local's iterators, name its table.
	if s := in.StreamArn + in.ShardIterator; s != "" && strings.Contains(s, "/"+n.ExecutionTable+"/") {
		return "execution table's stream"
	}
	tables := map[string]string{n.ExecutionTable: "execution table", n.PayloadTable: "payload table",
		n.HistoryTable: "history table", n.EffectTable: "effect table", n.DeadLetterTable: "dead-letter table"}
	if in.TableName != "" {
		return tables[in.TableName]
	}
	queues := map[string]string{n.WorkQueue: "work queue", n.UrgentQueue: "urgent queue", n.DLQQueue: "DLQ queue", n.PoisonQueue: "poison queue", n.RejectQueue: "reject queue"}
	if i := strings.LastIndexByte(in.QueueUrl, '/'); i >= 0 {
		return queues[in.QueueUrl[i+1:]]
	}
	return ""
}

// Markdown is the path as a numbered table.
func (p Path) Markdown() string {
	var b strings.Builder
	b.WriteString("| # | request | target | start ms | end ms |\n|---|---|---|---|---|\n")
	for i, r := range p.Requests {
		op := r.Op
		if r.Status/100 != 2 {
			op += fmt.Sprintf(" (HTTP %d)", r.Status)
		}
		if r.AfterSuccess {
			op += " (after SUCCEEDED)"
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %.1f | %.1f |\n", i+1, op, r.Target, r.StartMs, r.EndMs)
	}
	fmt.Fprintf(&b, "\nSubmit answered (HTTP 202) at %.1f ms; execution_succeeded logged at %.1f ms; %d requests before it.\n",
		p.AnsweredMs, p.SucceededMs, p.Critical())
	return b.String()
}

// pathTail is how long the trace goes on after the execution succeeded:
// the work item's delete and a history feed pass (the serve processes
// poll the stream every second) land in it.
const pathTail = 2500 * time.Millisecond

// pathLead is how long the trace runs before the submit: longer than the
// serve processes' long polls (crashtest.Stack.Env: 1 s).
const pathLead = 1200 * time.Millisecond

// path runs one execution alone on the first serve process, once the
// load is over, with the proxies tracing, and returns its requests; nil
// (logged) when it fails.
func (b *bench) path() *Path {
	time.Sleep(time.Second) // the load's stragglers (deletes, feed passes) end
	for _, p := range b.proxies {
		p.StartTrace()
	}
	// The poller's long poll in flight began before the trace: the next
	// one, which receives the work item, begins in it (the benchmark's
	// long polls last a second).
	time.Sleep(pathLead)
	var traced []Traced
	stop := func() {
		for _, p := range b.proxies {
			traced = append(traced, p.StopTrace()...)
		}
	}
	s := b.servers[0]
	at := time.Now()
	code, ans, err := crashtest.Submit(s.Addr, Pipeline, "path-0", []byte(Input))
	answered := time.Now()
	if err == nil && code != http.StatusAccepted {
		err = fmt.Errorf("HTTP %d, want 202", code)
	}
	if err != nil {
		stop()
		b.t.Logf("benchdurable: critical path: submit: %v", err)
		return nil
	}
	done, err := b.await([]submitted{{id: ans.ExecutionID, at: at}})
	if err != nil {
		stop()
		b.t.Logf("benchdurable: critical path: %v", err)
		return nil
	}
	time.Sleep(pathTail)
	stop()
	succeeded, _ := eventTime(done.succeeded[ans.ExecutionID])
	p := pathOf(ans.ExecutionID, traced, at, answered, succeeded, b.names)
	return &p
}
