package history

import (
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
