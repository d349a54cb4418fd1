package dynamo

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qasync/qasync/shared/history"
	"github.com/qasync/qasync/shared/internal/logtest"
	"github.com/qasync/qasync/shared/internal/outbox"
	"github.com/qasync/qasync/shared/store"
)

// streamOf returns the stream records of execution id's writes: the
// create, the claim and the commit that ends it in status end.
func streamOf(id string, end store.Status) []Change {
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	row := store.Execution{TenantID: "t", ExecutionID: id, PipelineID: "p", Status: store.Queued, Version: 1, StepName: "s0",
		CreateToken: "ct", CreatedAt: now, UpdatedAt: now, NextDueAt: now, ExpiresAt: now.Add(time.Hour)}
	claimed := row
	claimed.Status, claimed.Version, claimed.LeaseOwner, claimed.Attempt, claimed.UpdatedAt = store.Running, 2, "w", 1, now.Add(time.Second)
	done := claimed
	done.Status, done.Version, done.LeaseOwner, done.UpdatedAt = end, 3, "", now.Add(2*time.Second)
	img := func(e store.Execution) map[string]types.AttributeValue { return encode(&e, 4) }
	return []Change{
		{Sequence: "1", New: img(row)},
		{Sequence: "2", Old: img(row), New: img(claimed)},
		{Sequence: "3", Old: img(claimed), New: img(done)},
	}
}

// TestEventPublisherRetriesUntilAcknowledged: a batch whose event
// EventBridge did not take fails from that event's record, as
// store.ErrUnavailable (the feed and the event source retry it); applied
// again it delivers the event, and a batch delivered again (the
// position not stored) delivers it again with the same id.
func TestEventPublisherRetriesUntilAcknowledged(t *testing.T) {
	down := true
	sink := &outbox.MemorySink{Fail: func(outbox.Event) error {
		if down {
			return errors.New("ThrottlingException")
		}
		return nil
	}}
	p := NewEventPublisher(sink, outbox.Types{history.Succeeded: true}, nil)
	changes := append(streamOf("a.1", store.Succeeded), streamOf("b.1", store.Succeeded)...)
	err := p.Apply(context.Background(), changes)
	var ae *ApplyError
	if !errors.As(err, &ae) || ae.First != 2 || !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Apply with EventBridge down: %v, want an ApplyError from record 2, unavailable", err)
	}
	down = false
	for range 2 { // the retry, then a redelivery of the batch
		if err := p.Apply(context.Background(), changes); err != nil {
			t.Fatal(err)
		}
	}
	sent := sink.Sent()
	want := []string{outbox.ID("t", "a.1", 3, history.Succeeded), outbox.ID("t", "b.1", 3, history.Succeeded)}
	if len(sent) != 4 || sent[0].ID != want[0] || sent[1].ID != want[1] || sent[2].ID != want[0] || sent[3].ID != want[1] {
		t.Errorf("sent %+v, want the two events twice with ids %v", sent, want)
	}
}

// TestEventPublisherSendsOnlyTheOptedInTypes: a type left out is never
// sent; no type at all sends nothing.
func TestEventPublisherSendsOnlyTheOptedInTypes(t *testing.T) {
	for _, types := range []outbox.Types{{history.DeadLettered: true}, {}} {
		sink := &outbox.MemorySink{}
		if err := NewEventPublisher(sink, types, nil).Apply(context.Background(), streamOf("a.1", store.Succeeded)); err != nil {
			t.Fatal(err)
		}
		if sent := sink.Sent(); len(sent) != 0 {
			t.Errorf("types %v: sent %+v", types, sent)
		}
	}
	evs, _ := Events(streamOf("a.1", store.Succeeded), outbox.Types{history.Submitted: true, history.StepStarted: true, history.Succeeded: true})
	var got []history.Type
	for _, ev := range evs {
		got = append(got, ev.Type)
	}
	if strings.Join(typesOf(got), ",") != "SUBMITTED,STEP_STARTED,SUCCEEDED" {
		t.Errorf("step-level types: %v", got)
	}
}

func typesOf(ts []history.Type) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = string(t)
	}
	return out
}

// TestEventPublisherDeadLettersAPoisonEvent: an event EventBridge will
// never take does not block the batch: it is logged as
// lifecycle_event_dead_lettered and the batch is applied.
func TestEventPublisherDeadLettersAPoisonEvent(t *testing.T) {
	sink := &outbox.MemorySink{Fail: func(ev outbox.Event) error {
		if strings.Contains(string(ev.Detail), `"a.1"`) {
			return outbox.ErrPermanent
		}
		return nil
	}}
	logs, log := logtest.New()
	changes := append(streamOf("a.1", store.Succeeded), streamOf("b.1", store.Succeeded)...)
	if err := NewEventPublisher(sink, outbox.Types{history.Succeeded: true}, log).Apply(context.Background(), changes); err != nil {
		t.Fatalf("a poison event failed the batch: %v", err)
	}
	if sent := sink.Sent(); len(sent) != 1 || sent[0].ID != outbox.ID("t", "b.1", 3, history.Succeeded) {
		t.Errorf("sent %+v, want b.1's event", sent)
	}
	if !strings.Contains(logs.String(), `"event":"lifecycle_event_dead_lettered"`) {
		t.Errorf("no lifecycle_event_dead_lettered:\n%s", logs.String())
	}
}
