package dynamo

import (
	"bytes"
	"compress/flate"
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qasync/qasync/shared/history"

	"github.com/qasync/qasync/shared/store"
)

// lifecycleEvents is the history of a steps-step execution that ran
// chained without a failure, as Derive gives it, with the names of
// midRun (a realistic worker id and step names): by write, the events
// that write adds (the create, the first claim, then one commit per step
// claiming the next).
func lifecycleEvents(steps int) [][]history.Event {
	row := midRun(nil, nil)
	at := row.CreatedAt
	ev := func(t history.Type, v int64, i, step int) history.Event {
		return history.Event{Type: t, At: at.Add(time.Duration(v) * time.Millisecond), StepIndex: step, StepName: fmt.Sprintf("step-name-%d", step),
			Attempt: 1, Status: store.Running, Worker: row.LeaseOwner, Version: v, Index: i}
	}
	writes := [][]history.Event{{ev(history.Submitted, 1, 0, 0)}, {ev(history.StepStarted, 2, 0, 0)}}
	for i := range steps {
		v := int64(3 + i)
		if i == steps-1 {
			writes = append(writes, []history.Event{ev(history.StepSucceeded, v, 0, i), ev(history.Succeeded, v, 1, i)})
		} else {
			writes = append(writes, []history.Event{ev(history.StepSucceeded, v, 0, i), ev(history.StepStarted, v, 1, i+1)})
		}
	}
	return writes
}

func units(bytes int) float64 { return math.Ceil(float64(bytes) / 1024) }

// TestHistoryCostModel compares, with the real encodings and DynamoDB's
// item size rules, the three places a history could be written, for 4- and
// 10-step executions (docs/cost.md quotes the log):
//
//   - on the row: every later conditional write of the row carries the
//     whole history so far; write units count the whole item, so the row
//     outgrows 1 KB after a few steps and every write costs more;
//   - a table the worker writes: one more write request (and unit) per
//     write of the row, on the step's path;
//   - pages fed from the stream: nothing on the path; one page per
//     execution per stream batch, from one page per row write (a batch
//     per write, the worst case) down to one per execution.
//
// It fails if the row would not grow past one unit per write, or if a page
// of a whole 10-step execution took more than one unit (its 22 events
// compress to about 300 B): the reasons the stream was chosen.
func TestHistoryCostModel(t *testing.T) {
	row := midRun(make([]byte, 100), make([]byte, 100))
	base := itemSize(encode(&row, 4))
	key := str(pk(row.Key()))
	for _, steps := range []int{4, 10} {
		writes := lifecycleEvents(steps)
		var onRow, pagesWorst float64
		var all []history.Event
		for _, evs := range writes {
			all = append(all, evs...)
			body, err := encodeEvents(all)
			if err != nil {
				t.Fatal(err)
			}
			onRow += units(base + len("h") + len(body))
			page, err := pageBody(evs)
			if err != nil {
				t.Fatal(err)
			}
			pagesWorst += units(pageSize(key, page))
		}
		js, err := encodeEvents(all)
		if err != nil {
			t.Fatal(err)
		}
		whole, err := pageBody(all)
		if err != nil {
			t.Fatal(err)
		}
		pageBest := units(pageSize(key, whole))
		rowWrites := float64(len(writes))
		t.Logf("%d steps (%d row writes, %d events, %.0f B per event as JSON, the page %d B compressed): row alone %.0f units; history on the row %.0f units (+%.2f a step); "+
			"a table written by the worker +%.0f requests and +%.0f units (+%.2f a step); stream-fed pages +0 on the write path, then %.0f units "+
			"(one page per row write, %.2f a step) down to %.0f (one page per execution, %.2f a step)",
			steps, len(writes), len(all), float64(len(js))/float64(len(all)), len(whole), rowWrites, onRow, (onRow-rowWrites)/float64(steps),
			rowWrites, pagesWorst, pagesWorst/float64(steps), pagesWorst, pagesWorst/float64(steps), pageBest, pageBest/float64(steps))
		if onRow <= rowWrites {
			t.Errorf("%d steps: the history on the row cost %.0f units, no more than the row alone (%.0f): the model is wrong", steps, onRow, rowWrites)
		}
		if pageBest > 1 {
			t.Errorf("a page of a whole %d-step execution costs %.0f units, want 1", steps, pageBest)
		}
	}
}

// pageSize is a history page's item size with events body.
func pageSize(key types.AttributeValue, body []byte) int {
	return itemSize(map[string]types.AttributeValue{
		AttrPK: key, AttrPage: str(pageKey(time.UnixMilli(1_790_000_000_000), 12)),
		AttrEvents: bin(body), AttrLastVersion: num(12), AttrTTL: num(1_800_000_000),
	})
}

// TestPageBodyReusesItsCompressor: pageBody compresses with a reused
// DEFLATE writer, exactly as a new one does (each page decodes to its own
// events, whatever page came before), without allocating a writer's
// tables per page: at flate.BestCompression a new writer allocates about
// a megabyte, which for pages of a few hundred bytes was most of the
// history feed's CPU time.
func TestPageBodyReusesItsCompressor(t *testing.T) {
	writes := lifecycleEvents(10)
	for round := range 2 {
		for i, evs := range writes {
			body, err := pageBody(evs)
			if err != nil {
				t.Fatal(err)
			}
			js, err := encodeEvents(evs)
			if err != nil {
				t.Fatal(err)
			}
			var fresh bytes.Buffer
			w, _ := flate.NewWriter(&fresh, flate.BestCompression)
			_, _ = w.Write(js)
			_ = w.Close()
			if !bytes.Equal(body, fresh.Bytes()) {
				t.Fatalf("round %d, page %d: %x, a new writer gives %x", round, i, body, fresh.Bytes())
			}
			back, err := readPage(body)
			if err != nil || len(back) != len(evs) || back[0].Version != evs[0].Version {
				t.Fatalf("round %d, page %d read back as %v, %v", round, i, back, err)
			}
		}
	}
	// The bytes allocated per page, averaged over many: a writer's tables
	// (about 800 KB) once in a while when a collection empties the pool
	// (or, under the race detector, when the pool drops one of four
	// writers on purpose), not per page: under half a writer a page.
	var before, after runtime.MemStats
	const pages = 200
	runtime.ReadMemStats(&before)
	for i := range pages {
		if _, err := pageBody(writes[i%len(writes)]); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / pages; per > 400<<10 {
		t.Errorf("pageBody allocates %d bytes a page, want a reused writer (under 400 KiB)", per)
	}
}
