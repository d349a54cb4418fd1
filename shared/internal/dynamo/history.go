// The execution history (NewHistory), kept in the history table of
// package schema and fed from the execution table's stream: no request on
// a step's path writes it. Apply turns a batch of stream records into
// history pages, one item per execution per batch; History reads them.

package dynamo

import (
	"bytes"
	"cmp"
	"compress/flate"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/store"
)

// HistoryOptions configure a History.
type HistoryOptions struct {
	// Table names the history table (required).
	Table string
	// Retention is how long past its row's expiry (at the write that
	// produced it) a page is kept: the execution retention, so that a row
	// whose expiry later commits push forward still finds its early pages
	// (as payload chunks are kept). Default 30 days.
	Retention time.Duration
	// Logger logs stream records that are not execution rows or cannot be
	// decoded (skipped: retrying cannot help). Default slog.Default().
	Logger *slog.Logger
	// Timeout bounds each call whose context has no deadline. Default 10s.
	Timeout time.Duration
	// Concurrency bounds the page writes of one batch in flight. Default 16.
	Concurrency int
}

// History is the DynamoDB history of a state store's executions: the feed
// that writes it from the execution table's stream (Apply) and its reader
// (History, a history.Reader).
type History struct {
	db    *dynamodb.Client
	state *StateStore
	opts  HistoryOptions
}

var _ history.Reader = (*History)(nil)

// NewHistory returns the history of state's executions in opts.Table.
func NewHistory(db *dynamodb.Client, state *StateStore, opts HistoryOptions) (*History, error) {
	if opts.Table == "" {
		return nil, errors.New("dynamo: history: the history table name is required")
	}
	if state == nil {
		return nil, errors.New("dynamo: history: the history needs its state store (it reads the rows)")
	}
	if opts.Retention <= 0 {
		opts.Retention = 30 * 24 * time.Hour
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 16
	}
	return &History{db: db, state: state, opts: opts}, nil
}

// Table is the history table's name.
func (h *History) Table() string { return h.opts.Table }

// Change is one stream record of the execution table: the item before and
// after one write (NEW_AND_OLD_IMAGES), as DynamoDB attribute values.
type Change struct {
	// Sequence is the record's sequence number in its shard.
	Sequence string
	// Old is the item before the write (nil for an insert).
	Old map[string]types.AttributeValue
	// New is the item after the write (nil for a removal: the TTL).
	New map[string]types.AttributeValue
}

// ApplyError reports the executions of a batch whose pages could not be
// written. First is the index of the earliest change of any of them: the
// batch is stored up to (not including) First, and everything from First
// on must be applied again (pages are idempotent, so what landed after it
// is not doubled).
type ApplyError struct {
	First int
	Err   error
}

func (e *ApplyError) Error() string {
	return fmt.Sprintf("dynamo: history: %v (batch stored before change %d)", e.Err, e.First)
}

func (e *ApplyError) Unwrap() error { return e.Err }

// page is the events one batch carried for one execution (one
// incarnation of its key).
type page struct {
	key     store.Key
	created time.Time
	events  []history.Event
	expires time.Time // the latest row expiry seen
	first   int       // index of its first change in the batch
}

// Apply stores the history of a batch of stream records, given in stream
// order (the order of one item's records): every record's two images are
// decoded, history.Derive tells what the write did, and each execution's
// events of the batch become one page, written with one PutItem keyed by
// the execution's key, its creation time and the version of the page's
// first event. Applying the same records again rewrites the same page
// keys; a page is replaced only by one that reaches a later version, so
// redelivery, in the same batch or cut differently, never loses an event,
// and the reader drops repeated events (history.Number). Records of other
// items (the table's meta item) and records that cannot be decoded are
// skipped (logged as history_record_skipped).
func (h *History) Apply(ctx context.Context, changes []Change) error {
	ctx, cancel := withDeadline(ctx, h.opts.Timeout)
	defer cancel()
	pages := map[string]*page{}
	var order []string
	for i, c := range changes {
		old, oldErr := decodeImage(c.Old)
		cur, newErr := decodeImage(c.New)
		if err := errors.Join(oldErr, newErr); err != nil {
			h.skip(ctx, c, err.Error())
			continue
		}
		if cur == nil {
			continue // a removal (TTL) is no event
		}
		if old != nil && old.Key() != cur.Key() {
			old = nil // a new incarnation replaced an expired one: it starts afresh
		}
		evs := history.Derive(old, cur)
		if len(evs) == 0 {
			continue
		}
		id := pk(cur.Key()) + "|" + strconv.FormatInt(cur.CreatedAt.UnixMilli(), 10)
		p, ok := pages[id]
		if !ok {
			p = &page{key: cur.Key(), created: cur.CreatedAt, first: i}
			pages[id] = p
			order = append(order, id)
		}
		p.events = append(p.events, evs...)
		if cur.ExpiresAt.After(p.expires) {
			p.expires = cur.ExpiresAt
		}
	}
	var (
		mu     sync.Mutex
		first  = -1
		errs   []error
		wg     sync.WaitGroup
		tokens = make(chan struct{}, h.opts.Concurrency)
	)
	for _, id := range order {
		p := pages[id]
		tokens <- struct{}{}
		wg.Go(func() {
			defer func() { <-tokens }()
			if err := h.put(ctx, p); err != nil {
				mu.Lock()
				defer mu.Unlock()
				errs = append(errs, fmt.Errorf("%s: %w", p.key, err))
				if first < 0 || p.first < first {
					first = p.first
				}
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return &ApplyError{First: first, Err: errors.Join(errs...)}
	}
	return nil
}

// skip logs a stream record Apply leaves out.
func (h *History) skip(ctx context.Context, c Change, why string) {
	h.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "history_record_skipped", slog.String("event", "history_record_skipped"),
		slog.String("sequence", c.Sequence), slog.String("reason", why))
}

// decodeImage decodes a stream image of the execution table: nil for no
// image or an item that is no execution row (the meta item).
func decodeImage(item map[string]types.AttributeValue) (*store.Execution, error) {
	if item == nil {
		return nil, nil
	}
	if _, ok := splitPK((&reader{item: item}).str(AttrPK)); !ok {
		return nil, nil
	}
	e, err := decode(item)
	if err != nil {
		return nil, err
	}
	return &e, nil
}

// pageKey is a page's sort key: the execution's creation time and the
// version of the page's first event, zero padded so that they sort.
func pageKey(created time.Time, firstVersion int64) string {
	return pagePrefix(created) + fmt.Sprintf("%012d", firstVersion)
}

// pagePrefix starts the page keys of the execution created then.
func pagePrefix(created time.Time) string { return fmt.Sprintf("%013d#", created.UnixMilli()) }

// put writes a page unless a page with its key already reaches as far.
func (h *History) put(ctx context.Context, p *page) error {
	slices.SortStableFunc(p.events, func(a, b history.Event) int {
		return cmp.Or(cmp.Compare(a.Version, b.Version), cmp.Compare(a.Index, b.Index))
	})
	body, err := pageBody(p.events)
	if err != nil {
		return err
	}
	last := p.events[len(p.events)-1].Version
	_, err = h.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(h.opts.Table),
		Item: map[string]types.AttributeValue{
			AttrPK: str(pk(p.key)), AttrPage: str(pageKey(p.created, p.events[0].Version)),
			AttrEvents: bin(body), AttrLastVersion: num(last),
			AttrTTL: seconds(p.expires.Add(h.opts.Retention)),
		},
		ConditionExpression:       aws.String("attribute_not_exists(#pk) OR #lv < :lv"),
		ExpressionAttributeNames:  map[string]string{"#pk": AttrPK, "#lv": AttrLastVersion},
		ExpressionAttributeValues: map[string]types.AttributeValue{":lv": num(last)},
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return nil // this page, or one reaching further, is stored already
	}
	return translate("put history page", err)
}

// History implements history.Reader: the row (strongly consistent; a
// missing or expired one, or another tenant's key, is store.ErrNotFound)
// and the pages of its incarnation, numbered. The pages follow the row by
// the stream's delay (about a second), so the newest writes may be missing
// for that long.
func (h *History) History(ctx context.Context, key store.Key) ([]history.Event, error) {
	row, err := h.state.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	ctx, cancel := withDeadline(ctx, h.opts.Timeout)
	defer cancel()
	in := &dynamodb.QueryInput{
		TableName:                aws.String(h.opts.Table),
		KeyConditionExpression:   aws.String("#pk = :pk AND begins_with(#pg, :prefix)"),
		ExpressionAttributeNames: map[string]string{"#pk": AttrPK, "#pg": AttrPage},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": str(pk(key)), ":prefix": str(pagePrefix(row.CreatedAt)),
		},
		ConsistentRead: aws.Bool(true),
	}
	var all []history.Event
	for {
		out, err := h.db.Query(ctx, in)
		if err != nil {
			return nil, translate("query history", err)
		}
		for _, item := range out.Items {
			r := &reader{item: item}
			body := r.bytes(AttrEvents)
			if r.err != nil {
				return nil, r.err
			}
			evs, err := readPage(body)
			if err != nil {
				return nil, err
			}
			all = append(all, evs...)
		}
		if out.LastEvaluatedKey == nil {
			break
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
	return history.Number(all), nil
}

// pageBody is a page's events as stored: JSON with short names, DEFLATE
// compressed. A page's size is its cost, and an execution's events repeat
// their names, worker and steps: a 10-step execution's 22 events take
// about 3 KB of JSON (3 write units) and about 300 B compressed (one).
func pageBody(evs []history.Event) ([]byte, error) {
	js, err := encodeEvents(evs)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	w := compressors.Get().(*flate.Writer)
	defer compressors.Put(w)
	w.Reset(&b)
	if _, err := w.Write(js); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// compressors are pageBody's DEFLATE writers, reused: a writer at
// flate.BestCompression allocates and clears about a megabyte of tables,
// which for a page of a few hundred bytes was most of the feed's CPU time
// and the serve process's garbage (a CPU profile under make
// bench-durable's burst: a seventh of the process). A reset writer
// compresses exactly as a new one.
var compressors = sync.Pool{New: func() any {
	w, err := flate.NewWriter(nil, flate.BestCompression)
	if err != nil {
		panic(err) // only for a level out of range
	}
	return w
}}

// readPage decodes a page's events (pageBody's inverse).
func readPage(body []byte) ([]history.Event, error) {
	js, err := io.ReadAll(flate.NewReader(bytes.NewReader(body)))
	if err != nil {
		return nil, fmt.Errorf("dynamo: history: a page's %s is not compressed events: %w", AttrEvents, err)
	}
	return decodeEvents(js)
}

// storedEvent is an event as a page stores it: short names, for the
// reason the row's attributes have them (a page's size is its cost).
type storedEvent struct {
	Type      history.Type `json:"t"`
	At        int64        `json:"a"`
	StepIndex int          `json:"si,omitempty"`
	StepName  string       `json:"sn,omitempty"`
	Attempt   int          `json:"n,omitempty"`
	Status    store.Status `json:"s"`
	Code      string       `json:"ec,omitempty"`
	Message   string       `json:"em,omitempty"`
	Terminal  string       `json:"tr,omitempty"`
	HasError  bool         `json:"e,omitempty"`
	RetryAt   int64        `json:"ra,omitempty"`
	WakeAt    int64        `json:"wa,omitempty"`
	Worker    string       `json:"w,omitempty"`
	Reason    string       `json:"r,omitempty"`
	Version   int64        `json:"v"`
	Index     int          `json:"i,omitempty"`
}

func encodeEvents(evs []history.Event) ([]byte, error) {
	out := make([]storedEvent, len(evs))
	for i, e := range evs {
		se := storedEvent{Type: e.Type, At: e.At.UnixMilli(), StepIndex: e.StepIndex, StepName: e.StepName, Attempt: e.Attempt,
			Status: e.Status, Worker: e.Worker, Reason: e.Reason, Version: e.Version, Index: e.Index}
		if e.Error != nil {
			se.HasError, se.Code, se.Message, se.Terminal = true, e.Error.Code, e.Error.Message, e.Error.TerminalReason
		}
		if !e.RetryAt.IsZero() {
			se.RetryAt = e.RetryAt.UnixMilli()
		}
		if !e.WakeAt.IsZero() {
			se.WakeAt = e.WakeAt.UnixMilli()
		}
		out[i] = se
	}
	return json.Marshal(out)
}

func decodeEvents(b []byte) ([]history.Event, error) {
	var in []storedEvent
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, fmt.Errorf("dynamo: history: a page's %s is not its events: %w", AttrEvents, err)
	}
	out := make([]history.Event, len(in))
	for i, se := range in {
		e := history.Event{Type: se.Type, At: time.UnixMilli(se.At).UTC(), StepIndex: se.StepIndex, StepName: se.StepName,
			Attempt: se.Attempt, Status: se.Status, Worker: se.Worker, Reason: se.Reason, Version: se.Version, Index: se.Index}
		if se.HasError {
			e.Error = &store.Failure{Code: se.Code, Message: se.Message, TerminalReason: se.Terminal}
		}
		if se.RetryAt != 0 {
			e.RetryAt = time.UnixMilli(se.RetryAt).UTC()
		}
		if se.WakeAt != 0 {
			e.WakeAt = time.UnixMilli(se.WakeAt).UTC()
		}
		out[i] = e
	}
	return out, nil
}
