package cli

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/qasync/qasync/shared/client"
)

// writeJSON writes v as indented JSON and a newline (terminalSafeJSON).
func writeJSON(w io.Writer, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil { // plain documents: cannot happen
		fmt.Fprintf(w, "{\"error\": %q}\n", err.Error())
		return
	}
	_, _ = w.Write(append(terminalSafeJSON(b), '\n'))
}

// writeJSONLine writes v as one line of JSON (watch's stream).
func writeJSONLine(w io.Writer, v any) {
	b, _ := json.Marshal(v)
	_, _ = w.Write(append(terminalSafeJSON(b), '\n'))
}

// visible is the one function every server-supplied string goes through
// before the CLI prints it as text (table cells, name-value fields,
// problem titles and details, error messages, reasons, dead letters,
// watch and history lines, cursors and ids): it escapes what a terminal
// would act on or that would break the layout, so that a server cannot
// move the cursor, recolour, retitle the window or forge a row. Control
// characters (C0 including ESC, newline and tab; DEL; C1) become \xNN
// (\n, \r, \t for those three), bytes that are not UTF-8 \xNN, and the
// invisible characters that reorder or break a line (bidi controls,
// U+2028, U+2029) \uNNNN. Everything else, backslashes included, is
// left as it is.
func visible(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			return string(escapeText(nil, []byte(s), false))
		}
	}
	return s
}

// escapeText appends p to dst with visible's escapes; layout keeps
// newlines and tabs as they are (a result's text on a terminal). A rune
// cut off at the end of p is escaped byte by byte: a stream keeps it for
// the next write (terminalWriter).
func escapeText(dst, p []byte, layout bool) []byte {
	for len(p) > 0 {
		r, size := utf8.DecodeRune(p)
		switch {
		case r == utf8.RuneError && size <= 1:
			dst = fmt.Appendf(dst, `\x%02x`, p[0])
		case layout && (r == '\n' || r == '\t'):
			dst = append(dst, p[0])
		case r == '\n':
			dst = append(dst, `\n`...)
		case r == '\t':
			dst = append(dst, `\t`...)
		case r == '\r':
			dst = append(dst, `\r`...)
		case r < 0x20 || (r >= 0x7f && r < 0xa0):
			dst = fmt.Appendf(dst, `\x%02x`, r)
		case invisible(r):
			dst = fmt.Appendf(dst, `\u%04x`, r)
		default:
			dst = append(dst, p[:size]...)
		}
		p = p[size:]
	}
	return dst
}

// invisible reports whether r reorders or breaks a line without showing:
// a bidi control (U+202E turns the rest of a line around) or a line or
// paragraph separator.
func invisible(r rune) bool {
	return unicode.Is(unicode.Bidi_Control, r) || r == '\u2028' || r == '\u2029'
}

// terminalSafeJSON rewrites the characters of encoding/json's output a
// terminal would act on, which it leaves raw (DEL, C1 controls, bidi
// controls, bytes that are not UTF-8 in a json.RawMessage), as \u
// escapes. They can only be inside strings (JSON's own syntax is ASCII),
// where the escape is the same character: the document means exactly
// what it did. C0 controls are escaped by encoding/json already.
func terminalSafeJSON(b []byte) []byte {
	clean := true
	for _, c := range b {
		if c >= 0x7f {
			clean = false
			break
		}
	}
	if clean {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		switch {
		case r == utf8.RuneError && size <= 1:
			out = append(out, `\ufffd`...)
		case (r >= 0x7f && r < 0xa0) || invisible(r):
			out = fmt.Appendf(out, `\u%04x`, r)
		default:
			out = append(out, b[:size]...)
		}
		b = b[size:]
	}
	return out
}

// terminalWriter writes a result's bytes to a terminal with escapeText's
// escapes, newlines and tabs kept: the text reads as it is, and nothing
// in it acts on the terminal. A rune split between writes waits for its
// end (Close escapes what is left).
type terminalWriter struct {
	w       io.Writer
	pending []byte
	// last is the last byte written through, so that the caller can end
	// a result without a final newline with one.
	last byte
}

// Write escapes p (after the bytes left from the write before) and
// writes it; it reports all of p written.
func (t *terminalWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	t.last = p[len(p)-1]
	buf := append(t.pending, p...)
	// Keep an incomplete rune at the end for the next write.
	cut := len(buf)
	for i := len(buf) - 1; i >= 0 && i >= len(buf)-utf8.UTFMax; i-- {
		if utf8.RuneStart(buf[i]) {
			if !utf8.FullRune(buf[i:]) {
				cut = i
			}
			break
		}
	}
	t.pending = append([]byte(nil), buf[cut:]...)
	if _, err := t.w.Write(escapeText(nil, buf[:cut], true)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close writes what is left of a rune cut off at the end, escaped.
func (t *terminalWriter) Close() error {
	if len(t.pending) == 0 {
		return nil
	}
	_, err := t.w.Write(escapeText(nil, t.pending, true))
	t.pending = nil
	return err
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

// table writes rows as aligned columns, each cell through visible (a
// newline or tab in a cell cannot start a row or a column).
func table(w io.Writer, header []string, rows [][]string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		cells := make([]string, len(r))
		for i, c := range r {
			cells[i] = visible(c)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	_ = tw.Flush()
}

// fields writes name-value pairs as two aligned columns, leaving out
// empty values; each value goes through visible.
func fields(w io.Writer, kv ...string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			fmt.Fprintf(tw, "%s\t%s\n", kv[i], visible(kv[i+1]))
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
	var nextDue, versionWait, keyWait, cancel, rateLimit, rateWait string
	if !e.KeyWaitSince.IsZero() {
		keyWait = ts(e.KeyWaitSince)
	}
	if e.RateLimit != "" {
		rateLimit = e.RateLimit
		if e.RateKey != "" {
			rateLimit += " (key " + e.RateKey + ")"
		}
	}
	if !e.RateLimitedUntil.IsZero() {
		rateWait = ts(e.RateLimitedUntil)
	}
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
		"key", e.IdempotencyKey,
		"parent", parentText(e.Parent),
		"status", string(e.Status),
		"priority", strings.TrimPrefix(priorityText(e.Priority), "-"),
		"step", fmt.Sprintf("%s (attempt %d)", step(e.StepIndex, e.StepName), e.Attempt),
		"children", childrenText(e.Children),
		"version", strconv.FormatInt(e.Version, 10),
		"created", ts(e.CreatedAt),
		"updated", ts(e.UpdatedAt),
		"next due", nextDue,
		"waiting for version since", versionWait,
		"concurrency key", e.ConcurrencyKey,
		"waiting for key since", keyWait,
		"rate limit", rateLimit,
		"rate limited until", rateWait,
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
		rows = append(rows, []string{e.ExecutionID, e.PipelineID, string(e.Status), priorityText(e.Priority), step(e.StepIndex, e.StepName),
			strconv.Itoa(e.Attempt), ts(e.CreatedAt), ts(e.UpdatedAt), code, fanOut(e)})
	}
	table(w, []string{"EXECUTION", "PIPELINE", "STATUS", "PRIORITY", "STEP", "ATTEMPT", "CREATED", "UPDATED", "ERROR", "FAN-OUT"}, rows)
}

// priorityText is an execution's priority ("-" for one submitted before
// priorities).
func priorityText(p int) string {
	if p == 0 {
		return "-"
	}
	return strconv.Itoa(p)
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

// printDeadLetters writes dead-letter records: NOW is the execution's
// status now ("gone" once its row expired), OUTSTANDING whether it still
// ends in the record's failure.
func printDeadLetters(w io.Writer, rs []client.DeadLetter) {
	rows := make([][]string, 0, len(rs))
	for _, r := range rs {
		now := string(r.CurrentStatus)
		if now == "" {
			now = "gone"
		}
		rows = append(rows, []string{ts(r.RecordedAt), r.ExecutionID, r.PipelineID, step(r.StepIndex, r.StepName),
			r.TerminalReason, now, yesNo(r.Outstanding), r.ErrorCode + ": " + r.ErrorMessage})
	}
	table(w, []string{"RECORDED", "EXECUTION", "PIPELINE", "STEP", "REASON", "NOW", "OUTSTANDING", "ERROR"}, rows)
}

// yesNo is a boolean cell.
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// printDeadLetterCounts writes the dead-letter counts by error code, the
// most records first, and when they are not of every record, of how many.
func printDeadLetterCounts(w io.Writer, n client.DeadLetterCounts) {
	codes := slices.Collect(maps.Keys(n.ByCode))
	for code := range n.OutstandingByCode {
		if _, ok := n.ByCode[code]; !ok {
			codes = append(codes, code)
		}
	}
	slices.SortFunc(codes, func(a, b string) int {
		return cmp.Or(cmp.Compare(n.ByCode[b], n.ByCode[a]), cmp.Compare(a, b))
	})
	rows := make([][]string, 0, len(codes))
	for _, code := range codes {
		rows = append(rows, []string{code, strconv.Itoa(n.ByCode[code]), strconv.Itoa(n.OutstandingByCode[code])})
	}
	table(w, []string{"CODE", "RECORDS", "OUTSTANDING"}, rows)
	if !n.Complete {
		fmt.Fprintf(w, "(of the newest %d records: there are more)\n", n.Scanned)
	}
}

// currentSteps returns the steps of p's current version (of its last
// version when none is current).
func currentSteps(p client.Pipeline) []client.PipelineStep {
	for _, v := range p.Versions {
		if v.Version == p.CurrentVersion {
			return v.Steps
		}
	}
	if len(p.Versions) > 0 {
		return p.Versions[len(p.Versions)-1].Steps
	}
	return nil
}

// stepsText is "prepare (step), fan (map)".
func stepsText(steps []client.PipelineStep) string {
	parts := make([]string, len(steps))
	for i, st := range steps {
		parts[i] = st.Name + " (" + st.Kind + ")"
	}
	return strings.Join(parts, ", ")
}

// versionsText is a pipeline's number of versions, "2 (1 draining)".
func versionsText(p client.Pipeline) string {
	draining := 0
	for _, v := range p.Versions {
		if v.Draining {
			draining++
		}
	}
	s := strconv.Itoa(len(p.Versions))
	if draining > 0 {
		s += fmt.Sprintf(" (%d draining)", draining)
	}
	return s
}

// printPipelines writes the pipeline list: each pipeline's current
// version, its number of versions and the current version's steps.
func printPipelines(w io.Writer, ps []client.Pipeline) {
	rows := make([][]string, 0, len(ps))
	for _, p := range ps {
		rows = append(rows, []string{p.PipelineID, p.CurrentVersion, versionsText(p), stepsText(currentSteps(p))})
	}
	table(w, []string{"PIPELINE", "CURRENT VERSION", "VERSIONS", "STEPS"}, rows)
}

// printPipeline writes one pipeline: each version with its steps and the
// input schema of its first step, pretty-printed ("any input" without
// one).
func printPipeline(w io.Writer, p client.Pipeline) {
	fields(w, "pipeline", p.PipelineID, "current version", p.CurrentVersion, "versions", versionsText(p))
	for _, v := range p.Versions {
		var marks []string
		if v.Version == p.CurrentVersion {
			marks = append(marks, "current")
		}
		if v.Draining {
			marks = append(marks, "draining")
		}
		if v.Label != "" {
			marks = append(marks, "label "+v.Label)
		}
		head := "\nversion " + visible(v.Version)
		if len(marks) > 0 {
			head += " (" + visible(strings.Join(marks, ", ")) + ")"
		}
		fmt.Fprintln(w, head)
		rows := make([][]string, 0, len(v.Steps))
		for i, st := range v.Steps {
			rows = append(rows, []string{strconv.Itoa(i), st.Name, st.Kind})
		}
		table(w, []string{"STEP", "NAME", "KIND"}, rows)
		if len(v.InputSchema) == 0 {
			fmt.Fprintln(w, "input: any input")
			continue
		}
		fmt.Fprintln(w, "input schema:")
		var b bytes.Buffer
		if err := json.Indent(&b, v.InputSchema, "", "  "); err != nil { // decoded JSON: cannot happen
			fmt.Fprintln(w, visible(string(v.InputSchema)))
			continue
		}
		_, _ = w.Write(append(terminalSafeJSON(b.Bytes()), '\n'))
	}
}
