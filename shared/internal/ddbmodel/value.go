package ddbmodel

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
)

// Type is an attribute value's DynamoDB type, spelled as on the wire.
type Type string

// The attribute types.
const (
	TypeS    Type = "S"
	TypeN    Type = "N"
	TypeB    Type = "B"
	TypeBOOL Type = "BOOL"
	TypeNULL Type = "NULL"
	TypeSS   Type = "SS"
	TypeNS   Type = "NS"
	TypeBS   Type = "BS"
	TypeM    Type = "M"
	TypeL    Type = "L"
)

// Value is one attribute value. S holds the string of an S, the
// canonical text of an N and the bytes of a B; Set holds the members of
// an SS, NS (canonical) or BS (bytes); Bool the value of a BOOL.
type Value struct {
	T    Type
	S    string
	Bool bool
	Set  []string
	M    Item
	L    []Value
}

// Item is an item: attribute name to value.
type Item map[string]Value

// Str, Num and Bin build scalar values; Num takes the number's text.
func Str(s string) Value { return Value{T: TypeS, S: s} }

// Num builds a number from its decimal text (which must be valid).
func Num(text string) Value {
	n, err := parseNumber(text)
	if err != nil {
		panic(err)
	}
	return Value{T: TypeN, S: n.String()}
}

// Bin builds a binary value.
func Bin(b []byte) Value { return Value{T: TypeB, S: string(b)} }

// isSet reports whether t is a set type.
func (t Type) isSet() bool { return t == TypeSS || t == TypeNS || t == TypeBS }

// scalarOf is a set type's member type.
func (t Type) scalarOf() Type {
	switch t {
	case TypeSS:
		return TypeS
	case TypeNS:
		return TypeN
	case TypeBS:
		return TypeB
	}
	return ""
}

// MarshalJSON writes the value in DynamoDB's JSON form.
func (v Value) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	v.write(&b)
	return b.Bytes(), nil
}

func (v Value) write(b *bytes.Buffer) {
	b.WriteString(`{"`)
	b.WriteString(string(v.T))
	b.WriteString(`":`)
	switch v.T {
	case TypeS, TypeN:
		writeString(b, v.S)
	case TypeB:
		writeBase64(b, v.S)
	case TypeBOOL:
		b.WriteString(strconv.FormatBool(v.Bool))
	case TypeNULL:
		b.WriteString("true")
	case TypeSS, TypeNS, TypeBS:
		b.WriteByte('[')
		for i, s := range v.Set {
			if i > 0 {
				b.WriteByte(',')
			}
			if v.T == TypeBS {
				writeBase64(b, s)
			} else {
				writeString(b, s)
			}
		}
		b.WriteByte(']')
	case TypeM:
		writeItem(b, v.M)
	case TypeL:
		b.WriteByte('[')
		for i, e := range v.L {
			if i > 0 {
				b.WriteByte(',')
			}
			e.write(b)
		}
		b.WriteByte(']')
	}
	b.WriteByte('}')
}

// writeItem writes a map of values with its names in sorted order.
func writeItem(b *bytes.Buffer, m map[string]Value) {
	b.WriteByte('{')
	for i, k := range sortedNames(m) {
		if i > 0 {
			b.WriteByte(',')
		}
		writeString(b, k)
		b.WriteByte(':')
		m[k].write(b)
	}
	b.WriteByte('}')
}

func sortedNames[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

// UnmarshalJSON reads a value in DynamoDB's JSON form, validating it as
// DynamoDB does (one type, numbers in range, sets non-empty and without
// duplicates).
func (v *Value) UnmarshalJSON(data []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	if len(raw) != 1 {
		return validation("Supplied AttributeValue has more than one datatypes set, must contain exactly one of the supported datatypes")
	}
	for k, r := range raw {
		return v.decode(Type(k), r)
	}
	return nil
}

func (v *Value) decode(t Type, r json.RawMessage) error {
	*v = Value{T: t}
	switch t {
	case TypeS:
		return json.Unmarshal(r, &v.S)
	case TypeN:
		var s string
		if err := json.Unmarshal(r, &s); err != nil {
			return err
		}
		n, err := parseNumber(s)
		if err != nil {
			return err
		}
		v.S = n.String()
	case TypeB:
		var b []byte
		if err := json.Unmarshal(r, &b); err != nil {
			return err
		}
		v.S = string(b)
	case TypeBOOL:
		return json.Unmarshal(r, &v.Bool)
	case TypeNULL:
		var b bool
		if err := json.Unmarshal(r, &b); err != nil {
			return err
		}
		if !b {
			return validation("One or more parameter values were invalid: Null attribute value types must have the value of true")
		}
	case TypeSS, TypeNS:
		if err := json.Unmarshal(r, &v.Set); err != nil {
			return err
		}
		if t == TypeNS {
			for i, s := range v.Set {
				n, err := parseNumber(s)
				if err != nil {
					return err
				}
				v.Set[i] = n.String()
			}
		}
	case TypeBS:
		var bs [][]byte
		if err := json.Unmarshal(r, &bs); err != nil {
			return err
		}
		for _, b := range bs {
			v.Set = append(v.Set, string(b))
		}
	case TypeM:
		return json.Unmarshal(r, &v.M)
	case TypeL:
		return json.Unmarshal(r, &v.L)
	default:
		return validation("Supplied AttributeValue is empty, must contain exactly one of the supported datatypes")
	}
	if t.isSet() {
		return checkSet(t, v.Set)
	}
	return nil
}

// checkSet refuses an empty set or one with a member twice.
func checkSet(t Type, set []string) error {
	if len(set) == 0 {
		return validation("One or more parameter values were invalid: An %s may not be empty", t)
	}
	seen := make(map[string]bool, len(set))
	for _, s := range set {
		if seen[s] {
			return validation("One or more parameter values were invalid: Input collection contains duplicates.")
		}
		seen[s] = true
	}
	return nil
}

// equal reports deep equality (sets compare as sets, numbers by value).
func (v Value) equal(w Value) bool {
	if v.T != w.T {
		return false
	}
	switch v.T {
	case TypeS, TypeN, TypeB:
		return v.S == w.S
	case TypeBOOL:
		return v.Bool == w.Bool
	case TypeNULL:
		return true
	case TypeSS, TypeNS, TypeBS:
		if len(v.Set) != len(w.Set) {
			return false
		}
		for _, s := range v.Set {
			if !slices.Contains(w.Set, s) {
				return false
			}
		}
		return true
	case TypeM:
		return itemsEqual(v.M, w.M)
	case TypeL:
		return slices.EqualFunc(v.L, w.L, Value.equal)
	}
	return false
}

func itemsEqual(a, b map[string]Value) bool {
	if len(a) != len(b) {
		return false
	}
	for k, va := range a {
		vb, ok := b[k]
		if !ok || !va.equal(vb) {
			return false
		}
	}
	return true
}

// compare orders two values of one scalar type (S and B by bytes, N by
// value); ok is false for other types or different types.
func compare(a, b Value) (int, bool) {
	if a.T != b.T {
		return 0, false
	}
	switch a.T {
	case TypeS, TypeB:
		return strings.Compare(a.S, b.S), true
	case TypeN:
		return compareNumbers(a.S, b.S), true
	}
	return 0, false
}

// clone copies a value deeply.
func (v Value) clone() Value {
	switch v.T {
	case TypeSS, TypeNS, TypeBS:
		v.Set = slices.Clone(v.Set)
	case TypeM:
		v.M = cloneItem(v.M)
	case TypeL:
		l := make([]Value, len(v.L))
		for i, e := range v.L {
			l[i] = e.clone()
		}
		v.L = l
	}
	return v
}

func cloneItem(m map[string]Value) map[string]Value {
	if m == nil {
		return nil
	}
	out := make(map[string]Value, len(m))
	for k, v := range m {
		out[k] = v.clone()
	}
	return out
}

// size is the value's size as DynamoDB bills it.
func (v Value) size() int {
	switch v.T {
	case TypeS, TypeB:
		return len(v.S)
	case TypeN:
		return numberSize(v.S)
	case TypeBOOL, TypeNULL:
		return 1
	case TypeSS, TypeBS:
		n := 0
		for _, s := range v.Set {
			n += len(s)
		}
		return n
	case TypeNS:
		n := 0
		for _, s := range v.Set {
			n += numberSize(s)
		}
		return n
	case TypeM:
		n := 3
		for k, e := range v.M {
			n += len(k) + e.size() + 1
		}
		return n
	case TypeL:
		n := 3
		for _, e := range v.L {
			n += e.size() + 1
		}
		return n
	}
	return 0
}

// itemSize is an item's size: its attribute names and values.
func itemSize(item Item) int {
	n := 0
	for k, v := range item {
		n += len(k) + v.size()
	}
	return n
}

// --- numbers ---

// number is a decimal: sign, significant digits without leading or
// trailing zeros ("" for zero) and the exponent of the last digit.
type number struct {
	neg    bool
	digits string
	exp    int
}

var errNumber = errors.New("number")

// parseNumber reads a DynamoDB number (an optional sign, digits with an
// optional point, an optional exponent), checking its precision and
// range as DynamoDB does.
func parseNumber(s string) (number, error) {
	if n, ok := canonicalNumber(s); ok {
		return n, nil
	}
	bad := func() error { return validation("A value provided cannot be converted into a number") }
	t := strings.TrimSpace(s)
	var n number
	if t == "" {
		return n, bad()
	}
	if t[0] == '-' || t[0] == '+' {
		n.neg = t[0] == '-'
		t = t[1:]
	}
	mant, expText, hasExp := strings.Cut(strings.ToLower(t), "e")
	exp := 0
	if hasExp {
		e, ok := new(big.Int).SetString(strings.TrimPrefix(expText, "+"), 10)
		if !ok || !e.IsInt64() || e.Int64() > 1e6 || e.Int64() < -1e6 {
			return n, bad()
		}
		exp = int(e.Int64())
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	if intPart+frac == "" || strings.ContainsFunc(intPart+frac, func(r rune) bool { return r < '0' || r > '9' }) {
		return n, bad()
	}
	digits := intPart + frac
	exp -= len(frac)
	digits = strings.TrimLeft(digits, "0")
	trimmed := strings.TrimRight(digits, "0")
	exp += len(digits) - len(trimmed)
	n.digits = trimmed
	if n.digits == "" {
		return number{}, nil
	}
	if len(n.digits) > 38 {
		return n, validation("Attempting to store more than 38 significant digits in a Number")
	}
	// Magnitude: the position of the leading digit.
	lead := exp + len(n.digits) - 1
	if lead > 125 {
		return n, validation("Number overflow. Attempting to store a number with magnitude larger than supported range")
	}
	if lead < -130 {
		return n, validation("Number underflow. Attempting to store a number with magnitude smaller than supported range")
	}
	n.exp = exp
	return n, nil
}

// canonicalNumber reads, without allocating, an integer or a fraction
// below one written as String writes it (an optional minus, digits
// without a superfluous zero; a fraction "0." and digits, the last not a
// zero; "0" for zero), within DynamoDB's precision and range: what the
// model mostly stores and compares. ok is false for any other text, which
// parseNumber then reads the long way.
func canonicalNumber(s string) (number, bool) {
	if s == "0" {
		return number{}, true
	}
	var n number
	t := s
	if len(t) > 0 && t[0] == '-' {
		n.neg, t = true, t[1:]
	}
	intPart, frac, hasPoint := strings.Cut(t, ".")
	if intPart == "" || (hasPoint && (frac == "" || frac[len(frac)-1] == '0')) || (len(intPart) > 1 && intPart[0] == '0') {
		return number{}, false
	}
	for _, part := range []string{intPart, frac} {
		for i := 0; i < len(part); i++ {
			if part[i] < '0' || part[i] > '9' {
				return number{}, false
			}
		}
	}
	switch {
	case intPart == "0" && !hasPoint:
		return number{}, false // "-0"
	case intPart == "0":
		// 0.00ddd: the digits after the point's zeros.
		d := strings.TrimLeft(frac, "0")
		n.digits, n.exp = d, -len(frac)
	case hasPoint:
		// Digits on both sides of the point are not one substring: the
		// long way (qasync stores integers).
		return number{}, false
	default:
		d := strings.TrimRight(intPart, "0")
		n.digits, n.exp = d, len(intPart)-len(d)
	}
	if len(n.digits) == 0 || len(n.digits) > 38 {
		return number{}, false
	}
	if lead := n.exp + len(n.digits) - 1; lead > 125 || lead < -130 {
		return number{}, false
	}
	return n, true
}

// String is the canonical text: plain notation, no superfluous zeros.
func (n number) String() string {
	if n.digits == "" {
		return "0"
	}
	var b strings.Builder
	if n.neg {
		b.WriteByte('-')
	}
	switch {
	case n.exp >= 0:
		b.WriteString(n.digits)
		b.WriteString(strings.Repeat("0", n.exp))
	case -n.exp < len(n.digits):
		cut := len(n.digits) + n.exp
		b.WriteString(n.digits[:cut])
		b.WriteByte('.')
		b.WriteString(n.digits[cut:])
	default:
		b.WriteString("0.")
		b.WriteString(strings.Repeat("0", -n.exp-len(n.digits)))
		b.WriteString(n.digits)
	}
	return b.String()
}

// mustNumber parses a canonical number.
func mustNumber(s string) number {
	n, err := parseNumber(s)
	if err != nil {
		panic(fmt.Sprintf("ddbmodel: stored number %q: %v", s, err))
	}
	return n
}

func compareNumbers(a, b string) int {
	x, y := mustNumber(a), mustNumber(b)
	sign := func(n number) int {
		switch {
		case n.digits == "":
			return 0
		case n.neg:
			return -1
		}
		return 1
	}
	if sx, sy := sign(x), sign(y); sx != sy || sx == 0 {
		return cmpInt(sx, sy)
	}
	mag := cmpMagnitude(x, y)
	if x.neg {
		return -mag
	}
	return mag
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// cmpMagnitude compares the absolute values of two non-zero numbers.
func cmpMagnitude(x, y number) int {
	lx, ly := x.exp+len(x.digits), y.exp+len(y.digits)
	if lx != ly {
		return cmpInt(lx, ly)
	}
	// Same leading position: compare digit strings padded to one length.
	n := max(len(x.digits), len(y.digits))
	return strings.Compare(x.digits+strings.Repeat("0", n-len(x.digits)), y.digits+strings.Repeat("0", n-len(y.digits)))
}

// bigOf is n as an integer scaled by 10^-exp.
func (n number) bigOf(exp int) *big.Int {
	i, _ := new(big.Int).SetString("0"+n.digits, 10)
	if n.exp > exp {
		i.Mul(i, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(n.exp-exp)), nil))
	}
	if n.neg {
		i.Neg(i)
	}
	return i
}

// addNumbers returns a + b (b negated when sub), checked as a stored
// number.
func addNumbers(a, b string, sub bool) (string, error) {
	x, y := mustNumber(a), mustNumber(b)
	exp := min(x.exp, y.exp)
	if x.digits == "" {
		exp = y.exp
	}
	if y.digits == "" {
		exp = x.exp
	}
	bx, by := x.bigOf(exp), y.bigOf(exp)
	if sub {
		by.Neg(by)
	}
	sum := bx.Add(bx, by)
	text := sum.String() + "e" + fmt.Sprint(exp)
	r, err := parseNumber(text)
	if err != nil {
		return "", err
	}
	return r.String(), nil
}

// numberSize is a number's billed size, as DynamoDB Local counts it:
// one byte per pair of digits, the pairs aligned on the decimal point
// (so 1.5 takes two and 15 one), one more byte, and one more for a
// negative number; zero takes one byte.
func numberSize(s string) int {
	n := mustNumber(s)
	if n.digits == "" {
		return 1
	}
	pair := func(pos int) int { // floor(pos / 2)
		if pos < 0 {
			return (pos - 1) / 2
		}
		return pos / 2
	}
	lead, trail := n.exp+len(n.digits)-1, n.exp
	size := pair(lead) - pair(trail) + 2
	if n.neg {
		size++
	}
	return size
}
