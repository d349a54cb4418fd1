package cli

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestVisibleEscapes: visible shows each kind of character a terminal
// acts on as an escape, and leaves printable text (non-ASCII letters,
// backslashes) as it is.
func TestVisibleEscapes(t *testing.T) {
	for in, want := range map[string]string{
		"plain text, ünïcødé, 日本":     "plain text, ünïcødé, 日本",
		`a\nb stays`:                  `a\nb stays`,
		"a\nb\tc\rd":                  `a\nb\tc\rd`,
		"\x1b[31mred\x1b[0m\x07":      `\x1b[31mred\x1b[0m\x07`,
		"\x00\x7f\u0085\u009b":        `\x00\x7f\x85\x9b`,
		"\u202eabc\u2066\u2028\u2029": `\u202eabc\u2066\u2028\u2029`,
		"bad \xff\xc3 bytes":          `bad \xff\xc3 bytes`,
	} {
		if got := visible(in); got != want {
			t.Errorf("visible(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestTerminalSafeJSONMeansTheSame: the rewritten JSON decodes to the
// same value, and has no DEL, C1 or bidi control left raw.
func TestTerminalSafeJSONMeansTheSame(t *testing.T) {
	in := map[string]string{"s": "a\x7fb\u0085c\u009b\u202ed\u2029é\x1b"}
	b, _ := json.Marshal(in)
	out := terminalSafeJSON(b)
	for _, raw := range []string{"\x7f", "\u0085", "\u009b", "\u202e", "\u2029"} {
		if bytes.Contains(out, []byte(raw)) {
			t.Errorf("%q left raw in %s", raw, out)
		}
	}
	var got map[string]string
	if err := json.Unmarshal(out, &got); err != nil || got["s"] != in["s"] {
		t.Fatalf("%s decodes to %q (%v), want %q", out, got["s"], err, in["s"])
	}
	if raw := json.RawMessage("[\"\xff\"]"); string(terminalSafeJSON(raw)) != `["\ufffd"]` {
		t.Errorf("invalid UTF-8: %s", terminalSafeJSON(raw))
	}
}

// TestTerminalWriterKeepsRunesWhole: a rune split across writes (a
// letter, a C1 control) is escaped or passed whole, as in one write;
// newlines and tabs pass; a rune cut off at the end is escaped by Close.
func TestTerminalWriterKeepsRunesWhole(t *testing.T) {
	in := []byte("é\u009b\n\tx\x1b日")
	var one bytes.Buffer
	tw := &terminalWriter{w: &one}
	_, _ = tw.Write(in)
	_ = tw.Close()
	want := "é\\x9b\n\tx\\x1b日"
	if one.String() != want {
		t.Fatalf("one write: %q, want %q", one.String(), want)
	}
	for cut := 1; cut < len(in); cut++ {
		var split bytes.Buffer
		tw := &terminalWriter{w: &split}
		if n, err := tw.Write(in[:cut]); n != cut || err != nil {
			t.Fatalf("Write: %d, %v", n, err)
		}
		_, _ = tw.Write(in[cut:])
		_ = tw.Close()
		if split.String() != want {
			t.Errorf("split at %d: %q, want %q", cut, split.String(), want)
		}
	}
	var cutOff bytes.Buffer
	tw = &terminalWriter{w: &cutOff}
	_, _ = tw.Write([]byte("ok\xe6\x97"))
	if err := tw.Close(); err != nil || cutOff.String() != `ok\xe6\x97` {
		t.Fatalf("cut off: %q, %v", cutOff.String(), err)
	}
}

// TestNearest: the nearest name within the edit bound, a swap counting
// as one edit; the only name a prefix starts; nothing for a name near
// none or a one-letter name one edit from another.
func TestNearest(t *testing.T) {
	known := []string{"status", "result", "redrive", "dead-letters", "pipeline", "page-size", "o"}
	for name, want := range map[string]string{
		"statsu": "status", "redrvie": "redrive", "deadletters": "dead-letters", "pipe": "pipeline",
		"PIPELINE": "pipeline", "page": "page-size", "re": "", "x": "", "frobnicate": "",
	} {
		if got := nearest(name, known); got != want {
			t.Errorf("nearest(%q) = %q, want %q", name, got, want)
		}
	}
}
