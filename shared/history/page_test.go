package history

import (
	"errors"
	"testing"
	"time"
)

// A history read page by page gives every event once, in order, numbered
// as in the whole history, also while it grows between the pages and
// when its provider gives events out of order and repeated.
func TestPagesCoverTheHistoryOnce(t *testing.T) {
	at := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	var stored []Event
	add := func(v int64, n int) {
		for i := range n {
			stored = append(stored, Event{Type: StepStarted, At: at, Version: v, Index: i})
		}
	}
	for v := int64(1); v <= 40; v++ {
		add(v, 1+int(v%3))
	}
	// The provider's order: reversed, and a page stored twice.
	given := func() []Event {
		out := make([]Event, 0, len(stored)+5)
		for i := len(stored) - 1; i >= 0; i-- {
			out = append(out, stored[i])
		}
		return append(out, stored[10:15]...)
	}
	var got []Event
	var after Cursor
	for pages := 0; ; pages++ {
		if pages == 3 {
			for v := int64(41); v <= 45; v++ { // the execution moved on meanwhile
				add(v, 2)
			}
		}
		p := PageOf(given(), after, 7)
		got = append(got, p.Events...)
		if p.Next == nil {
			break
		}
		if len(p.Events) != 7 || pages > 100 {
			t.Fatalf("page %d has %d events", pages, len(p.Events))
		}
		s, err := ParseCursor(p.Next.String())
		if err != nil || s != *p.Next {
			t.Fatalf("cursor %q round trip: %+v, %v", p.Next.String(), s, err)
		}
		after = s
	}
	whole := Number(stored)
	if len(got) != len(whole) {
		t.Fatalf("pages gave %d events, the history has %d", len(got), len(whole))
	}
	for i := range whole {
		if got[i].Version != whole[i].Version || got[i].Index != whole[i].Index || got[i].Seq != whole[i].Seq {
			t.Fatalf("event %d: %+v, want %+v", i, got[i], whole[i])
		}
	}
}

func TestPageLimitsAndCursors(t *testing.T) {
	var evs []Event
	for v := int64(1); v <= 1500; v++ {
		evs = append(evs, Event{Type: StepStarted, Version: v})
	}
	if p := PageOf(evs, Cursor{}, 0); len(p.Events) != MaxPage || p.Next == nil || p.Next.Seq != MaxPage {
		t.Fatalf("default page: %d events, next %+v", len(p.Events), p.Next)
	}
	if p := PageOf(evs, Cursor{}, 5000); len(p.Events) != MaxPage {
		t.Fatalf("a limit over MaxPage gave %d events", len(p.Events))
	}
	if p := PageOf(evs, Cursor{Version: 1500, Seq: 1500}, 10); len(p.Events) != 0 || p.Next != nil {
		t.Fatalf("after the end: %+v", p)
	}
	for _, bad := range []string{"x", "h1.1.2", "h1.a.0.0", "h1.-1.0.0", "h2.1.0.1"} {
		if _, err := ParseCursor(bad); err == nil {
			t.Errorf("ParseCursor(%q) accepted", bad)
		}
	}
	if c, err := ParseCursor(""); err != nil || c != (Cursor{}) {
		t.Errorf(`ParseCursor("") = %+v, %v`, c, err)
	}
}

// PageAfter takes every cursor a page of the history gave, also after
// the history grew, and refuses one that names no event of it: a made-up
// position, one past its end, one whose seq differs (another execution's
// history with an event at that version and index), as ErrCursor. End is
// set on every page, the last included, and an empty page read after End
// keeps it: a poller resumes from it and gets only new events.
func TestPageAfterChecksTheCursor(t *testing.T) {
	var evs []Event
	add := func(v int64, n int) {
		for i := range n {
			evs = append(evs, Event{Type: StepStarted, Version: v, Index: i})
		}
	}
	for v := int64(1); v <= 5; v++ {
		add(v, 2)
	}
	var after Cursor
	var got int
	for range 20 {
		p, err := PageAfter(evs, after, 3)
		if err != nil {
			t.Fatalf("PageAfter(%s): %v", after, err)
		}
		got += len(p.Events)
		if len(p.Events) > 0 && p.End != p.Events[len(p.Events)-1].Cursor() {
			t.Fatalf("End %s is not the last event's cursor %s", p.End, p.Events[len(p.Events)-1].Cursor())
		}
		if p.Next != nil && *p.Next != p.End {
			t.Fatalf("Next %s differs from End %s", p.Next, p.End)
		}
		after = p.End
		if p.Next == nil {
			break
		}
	}
	if got != len(evs) || after.Seq != len(evs) {
		t.Fatalf("pages gave %d events ending at %s, want %d", got, after, len(evs))
	}
	// Nothing new yet: an empty page, ending where it was read.
	if p, err := PageAfter(evs, after, 3); err != nil || len(p.Events) != 0 || p.Next != nil || p.End != after {
		t.Fatalf("read at the end: %+v, %v", p, err)
	}
	// The execution moved on: from End, only the new events.
	add(6, 1)
	if p, err := PageAfter(evs, after, 3); err != nil || len(p.Events) != 1 || p.Events[0].Seq != 11 || p.Events[0].Version != 6 {
		t.Fatalf("read after the history grew: %+v, %v", p, err)
	}
	for _, bad := range []Cursor{
		{Version: 3, Index: 5, Seq: 6},  // no event at version 3, index 5
		{Version: 9, Index: 0, Seq: 12}, // past the end
		{Version: 3, Index: 0, Seq: 2},  // the event is the 5th here
		{Version: 0, Index: 0, Seq: 4},  // nothing at version 0
	} {
		if _, err := PageAfter(evs, bad, 3); !errors.Is(err, ErrCursor) {
			t.Errorf("PageAfter(%s) = %v, want ErrCursor", bad, err)
		}
	}
}

// Head cuts a page to its first events and moves Next and End to the
// last one kept; it keeps at least one event.
func TestPageHead(t *testing.T) {
	var evs []Event
	for v := int64(1); v <= 10; v++ {
		evs = append(evs, Event{Type: StepStarted, Version: v})
	}
	p := PageOf(evs, Cursor{}, 0)
	if p.Next != nil || p.End.Seq != 10 {
		t.Fatalf("whole page: %+v", p)
	}
	h := p.Head(4)
	if len(h.Events) != 4 || h.Next == nil || *h.Next != p.Events[3].Cursor() || h.End != *h.Next {
		t.Fatalf("Head(4) = %d events, next %v, end %s", len(h.Events), h.Next, h.End)
	}
	if rest := PageOf(evs, *h.Next, 0); len(rest.Events) != 6 || rest.Events[0].Seq != 5 {
		t.Fatalf("after Head(4): %+v", rest)
	}
	if h := p.Head(0); len(h.Events) != 1 || h.Next == nil {
		t.Fatalf("Head(0) = %+v, want one event", h)
	}
	if h := p.Head(10); h.Next != nil || len(h.Events) != 10 {
		t.Fatalf("Head(len) changed the page: %+v", h)
	}
}
