package crashtest

import (
	"context"
	"errors"
	"fmt"

	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/internal/embedded"
	"github.com/qasync/qasync/shared/internal/sqsbackend"
	"github.com/qasync/qasync/shared/store"
)

// chaosStore is where the processes of a chaos run keep their state, and
// how the checker reads it: the DynamoDB tables and SQS queues of a Stack
// (K processes share them), or one embedded data directory (one process
// at a time holds it).
type chaosStore interface {
	// env is the processes' environment with the settings.
	env(settings ...Settings) []string
	// row reads an execution while the processes run.
	row(ctx context.Context, fl *fleet, id string) (store.Execution, error)
	// recorded reports whether a DLQ execution's dead-letter record is
	// there yet (written by an asynchronous consumer on SQS).
	recorded(ctx context.Context, id string) bool
	// dlqDepth is how many envelopes wait in the DLQ queue.
	dlqDepth(ctx context.Context) (int, error)
	// The rest reads after every process stopped.
	// settle refreshes the jobs' rows from the store.
	settle(ctx context.Context, jobs []*job) error
	countExecutions(ctx context.Context) (int, error)
	deadLetterRecords(ctx context.Context) ([]deadletter.Record, error)
	// leftItems names the executions of the work items left queued.
	leftItems(ctx context.Context, limit int) ([]string, error)
	// where names the store in messages.
	where() string
}

// stackStore is a Stack's chaosStore.
type stackStore struct{ st *Stack }

func (s stackStore) env(settings ...Settings) []string { return s.st.Env(settings...) }
func (s stackStore) row(ctx context.Context, _ *fleet, id string) (store.Execution, error) {
	return s.st.Row(ctx, id)
}
func (s stackStore) recorded(ctx context.Context, id string) bool {
	_, err := s.st.DeadLetters.Get(ctx, id)
	return err == nil || !errors.Is(err, deadletter.ErrNotFound)
}
func (s stackStore) dlqDepth(ctx context.Context) (int, error) {
	return s.st.QueueDepth(ctx, s.st.DLQURL())
}
func (s stackStore) settle(context.Context, []*job) error { return nil }
func (s stackStore) countExecutions(ctx context.Context) (int, error) {
	return s.st.CountExecutions(ctx)
}
func (s stackStore) deadLetterRecords(ctx context.Context) ([]deadletter.Record, error) {
	return s.st.DeadLetterRecords(ctx)
}
func (s stackStore) leftItems(ctx context.Context, limit int) ([]string, error) {
	msgs, err := s.st.Drain(ctx, s.st.WorkQueueURL(), limit)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(msgs))
	for _, m := range msgs {
		item, err := sqsbackend.Decode(*m.Body)
		if err != nil {
			out = append(out, "")
			continue
		}
		out = append(out, item.ExecutionID)
	}
	return out, nil
}
func (s stackStore) where() string { return "table " + s.st.Names.ExecutionTable }

// embeddedStore is one embedded data directory's chaosStore. While the
// process runs it holds the directory, so rows are read through its API;
// once it stopped, from the file.
type embeddedStore struct{ dir string }

func (s embeddedStore) env(settings ...Settings) []string { return EmbeddedEnv(s.dir, settings...) }

func (s embeddedStore) row(_ context.Context, fl *fleet, id string) (store.Execution, error) {
	st, err := GetStatus(fl.pick(), id)
	if err != nil {
		return store.Execution{}, err
	}
	e := store.Execution{ExecutionID: st.ExecutionID, PipelineID: st.PipelineID, PipelineVersion: st.PipelineVersion,
		Status: store.Status(st.Status), StepIndex: st.StepIndex, StepName: st.StepName, Attempt: st.Attempt, Version: st.Version}
	if st.Error != nil {
		e.Error = &store.Failure{Code: st.Error.Code, Message: st.Error.Message, TerminalReason: st.Error.TerminalReason}
	}
	// Through the API FAILED is the moment before DLQ (the dead letter is
	// recorded in the same store, then the row marked): not settled yet.
	e.DLQPending = e.Status == store.Failed
	return e, nil
}

func (s embeddedStore) recorded(context.Context, string) bool { return true }   // recorded before the row is DLQ
func (s embeddedStore) dlqDepth(context.Context) (int, error) { return 0, nil } // no DLQ queue

func (s embeddedStore) open() (*embedded.DB, error) {
	return embedded.Open(s.dir, embedded.Options{NoControl: true})
}

func (s embeddedStore) settle(ctx context.Context, jobs []*job) error {
	db, err := s.open()
	if err != nil {
		return err
	}
	defer db.Close()
	st := db.State(nil)
	for _, j := range jobs {
		if j.id == "" {
			continue
		}
		row, err := st.Get(ctx, store.Key{TenantID: "default", ExecutionID: j.id})
		if err != nil {
			return fmt.Errorf("execution %s: %w", j.id, err)
		}
		j.row = row
	}
	return nil
}

func (s embeddedStore) countExecutions(ctx context.Context) (int, error) {
	db, err := s.open()
	if err != nil {
		return 0, err
	}
	defer db.Close()
	n := 0
	q := store.ListQuery{TenantID: "default", Limit: store.MaxListLimit}
	for {
		page, err := db.State(nil).List(ctx, q)
		if err != nil {
			return n, err
		}
		n += len(page.Executions)
		if page.Cursor == "" {
			return n, nil
		}
		q.Cursor = page.Cursor
	}
}

func (s embeddedStore) deadLetterRecords(ctx context.Context) ([]deadletter.Record, error) {
	db, err := s.open()
	if err != nil {
		return nil, err
	}
	defer db.Close()
	var out []deadletter.Record
	q := deadletter.ListQuery{TenantID: "default", Limit: 500}
	for {
		page, err := db.DeadLetters(nil).List(ctx, q)
		if err != nil {
			return out, err
		}
		out = append(out, page.Records...)
		if page.Cursor == "" {
			return out, nil
		}
		q.Cursor = page.Cursor
	}
}

func (s embeddedStore) leftItems(context.Context, int) ([]string, error) {
	db, err := s.open()
	if err != nil {
		return nil, err
	}
	defer db.Close()
	var out []string
	for _, it := range db.Queued() {
		out = append(out, it.ExecutionID)
	}
	return out, nil
}

func (s embeddedStore) where() string { return "the embedded store in " + s.dir }
