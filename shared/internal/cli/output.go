package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/qasync/qasync/shared/client"
)

// writeJSON writes v as indented JSON and a newline.
func writeJSON(w io.Writer, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil { // plain documents: cannot happen
		fmt.Fprintf(w, "{\"error\": %q}\n", err.Error())
		return
	}
	_, _ = w.Write(append(b, '\n'))
}

// writeJSONLine writes v as one line of JSON (watch's stream).
func writeJSONLine(w io.Writer, v any) {
	b, _ := json.Marshal(v)
	_, _ = w.Write(append(b, '\n'))
}

// ts formats a time for tables: UTC, milliseconds; "-" when zero.
func ts(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

// dur formats a duration for humans: 12ms, 1.25s, 2m3s.
func dur(d time.Duration) string {
	switch {
	case d < 0:
		return "-"
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + "s"
	}
	return d.Truncate(time.Second).String()
}

// table writes rows as aligned columns.
func table(w io.Writer, header []string, rows [][]string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	_ = tw.Flush()
}

// fields writes name-value pairs as two aligned columns, leaving out
// empty values.
func fields(w io.Writer, kv ...string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			fmt.Fprintf(tw, "%s\t%s\n", kv[i], kv[i+1])
		}
	}
	_ = tw.Flush()
}

// step is "0 prepare": the API's 0-based step index and the step's name.
func step(index int, name string) string { return strconv.Itoa(index) + " " + name }

// errorText is "code: message (terminal reason)".
func errorText(e *client.ExecutionError) string {
	if e == nil {
		return ""
	}
	s := e.Code + ": " + e.Message
	if e.TerminalReason != "" {
		s += " (" + e.TerminalReason + ")"
	}
	return s
}

// printExecution writes a status document.
func printExecution(w io.Writer, e client.Execution) {
	pipeline := e.PipelineID
	if e.PipelineVersion != "" {
		pipeline += " (version " + e.PipelineVersion + ")"
	}
	var await string
	if a := e.Await; a != nil {
		await = a.AwaitID + " " + string(a.Status)
		if !a.TimeoutAt.IsZero() {
			await += ", times out " + ts(a.TimeoutAt)
		}
		if !a.CompletedAt.IsZero() {
			await += ", completed " + ts(a.CompletedAt)
		}
		if a.Late {
			await += " (late)"
		}
	}
	var nextDue, versionWait, cancel string
	if !e.NextDueAt.IsZero() {
		nextDue = ts(e.NextDueAt)
	}
	if !e.VersionWaitSince.IsZero() {
		versionWait = ts(e.VersionWaitSince)
	}
	if !e.CancelRequestedAt.IsZero() || e.CancelReason != "" {
		cancel = ts(e.CancelRequestedAt) + ": " + e.CancelReason
	}
	fields(w,
		"execution", e.ExecutionID,
		"pipeline", pipeline,
		"parent", parentText(e.Parent),
		"status", string(e.Status),
		"step", fmt.Sprintf("%s (attempt %d)", step(e.StepIndex, e.StepName), e.Attempt),
		"children", childrenText(e.Children),
		"version", strconv.FormatInt(e.Version, 10),
		"created", ts(e.CreatedAt),
		"updated", ts(e.UpdatedAt),
		"next due", nextDue,
		"waiting for version since", versionWait,
		"error", errorText(e.Error),
		"await", await,
		"cancel requested", cancel,
	)
}

// parentText is a map child's link to its parent: "<parent id> (child
// #2 of 3, map step 1)"; "" for an execution submitted on its own.
func parentText(p *client.ParentLink) string {
	if p == nil {
		return ""
	}
	return fmt.Sprintf("%s (child #%d, map step %d)", p.ExecutionID, p.Index, p.StepIndex)
}

// childrenText is a map parent's counts: "100: 12 succeeded, 1 failed,
// 25 running, 62 pending"; "" for an execution without a map.
func childrenText(c *client.ChildCounts) string {
	if c == nil {
		return ""
	}
	return fmt.Sprintf("%d: %d succeeded, %d failed, %d running, %d pending", c.Total, c.Succeeded, c.Failed, c.Running, c.Pending)
}

// fanOut is a list row's FAN-OUT cell: a map parent's number of children
// (a list answer carries only its total: status has the counts), a
// child's place and parent ("child #2 of <parent id>"), "-" for neither.
func fanOut(e client.Execution) string {
	var parts []string
	if c := e.Children; c != nil {
		parts = append(parts, fmt.Sprintf("%d children", c.Total))
	}
	if p := e.Parent; p != nil {
		parts = append(parts, fmt.Sprintf("child #%d of %s", p.Index, p.ExecutionID))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, "; ")
}

// printExecutions writes a list.
func printExecutions(w io.Writer, es []client.Execution) {
	rows := make([][]string, 0, len(es))
	for _, e := range es {
		code := "-"
		if e.Error != nil {
			code = e.Error.Code
		}
		rows = append(rows, []string{e.ExecutionID, e.PipelineID, string(e.Status), step(e.StepIndex, e.StepName),
			strconv.Itoa(e.Attempt), ts(e.CreatedAt), ts(e.UpdatedAt), code, fanOut(e)})
	}
	table(w, []string{"EXECUTION", "PIPELINE", "STATUS", "STEP", "ATTEMPT", "CREATED", "UPDATED", "ERROR", "FAN-OUT"}, rows)
}

// eventDetail is the free-text column of a history event.
func eventDetail(ev client.Event) string {
	var parts []string
	if ev.Error != nil {
		parts = append(parts, ev.Error.Code+": "+ev.Error.Message)
	}
	if !ev.WakeAt.IsZero() {
		parts = append(parts, "wakes at "+ts(ev.WakeAt))
	}
	if !ev.RetryAt.IsZero() {
		parts = append(parts, "retry at "+ts(ev.RetryAt))
	}
	if ev.Worker != "" {
		parts = append(parts, "worker "+ev.Worker)
	}
	if ev.Reason != "" {
		parts = append(parts, "reason: "+ev.Reason)
	}
	return strings.Join(parts, "; ")
}

// printHistory writes a history.
func printHistory(w io.Writer, h client.History) {
	rows := make([][]string, 0, len(h.Events))
	for _, ev := range h.Events {
		rows = append(rows, []string{strconv.Itoa(ev.Seq), ts(ev.At), string(ev.Type), step(ev.StepIndex, ev.StepName),
			strconv.Itoa(ev.Attempt), string(ev.Status), eventDetail(ev)})
	}
	table(w, []string{"SEQ", "AT", "TYPE", "STEP", "ATTEMPT", "STATUS", "DETAIL"}, rows)
}

// printDeadLetters writes dead-letter records.
func printDeadLetters(w io.Writer, rs []client.DeadLetter) {
	rows := make([][]string, 0, len(rs))
	for _, r := range rs {
		rows = append(rows, []string{ts(r.RecordedAt), r.ExecutionID, r.PipelineID, step(r.StepIndex, r.StepName),
			r.TerminalReason, r.ErrorCode + ": " + r.ErrorMessage})
	}
	table(w, []string{"RECORDED", "EXECUTION", "PIPELINE", "STEP", "REASON", "ERROR"}, rows)
}
