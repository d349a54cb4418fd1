package ddbmodel

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// randomValue draws a value of any type, strings with characters that
// encoding/json escapes among them.
func randomValue(r *rand.Rand, depth int) Value {
	strs := []string{"", "a", "plain text", "quote\"d", `back\slash`, "<tag>&amp;", "héllo", "tab\there", "nl\n", "\x00\x1f", "\u2028", "bad\xffutf8", "ok+/="}
	nums := []string{"0", "1", "-1", "10", "1200", "0.5", "-0.025", "12.5", "123456789012345678901234567890", "1e3", "-7"}
	str := func() string { return strs[r.IntN(len(strs))] }
	n := 8
	if depth == 0 {
		n = 7
	}
	switch r.IntN(n) {
	case 0:
		return Str(str())
	case 1:
		return Num(nums[r.IntN(len(nums))])
	case 2:
		return Bin([]byte(str()))
	case 3:
		return Value{T: TypeBOOL, Bool: r.IntN(2) == 0}
	case 4:
		return Value{T: TypeNULL}
	case 5:
		return Value{T: TypeSS, Set: []string{str(), "x" + str()}}
	case 6:
		return Value{T: TypeBS, Set: []string{str(), "y" + str()}}
	default:
		if r.IntN(2) == 0 {
			m := Item{}
			for range r.IntN(4) {
				m[str()] = randomValue(r, depth-1)
			}
			return Value{T: TypeM, M: m}
		}
		l := []Value{}
		for range r.IntN(4) {
			l = append(l, randomValue(r, depth-1))
		}
		return Value{T: TypeL, L: l}
	}
}

func randomItem(r *rand.Rand) Item {
	item := Item{}
	for i := range r.IntN(6) {
		item[fmt.Sprintf("a%d<%d>", i, r.IntN(3))] = randomValue(r, 3)
	}
	return item
}

// TestEncodeAnswerIsEncodingJSON: encodeAnswer writes the answers'
// shapes byte for byte as json.Marshal does.
func TestEncodeAnswerIsEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		items := []Item{}
		for range r.IntN(4) {
			items = append(items, randomItem(r))
		}
		var nilItems []Item
		answers := []any{
			map[string]any{"Item": randomItem(r), "ConsumedCapacity": &consumedCapacity{TableName: "t<1>", CapacityUnits: 0.5, Table: &capacity{0.5}}},
			map[string]any{"Items": items, "Count": len(items), "ScannedCount": 7, "LastEvaluatedKey": randomItem(r)},
			map[string]any{"Items": nilItems, "Count": 0},
			map[string]any{"Responses": map[string][]Item{"tbl": items, "other": {}}, "UnprocessedKeys": map[string]any{}},
			map[string]any{"Attributes": Item(nil), "Records": []any{map[string]any{"dynamodb": map[string]any{"NewImage": randomItem(r), "SizeBytes": 12,
				"ApproximateCreationDateTime": 1.7e9 + 0.25}, "userIdentity": map[string]string{"Type": "Service"}}}, "Flag": true},
			map[string]any{"TableNames": []string{"a", "b&c"}, "Nested": []map[string]any{{"x": 1}}},
			randomValue(r, 3),
		}
		for j, a := range answers {
			var b bytes.Buffer
			if err := encodeAnswer(&b, a); err != nil {
				t.Fatal(err)
			}
			want, err := json.Marshal(a)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b.Bytes(), want) {
				t.Fatalf("answer %d.%d:\n got %s\nwant %s", i, j, b.Bytes(), want)
			}
		}
	}
}

// TestCanonicalNumber: the quick read of a stored number gives what the
// full parse gives, and declines what it cannot read.
func TestCanonicalNumber(t *testing.T) {
	texts := []string{"0", "-0", "1", "-1", "10", "1200", "-1200", "0.5", "0.05", "-0.025", "12.5", "0.50", "01", "1.", ".5", "+1", " 1", "1e3",
		"12345678901234567890123456789012345678", "123456789012345678901234567890123456789", "1" + strings.Repeat("0", 125), "1" + strings.Repeat("0", 126),
		"0." + strings.Repeat("0", 129) + "1", "0." + strings.Repeat("0", 130) + "1", "1x", "", "-", "0.0"}
	r := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		texts = append(texts, fmt.Sprint(r.Int64N(1<<50)-1<<49), fmt.Sprintf("0.%03d", r.IntN(1000)))
	}
	for _, s := range texts {
		quick, ok := canonicalNumber(s)
		if !ok {
			continue
		}
		full, err := parseNumber(strings.Repeat(" ", 1) + s) // the long way (a space defeats the quick read)
		if err != nil || full != quick || full.String() != s {
			t.Errorf("%q: quick %+v, full %+v (%v, %q)", s, quick, full, err, full.String())
		}
	}
	for _, s := range []string{"-0", "0.50", "01", "+1", "1e3", "12.5", "0.0"} {
		if _, ok := canonicalNumber(s); ok {
			t.Errorf("%q read as canonical", s)
		}
	}
}
