// Package logtest captures slog JSON output in tests.
package logtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"log/slog"
	"sync"
)

// Buffer is a log sink safe for concurrent writers and readers.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// New returns a Buffer and a debug-level JSON logger writing to it.
func New() (*Buffer, *slog.Logger) {
	b := &Buffer{}
	return b, slog.New(slog.NewJSONHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// Write implements io.Writer.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Lines returns what was written so far, one entry per line.
func (b *Buffer) Lines() []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader([]byte(b.String())))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

// Events decodes into T every JSON line whose "event" key is name, in
// order. A line that is not JSON is an error.
func Events[T any](b *Buffer, name string) ([]T, error) {
	var out []T
	for _, line := range b.Lines() {
		var head struct {
			Event string `json:"event"`
		}
		if err := json.Unmarshal([]byte(line), &head); err != nil {
			return nil, err
		}
		if head.Event != name {
			continue
		}
		var v T
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}
