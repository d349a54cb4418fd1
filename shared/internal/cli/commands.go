package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// maxPage is the largest page the API serves (store.MaxListLimit).
const maxPage = store.MaxListLimit

// runFunc runs a command with its positional arguments.
type runFunc = func(ctx context.Context, s *session, args []string) error

// commands are the client commands, in the order of the usage.
var commands = []*command{
	{name: "pipelines", usage: "pipelines [ID]", summary: "list the server's pipelines, or describe one",
		help: `Without ID, lists the pipelines the server runs, sorted by id: each one's current version
(the version new submissions are bound to), its number of versions (older ones still
finishing their executions are draining) and the current version's steps with their kinds
(step, sleep, map, child). With ID, describes pipeline ID: each version with its steps and
the JSON Schema of the input its first step decodes, pretty-printed ("any input" when the
step takes any). An unknown pipeline exits 3. With -o json: the server's document,
{"pipelines": [...]} or the one pipeline.`, flags: pipelinesCmd},
	{name: "submit", usage: "submit PIPELINE [--key K] [--data JSON|@file] [--priority N]", summary: "submit an execution of PIPELINE",
		help: `Submits an execution of PIPELINE with the input --data (JSON text, @file, or @- for
stdin; default {}) and prints the submission: the execution id and its status. With
--key the submission is idempotent: the same key and input give the same execution
("duplicate": true) and nothing runs twice.`, flags: submitCmd},
	{name: "status", usage: "status ID", summary: "print an execution's status document",
		help: `Prints the status document of execution ID: status, current step and attempt,
version, times, last error and await; for a map's child its parent (id, element index,
map step), for a map's parent the counts of its children (total, succeeded, failed,
running, pending) while it waits for them and after.`, flags: statusCmd},
	{name: "result", usage: "result ID", summary: "print a succeeded execution's result",
		help: `Writes the result of execution ID (the bytes of its last step) to stdout as they
arrive, whatever its size: piped, exactly as they are; on a terminal, newlines and tabs
as they are and other control characters escaped (\x1b). With -o json: {"contentType",
"messageType", "data"} (data is the JSON result itself, or "dataBase64" for other media
types), for a result of at most 16 MiB. Before success it exits 4 (conflict).`, flags: resultCmd},
	{name: "input", usage: "input ID", summary: "print the input an execution was submitted with (operator)",
		help: `Writes the input execution ID was submitted with (in any status) to stdout as result
writes a result: piped, exactly the bytes; on a terminal, newlines and tabs as they are
and other control characters escaped (\x1b), with a final newline. With -o json:
{"contentType", "messageType", "data"} (data is a JSON input itself, or "dataBase64" for
other media types). An input larger than 1 MiB is refused (exit 1, the size named).
An operator route, because an input can hold personal data: the admin token locally
(QASYNC_ADMIN_TOKEN or --admin-token-file), the operator permission behind API Gateway;
the server logs every input it serves (payload_viewed: who, which execution, the size;
never the bytes).`, flags: inputCmd},
	{name: "watch", usage: "watch ID [--display auto|live|plain]", summary: "follow an execution's steps until it ends",
		help: `Follows execution ID until it is terminal (SUCCEEDED, FAILED, DLQ, CANCELLED), polling
its status with backoff and reading its history where the server has one (each read
after the first asks only for the events after the last one it got). On a terminal
it shows one progress line per step, rewritten in place; piped, it prints one plain line
per history event (per status change on a server without the history route). With -o json it prints each new status document as one JSON line.
It exits 0 when the execution succeeded and 5 when it ended otherwise.`, flags: watchCmd},
	{name: "list", usage: "list [--pipeline P] [--status S,...] [--limit N] | --key K", summary: "list executions, newest first, or find one by idempotency key",
		help: `Lists the tenant's executions, newest first, following the server's cursors until
--limit executions (0: all). The FAN-OUT column marks a map's parent with its number
of children (status prints their counts) and a map's child with its element index and
parent. With -o json: {"executions": [...], "nextCursor"} where nextCursor (present
when --limit stopped the list) continues it with --cursor.
With --key K, the one execution the tenant submitted under the idempotency key K, or
none (a client that lost a submit's answer finds its execution without the id); --key
does not combine with --pipeline, --status or --cursor.`, flags: listCmd},
	{name: "history", usage: "history ID [--limit N] [--cursor C]", summary: "print an execution's history",
		help: `Prints the events of execution ID in commit order: submitted, each step started,
succeeded or failed (with the retry's due time), awaits, re-drives, cancels, the end.
The server answers a page of events at a time (up to 1,000 a request): history follows
the pages to the end, or until --limit events (0: all); when --limit stopped it, it
prints on stderr the --cursor that continues. --cursor C starts after C: a nextCursor
or endCursor of an earlier answer. With -o json: {"executionId", "events", "nextCursor",
"endCursor"}: nextCursor (present when --limit stopped it) continues with --cursor;
endCursor is where the events end: --cursor with it later prints only the events that
joined since.`, flags: historyCmd},
	{name: "cancel", usage: "cancel ID --reason R", summary: "cancel an execution (operator)",
		help: `Cancels execution ID: a queued, retrying, waiting or parked execution becomes CANCELLED
at once; a running step is cancelled at its next lease renewal and the execution ends
CANCELLED. Cancelling a CANCELLED execution changes nothing; a SUCCEEDED, FAILED or DLQ
one exits 4 (conflict). An operator route: the admin token locally (QASYNC_ADMIN_TOKEN
or --admin-token-file), the route's IAM permission behind API Gateway.`, flags: cancelCmd},
	{name: "redrive", usage: "redrive ID --reason R | --filter F --reason R [--rate N] [--dry-run] [--key K] | --status REDRIVE_ID", summary: "re-drive one execution, or many by filter (operator)",
		help: `redrive ID --reason R
    sends a DLQ or FAILED execution back to its failed step for one more attempt
    (a REMOTE_OUTCOME_UNKNOWN one with --confirm-no-remote-effect). Another status exits 4.
redrive --filter pipelineId=P,status=DLQ,errorCode=C,createdAfter=T,createdBefore=T --reason R [--rate N] [--dry-run] [--key K] [--wait]
    starts a durable bulk re-drive of the executions the filter selects (status is DLQ
    and/or FAILED and may repeat: status=DLQ,status=FAILED; default both; times are
    RFC 3339, exclusive), at most --rate per second (default the server's, 10); --dry-run
    only counts them. Prints the re-drive id, how many matched and whether the key named
    a job already (duplicate). The server's sweeper loop drives the job (qasync serve
    looks for new jobs every few seconds): --wait follows its progress until done.
    The request carries an idempotency key, --key or a new one: when the answer is lost
    (the connection dropped, a 5xx) the command prints its key, and the same command
    with --key K answers the job it may have started instead of starting a second one.
redrive --status REDRIVE_ID
    prints a bulk re-drive's progress: matched, redriven, skipped, failed, done, dry run.
Each re-driven execution gets the re-drive's audit record ("redrive <id>: <reason>" for a
bulk re-drive). An operator route: the admin token locally (QASYNC_ADMIN_TOKEN or
--admin-token-file), the route's IAM permission behind API Gateway.`, flags: redriveCmd},
	{name: "dead-letters", usage: "dead-letters [--pipeline P] [--outstanding] [--limit N] | --counts [--pipeline P]", summary: "list dead-letter records, newest first, or count them by error code",
		help: `Lists the tenant's dead-letter records, newest first: when, which execution and step,
the terminal reason, what became of the execution since (NOW: its status now, "gone"
once its row expired; OUTSTANDING: yes while it still ends in this record's failure,
no once a re-drive moved it on) and the error. Follows cursors until --limit records
(0: all). --outstanding keeps the outstanding records: the ones still to act on.
With --counts, counts the records and the outstanding ones by error code (CODE,
RECORDS, OUTSTANDING) over the newest records up to the server's bound (5,000), and
says so when there are more. With -o json: {"deadLetters": [...], "nextCursor"}, or
the counts {"byCode", "outstandingByCode", "scanned", "complete"}.`, flags: deadLettersCmd},
}

// args checks the number of positional arguments against names.
func wantArgs(args []string, names ...string) error {
	switch {
	case len(args) < len(names):
		return usagef("missing %s", strings.Join(names[len(args):], " "))
	case len(args) > len(names):
		return usagef("unexpected argument %q", args[len(names)])
	}
	for i, a := range args {
		if strings.TrimSpace(a) == "" {
			return usagef("%s is empty", names[i])
		}
	}
	return nil
}

// readData reads --data: JSON text, @file, or @- for stdin.
func (s *session) readData(data string) ([]byte, error) {
	switch {
	case data == "":
		return []byte("{}"), nil
	case data == "@-":
		b, err := io.ReadAll(s.env.Stdin)
		if err != nil {
			return nil, fmt.Errorf("reading the input from stdin: %w", err)
		}
		return b, nil
	case strings.HasPrefix(data, "@"):
		b, err := os.ReadFile(data[1:])
		if err != nil {
			return nil, usagef("--data: %v", err)
		}
		return b, nil
	}
	return []byte(data), nil
}

func submitCmd(fs *flag.FlagSet) runFunc {
	key := fs.String("key", "", "idempotency key (the Idempotency-Key header)")
	data := fs.String("data", "", "the input: JSON text, @file, or @- for stdin (default {})")
	contentType := fs.String("content-type", payload.ContentTypeJSON, "media type of the input")
	messageType := fs.String("message-type", "", "protobuf message name of an application/x-protobuf input")
	priority := fs.Int("priority", 0, "priority, 1 (most urgent) to 5 (least); default: the pipeline's (3 unless it declares one)")
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, "PIPELINE"); err != nil {
			return err
		}
		given := false
		fs.Visit(func(f *flag.Flag) { given = given || f.Name == "priority" })
		if given {
			if pipeline.CheckPriority(*priority) != nil {
				return usagef("--priority must be %d (most urgent) to %d (least urgent), got %d", pipeline.HighestPriority, pipeline.LowestPriority, *priority)
			}
		}
		body, err := s.readData(*data)
		if err != nil {
			return err
		}
		c, err := s.client()
		if err != nil {
			return err
		}
		sub, err := c.Submit(ctx, client.SubmitRequest{PipelineID: args[0], IdempotencyKey: *key, Body: body,
			ContentType: *contentType, MessageType: *messageType, Priority: *priority})
		if err != nil {
			return err
		}
		if s.json() {
			writeJSON(s.env.Stdout, sub)
			return nil
		}
		fields(s.env.Stdout, "execution", sub.ExecutionID, "pipeline", sub.PipelineID, "status", string(sub.Status),
			"duplicate", strconv.FormatBool(sub.Duplicate), "submitted", ts(sub.SubmittedAt))
		return nil
	}
}

func statusCmd(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, "ID"); err != nil {
			return err
		}
		c, err := s.client()
		if err != nil {
			return err
		}
		e, err := c.Status(ctx, args[0])
		if err != nil {
			return err
		}
		s.printExecution(e)
		return nil
	}
}

func (s *session) printExecution(e client.Execution) {
	if s.json() {
		writeJSON(s.env.Stdout, e)
		return
	}
	printExecution(s.env.Stdout, e)
}

// resultDocument is the -o json form of result and input.
type resultDocument struct {
	// ContentType and MessageType are the bytes' media type and
	// protobuf message.
	ContentType string `json:"contentType"`
	MessageType string `json:"messageType,omitempty"`
	// Data is a JSON payload itself; DataBase64 any other payload.
	Data       json.RawMessage `json:"data,omitempty"`
	DataBase64 []byte          `json:"dataBase64,omitempty"`
}

// documentOf is r's -o json form: the JSON itself when r is valid JSON
// of a JSON media type, else base64.
func documentOf(r client.Result) resultDocument {
	d := resultDocument{ContentType: r.ContentType, MessageType: r.MessageType}
	if isJSON(r.ContentType) && json.Valid(r.Data) {
		d.Data = r.Data
	} else {
		d.DataBase64 = r.Data
	}
	return d
}

// writePayload writes the bytes write produces (a result, an input) to
// stdout: piped, exactly as they are; on a terminal through
// terminalWriter (newlines and tabs kept, other control characters
// escaped), with a final newline when they lack one.
func (s *session) writePayload(write func(io.Writer) (int64, error)) error {
	if s.env.Terminal == nil || !s.env.Terminal() {
		_, err := write(s.env.Stdout)
		return err
	}
	tw := &terminalWriter{w: s.env.Stdout}
	n, err := write(tw)
	if cerr := tw.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > 0 && tw.last != '\n' {
		_, err = io.WriteString(s.env.Stdout, "\n")
	}
	return err
}

func resultCmd(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, "ID"); err != nil {
			return err
		}
		c, err := s.client()
		if err != nil {
			return err
		}
		if s.json() {
			// The document holds the result: at most
			// client.MaxDocumentBytes of it.
			r, err := c.Result(ctx, args[0])
			if err != nil {
				return err
			}
			writeJSON(s.env.Stdout, documentOf(r))
			return nil
		}
		// The bytes as they arrive, never all in memory.
		return s.writePayload(func(w io.Writer) (int64, error) {
			_, n, err := c.ResultTo(ctx, args[0], w)
			return n, err
		})
	}
}

func inputCmd(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, "ID"); err != nil {
			return err
		}
		c, err := s.client()
		if err != nil {
			return err
		}
		// The server serves at most 1 MiB of input (413 beyond).
		in, err := c.Input(ctx, args[0])
		if err != nil {
			return err
		}
		if s.json() {
			writeJSON(s.env.Stdout, documentOf(in))
			return nil
		}
		return s.writePayload(func(w io.Writer) (int64, error) {
			n, err := w.Write(in.Data)
			return int64(n), err
		})
	}
}

// isJSON reports whether a media type is JSON (application/json, +json).
func isJSON(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	return mt == payload.ContentTypeJSON || strings.HasSuffix(mt, "+json")
}

// parseStatuses reads a comma-separated status list; an unknown status is
// a usage error.
func parseStatuses(flagName, list string) ([]store.Status, error) {
	var out []store.Status
	for _, p := range strings.Split(list, ",") {
		p = strings.ToUpper(strings.TrimSpace(p))
		if p == "" {
			continue
		}
		st := store.Status(p)
		if !st.Valid() {
			return nil, usagef("%s %q: not a status (QUEUED, RUNNING, WAIT_RETRY, WAITING_EXTERNAL, REMOTE_OUTCOME_UNKNOWN, SUCCEEDED, FAILED, DLQ, CANCELLED)", flagName, p)
		}
		out = append(out, st)
	}
	return out, nil
}

// pageFlags are the paging flags of list and dead-letters.
type pageFlags struct {
	limit, pageSize int
	cursor          string
}

func (p *pageFlags) register(fs *flag.FlagSet, what string) {
	fs.IntVar(&p.limit, "limit", 50, "the most "+what+" to print, following cursors (0: all)")
	fs.IntVar(&p.pageSize, "page-size", 0, fmt.Sprintf("%s per request, 1 to %d (default: --limit, at most %d)", what, maxPage, maxPage))
	fs.StringVar(&p.cursor, "cursor", "", "continue from a previous list's nextCursor")
}

func (p *pageFlags) check() error {
	switch {
	case p.limit < 0:
		return usagef("--limit %d: must be 0 (all) or more", p.limit)
	case p.pageSize < 0 || p.pageSize > maxPage:
		return usagef("--page-size %d: must be 1 to %d", p.pageSize, maxPage)
	case p.pageSize == 0 && p.limit > 0:
		p.pageSize = min(p.limit, maxPage)
	case p.pageSize == 0:
		p.pageSize = maxPage
	}
	return nil
}

// collect fetches pages until limit items (0: all) or the last page, and
// returns the items and, when limit stopped it, the cursor that
// continues.
func collect[T any](p pageFlags, fetch func(limit int, cursor string) ([]T, string, error)) ([]T, string, error) {
	var all []T
	cursor := p.cursor
	for {
		n := p.pageSize
		if p.limit > 0 {
			n = min(n, p.limit-len(all))
		}
		items, next, err := fetch(n, cursor)
		if err != nil {
			return nil, "", err
		}
		all = append(all, items...)
		if next == "" || next == cursor {
			return all, "", nil
		}
		cursor = next
		if p.limit > 0 && len(all) >= p.limit {
			return all, next, nil
		}
	}
}

func listCmd(fs *flag.FlagSet) runFunc {
	pipelineID := fs.String("pipeline", "", "only this pipeline's executions")
	status := fs.String("status", "", "only these statuses, comma-separated (e.g. DLQ,FAILED)")
	key := fs.String("key", "", "the execution submitted under this idempotency key (one or none; not with --pipeline, --status or --cursor)")
	var p pageFlags
	p.register(fs, "executions")
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args); err != nil {
			return err
		}
		if *key != "" {
			for _, other := range []struct{ name, value string }{{"--pipeline", *pipelineID}, {"--status", *status}, {"--cursor", p.cursor}} {
				if other.value != "" {
					return usagef("--key cannot be combined with %s: a key names at most one execution", other.name)
				}
			}
		}
		statuses, err := parseStatuses("--status", *status)
		if err != nil {
			return err
		}
		if err := p.check(); err != nil {
			return err
		}
		c, err := s.client()
		if err != nil {
			return err
		}
		es, next, err := collect(p, func(limit int, cursor string) ([]client.Execution, string, error) {
			pg, err := c.List(ctx, client.ListQuery{PipelineID: *pipelineID, Statuses: statuses, Limit: limit, Cursor: cursor, IdempotencyKey: *key})
			return pg.Executions, pg.NextCursor, err
		})
		if err != nil {
			return err
		}
		if s.json() {
			writeJSON(s.env.Stdout, client.ExecutionPage{Executions: append([]client.Execution{}, es...), NextCursor: next})
			return nil
		}
		printExecutions(s.env.Stdout, es)
		if *key != "" && len(es) == 0 {
			fmt.Fprintf(s.env.Stderr, "(no execution under the key %s)\n", visible(*key))
		}
		s.more(next)
		return nil
	}
}

// more tells a human that a list continues.
func (s *session) more(next string) {
	if next != "" {
		fmt.Fprintf(s.env.Stderr, "(more: add --cursor %s)\n", visible(next))
	}
}

func historyCmd(fs *flag.FlagSet) runFunc {
	limit := fs.Int("limit", 0, "the most events to print, following cursors (0: all)")
	cursor := fs.String("cursor", "", "start after this cursor (a nextCursor or endCursor of an earlier answer)")
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, "ID"); err != nil {
			return err
		}
		if *limit < 0 {
			return usagef("--limit %d: must be 0 (all) or more", *limit)
		}
		c, err := s.client()
		if err != nil {
			return err
		}
		var h client.History
		if *limit == 0 {
			h, err = c.HistoryAfter(ctx, args[0], *cursor)
		} else {
			h, err = historyUpTo(ctx, c, args[0], *cursor, *limit)
		}
		if err != nil {
			return err
		}
		if s.json() {
			writeJSON(s.env.Stdout, h)
			return nil
		}
		printHistory(s.env.Stdout, h)
		s.more(h.NextCursor)
		return nil
	}
}

// historyUpTo reads up to limit events of a history after cursor,
// following its pages; NextCursor continues it when limit stopped it.
func historyUpTo(ctx context.Context, c *client.Client, id, cursor string, limit int) (client.History, error) {
	var last client.History
	p := pageFlags{limit: limit, pageSize: min(limit, client.MaxHistoryPage), cursor: cursor}
	events, next, err := collect(p, func(n int, cursor string) ([]client.Event, string, error) {
		page, err := c.HistoryPage(ctx, id, client.HistoryPageOptions{Limit: n, Cursor: cursor})
		if err == nil {
			last = page
		}
		return page.Events, page.NextCursor, err
	})
	if err != nil {
		return client.History{}, err
	}
	return client.History{ExecutionID: last.ExecutionID, Events: append([]client.Event{}, events...), NextCursor: next, EndCursor: last.EndCursor}, nil
}

func cancelCmd(fs *flag.FlagSet) runFunc {
	reason := fs.String("reason", "", "why (the audit note; required)")
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, "ID"); err != nil {
			return err
		}
		if strings.TrimSpace(*reason) == "" {
			return usagef("--reason is required")
		}
		c, err := s.client()
		if err != nil {
			return err
		}
		e, err := c.Cancel(ctx, args[0], client.CancelRequest{Reason: *reason})
		if err != nil {
			return err
		}
		s.printExecution(e)
		return nil
	}
}

// parseFilter reads --filter key=value,...: pipelineId, status (may
// repeat), errorCode, createdAfter, createdBefore (RFC 3339).
func parseFilter(spec string, f *client.RedriveFilter) error {
	for _, kv := range strings.Split(spec, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || v == "" {
			return usagef("--filter %q: want key=value", kv)
		}
		switch strings.ToLower(k) {
		case "pipelineid", "pipeline":
			f.PipelineID = v
		case "status":
			st, err := parseStatuses("--filter status", v)
			if err != nil {
				return err
			}
			f.Statuses = append(f.Statuses, st...)
		case "errorcode":
			f.ErrorCode = v
		case "createdafter", "createdbefore":
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return usagef("--filter %s=%q: want an RFC 3339 time such as 2026-11-29T08:00:00Z", k, v)
			}
			if strings.ToLower(k) == "createdafter" {
				f.CreatedAfter = t
			} else {
				f.CreatedBefore = t
			}
		default:
			return usagef("--filter: unknown key %q (pipelineId, status, errorCode, createdAfter, createdBefore)", k)
		}
	}
	return nil
}

// filterFlag collects every --filter given.
type filterFlag []string

// String returns the filters given, joined (flag.Value).
func (f *filterFlag) String() string { return strings.Join(*f, ",") }

// Set adds one --filter (flag.Value).
func (f *filterFlag) Set(v string) error { *f = append(*f, v); return nil }

func redriveCmd(fs *flag.FlagSet) runFunc {
	reason := fs.String("reason", "", "why (the audit note; required to re-drive)")
	var filters filterFlag
	fs.Var(&filters, "filter", "bulk: select by `key=value,...`: pipelineId, status (may repeat), errorCode, createdAfter, createdBefore (RFC 3339)")
	rate := fs.Int("rate", 0, "bulk: re-drives per second at most (default: the server's)")
	dryRun := fs.Bool("dry-run", false, "bulk: count the matching executions, re-drive none")
	wait := fs.Bool("wait", false, "bulk: follow the progress until done")
	progress := fs.String("status", "", "print the progress of bulk re-drive `REDRIVE_ID`")
	key := fs.String("key", "", "bulk: idempotency key of the job (default: a new one); the same command with the same key is safe to retry")
	expected := fs.Int64("expected-version", 0, "one: re-drive only if the execution is at this version")
	confirm := fs.Bool("confirm-no-remote-effect", false, "one: the remote invocation of a REMOTE_OUTCOME_UNKNOWN execution can make no more effects")
	return func(ctx context.Context, s *session, args []string) error {
		switch {
		case *progress != "":
			if len(args) > 0 || len(filters) > 0 || *reason != "" {
				return usagef("--status REDRIVE_ID takes no execution id, --filter or --reason")
			}
			return s.redriveProgress(ctx, *progress, false)
		case len(filters) > 0:
			if len(args) > 0 {
				return usagef("give an execution id or --filter, not both")
			}
			var f client.RedriveFilter
			for _, spec := range filters {
				if err := parseFilter(spec, &f); err != nil {
					return err
				}
			}
			if strings.TrimSpace(*reason) == "" {
				return usagef("--reason is required")
			}
			if *rate < 0 {
				return usagef("--rate %d: must be positive", *rate)
			}
			return s.bulkRedrive(ctx, client.BulkRedriveRequest{Filter: f, Reason: *reason, RatePerSecond: *rate, DryRun: *dryRun, IdempotencyKey: *key}, *wait)
		}
		if *key != "" {
			return usagef("--key is for a bulk re-drive (--filter)")
		}
		if err := wantArgs(args, "ID"); err != nil {
			return usagef("%v (or --filter F, or --status REDRIVE_ID)", err)
		}
		if strings.TrimSpace(*reason) == "" {
			return usagef("--reason is required")
		}
		req := client.RedriveRequest{Reason: *reason, ConfirmedNoRemoteEffect: *confirm}
		if *expected != 0 {
			req.ExpectedVersion = expected
		}
		c, err := s.client()
		if err != nil {
			return err
		}
		e, err := c.Redrive(ctx, args[0], req)
		if err != nil {
			return err
		}
		s.printExecution(e)
		return nil
	}
}

// bulkRedrive starts a bulk re-drive under req's idempotency key (a new
// one when none was given) and prints it; when the answer is lost it
// tells the key to retry with.
func (s *session) bulkRedrive(ctx context.Context, req client.BulkRedriveRequest, wait bool) error {
	c, err := s.client()
	if err != nil {
		return err
	}
	if req.IdempotencyKey == "" {
		req.IdempotencyKey = client.NewIdempotencyKey()
	}
	r, err := c.StartRedrives(ctx, req)
	if err != nil {
		if outcomeUnknown(err) {
			fmt.Fprintf(s.env.Stderr, "qasync %s: the bulk re-drive may have started; to reach its job rather than start another, run the command again with --key %s\n",
				s.cmd, visible(req.IdempotencyKey))
		}
		return err
	}
	if s.json() && !wait {
		writeJSON(s.env.Stdout, r)
		return nil
	}
	if !s.json() {
		fields(s.env.Stdout, "redrive", r.RedriveID, "matched", strconv.Itoa(r.Matched), "dry run", strconv.FormatBool(req.DryRun),
			"duplicate", strconv.FormatBool(r.Duplicate))
	}
	if !wait {
		if !req.DryRun && !s.json() {
			fmt.Fprintf(s.env.Stderr, "(progress: qasync redrive --status %s)\n", visible(r.RedriveID))
		}
		return nil
	}
	return s.redriveProgress(ctx, r.RedriveID, true)
}

// outcomeUnknown reports whether a request that failed with err may
// still have done its work: no answer arrived (a transport error, a
// timeout, an interruption) or the server failed (5xx).
func outcomeUnknown(err error) bool {
	var ce *client.Error
	if errors.As(err, &ce) {
		return ce.StatusCode >= 500
	}
	return !errors.Is(err, client.ErrMissingArgument)
}

// redriveProgress prints a bulk re-drive's progress, once or (follow)
// until it is done.
func (s *session) redriveProgress(ctx context.Context, id string, follow bool) error {
	c, err := s.client()
	if err != nil {
		return err
	}
	pause := s.pollMin()
	for {
		p, err := c.RedriveProgress(ctx, id)
		if err != nil {
			return err
		}
		if !follow || p.Done {
			if s.json() {
				writeJSON(s.env.Stdout, p)
			} else {
				fields(s.env.Stdout, "redrive", p.RedriveID, "matched", strconv.Itoa(p.Matched), "redriven", strconv.Itoa(p.Redriven),
					"skipped", strconv.Itoa(p.Skipped), "failed", strconv.Itoa(p.Failed), "done", strconv.FormatBool(p.Done),
					"dry run", strconv.FormatBool(p.DryRun))
			}
			return nil
		}
		if !s.json() {
			fmt.Fprintf(s.env.Stderr, "redriven %d, skipped %d, failed %d of %d\n", p.Redriven, p.Skipped, p.Failed, p.Matched)
		}
		if err := sleep(ctx, pause); err != nil {
			return err
		}
		pause = min(pause*2, s.pollMax())
	}
}

func (s *session) pollMin() time.Duration {
	if s.env.PollMin > 0 {
		return s.env.PollMin
	}
	return 200 * time.Millisecond
}

func (s *session) pollMax() time.Duration {
	if s.env.PollMax > 0 {
		return s.env.PollMax
	}
	return 3 * time.Second
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func deadLettersCmd(fs *flag.FlagSet) runFunc {
	pipelineID := fs.String("pipeline", "", "only this pipeline's records")
	outstanding := fs.Bool("outstanding", false, "only the outstanding records: their execution still ends in their failure")
	counts := fs.Bool("counts", false, "count the records and the outstanding ones by error code instead of listing them")
	var p pageFlags
	p.register(fs, "records")
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args); err != nil {
			return err
		}
		if *counts {
			var listing []string
			fs.Visit(func(f *flag.Flag) {
				if f.Name == "outstanding" || f.Name == "limit" || f.Name == "page-size" || f.Name == "cursor" {
					listing = append(listing, dashed(f.Name))
				}
			})
			if len(listing) > 0 {
				return usagef("--counts counts every record (of --pipeline): not with %s", strings.Join(listing, ", "))
			}
			return s.deadLetterCounts(ctx, *pipelineID)
		}
		if err := p.check(); err != nil {
			return err
		}
		c, err := s.client()
		if err != nil {
			return err
		}
		rs, next, err := collect(p, func(limit int, cursor string) ([]client.DeadLetter, string, error) {
			pg, err := c.DeadLetters(ctx, client.DeadLetterQuery{PipelineID: *pipelineID, Limit: limit, Cursor: cursor, OutstandingOnly: *outstanding})
			return pg.DeadLetters, pg.NextCursor, err
		})
		if err != nil {
			return err
		}
		if s.json() {
			writeJSON(s.env.Stdout, client.DeadLetterPage{DeadLetters: append([]client.DeadLetter{}, rs...), NextCursor: next})
			return nil
		}
		printDeadLetters(s.env.Stdout, rs)
		s.more(next)
		return nil
	}
}

// deadLetterCounts prints the dead-letter records of pipelineID ("" for
// all) counted by error code.
func (s *session) deadLetterCounts(ctx context.Context, pipelineID string) error {
	c, err := s.client()
	if err != nil {
		return err
	}
	n, err := c.DeadLetterCounts(ctx, pipelineID)
	if err != nil {
		return err
	}
	if s.json() {
		writeJSON(s.env.Stdout, n)
		return nil
	}
	printDeadLetterCounts(s.env.Stdout, n)
	return nil
}

func pipelinesCmd(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, s *session, args []string) error {
		if len(args) > 0 {
			if err := wantArgs(args, "ID"); err != nil {
				return err
			}
		}
		c, err := s.client()
		if err != nil {
			return err
		}
		if len(args) == 1 {
			p, err := c.Pipeline(ctx, args[0])
			if err != nil {
				return err
			}
			if s.json() {
				writeJSON(s.env.Stdout, p)
				return nil
			}
			printPipeline(s.env.Stdout, p)
			return nil
		}
		ps, err := c.Pipelines(ctx)
		if err != nil {
			return err
		}
		if s.json() {
			writeJSON(s.env.Stdout, client.PipelineList{Pipelines: append([]client.Pipeline{}, ps...)})
			return nil
		}
		printPipelines(s.env.Stdout, ps)
		return nil
	}
}
