package ddbmodel

import (
	"strings"
	"testing"
)

// testItem is the item the expression cases evaluate against.
var testItem = Item{
	"s": Str("hello"), "n": Num("10"), "f": Num("2.5"), "b": Bin([]byte{1, 2}), "t": {T: TypeBOOL, Bool: true},
	"z": {T: TypeNULL}, "ss": {T: TypeSS, Set: []string{"a", "b"}}, "ns": {T: TypeNS, Set: []string{"1", "20"}},
	"m": {T: TypeM, M: Item{"x": Num("1"), "y": {T: TypeM, M: Item{"deep": Str("d")}}}},
	"l": {T: TypeL, L: []Value{Str("a"), Num("2"), {T: TypeL, L: []Value{Str("inner")}}}},
}

var testValues = map[string]Value{
	":s": Str("hello"), ":h": Str("he"), ":n9": Num("9"), ":n10": Num("10.0"), ":n100": Num("1e2"), ":a": Str("a"),
	":t": {T: TypeBOOL, Bool: true}, ":N": Str("N"), ":SS": Str("SS"), ":two": Num("2"), ":d": Str("d"), ":l": {T: TypeL},
}

func TestConditions(t *testing.T) {
	names := map[string]string{"#s": "s", "#n": "n", "#m": "m", "#missing": "nope"}
	cases := []struct {
		expr string
		want bool
	}{
		{"#s = :s", true},
		{"s = :s", true},
		{"n = :n10", true}, // numbers compare by value
		{"n < :n100 AND n > :n9", true},
		{"n <= :n10 AND n >= :n10", true},
		{"n <> :n9", true},
		{"nope <> :s", true}, // a missing attribute differs from everything
		{"nope = :s", false},
		{"nope < :s", false},
		{"s < :n100", false}, // different types compare false
		{"f BETWEEN :two AND :n9", true},
		{"n BETWEEN :two AND :n9", false},
		{"s IN (:a, :s)", true},
		{"s IN (:a, :h)", false},
		{"attribute_exists(#m.y.deep)", true},
		{"attribute_exists(l[2][0])", true},
		{"attribute_exists(l[3])", false},
		{"attribute_not_exists(#missing)", true},
		{"attribute_type(n, :N)", true},
		{"attribute_type(ss, :SS)", true},
		{"begins_with(s, :h)", true},
		{"begins_with(n, :h)", false},
		{"contains(s, :h)", true},
		{"contains(ss, :a)", true},
		{"contains(l, :a)", true},
		{"contains(ns, :two)", false},
		{"size(s) = :two", false},
		{"size(l) > :two", true},
		{"size(ss) = :two", true},
		{"size(m) = :two", true},
		{"size(nope) = :two", false},
		{"m.y.deep = :d", true},
		{"l[1] = :two", true},
		{"t = :t", true},
		// Precedence: NOT binds tighter than AND, AND tighter than OR.
		{"n = :n9 AND s = :s OR t = :t", true},
		{"n = :n9 AND (s = :s OR t = :t)", false},
		{"NOT n = :n9 AND s = :s", true},
		{"NOT (n = :n10 AND s = :s)", false},
		{"t = :t OR n = :n9 AND s = :a", true},
		{"(t = :t OR n = :n9) AND s = :a", false},
		{"not n = :n9 and s = :s", true}, // keywords are case-insensitive
	}
	for _, c := range cases {
		ph := newPlaceholders(names, testValues)
		cond, err := parseCondition("ConditionExpression", c.expr, ph)
		if err != nil {
			t.Errorf("%s: %v", c.expr, err)
			continue
		}
		if got := eval(cond, testItem); got != c.want {
			t.Errorf("%s = %v, want %v", c.expr, got, c.want)
		}
	}
}

func TestConditionErrors(t *testing.T) {
	cases := []struct{ expr, want string }{
		{"", "can not be empty"},
		{"a =", "Syntax error"},
		{"a = :undefined", "not defined"},
		{"#undefined = :s", "not defined"},
		{"a < :t", "Incorrect operand type"},
		{"a BETWEEN :n10 AND :two", "upper bound"},
		{"a = :s AND", "Syntax error"},
		{"(a = :s", "Syntax error"},
		{"a = a", "distinct"},
		{"bogus(a)", "Invalid function name"},
		{"size(:s) = :two", "Incorrect operand type"},
		{"attribute_type(a, :s)", "Invalid attribute type"},
		{"begins_with(a, :two)", "Incorrect operand type"},
		{"a = :s b", "Syntax error"},
		{"a.and = :s", "Syntax error"},
		{"a = :s $", "Invalid character"},
	}
	for _, c := range cases {
		ph := newPlaceholders(map[string]string{}, testValues)
		_, err := parseCondition("ConditionExpression", c.expr, ph)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "ValidationException") {
			t.Errorf("%q: err = %v, want a ValidationException with %q", c.expr, err, c.want)
		}
	}
}

func TestUnusedPlaceholders(t *testing.T) {
	ph := newPlaceholders(map[string]string{"#a": "a", "#b": "b"}, map[string]Value{":s": Str("x")})
	if _, err := parseCondition("ConditionExpression", "#a = :s", ph); err != nil {
		t.Fatal(err)
	}
	if err := ph.checkUnused(true); err == nil || !strings.Contains(err.Error(), "unused in expressions: keys: {#b}") {
		t.Fatalf("unused name: %v", err)
	}
	if err := newPlaceholders(nil, map[string]Value{":s": Str("x")}).checkUnused(false); err == nil {
		t.Fatal("values without an expression were accepted")
	}
}

func TestUpdates(t *testing.T) {
	key := Item{"pk": Str("k")}
	cases := []struct {
		expr string
		old  Item
		want string // the new item's JSON
	}{
		{"SET a = :one, b = :s", nil, `{"a":{"N":"1"},"b":{"S":"x"},"pk":{"S":"k"}}`},
		{"SET n = n + :one", Item{"n": Num("41")}, `{"n":{"N":"42"},"pk":{"S":"k"}}`},
		{"SET n = n - :half", Item{"n": Num("1")}, `{"n":{"N":"0.5"},"pk":{"S":"k"}}`},
		{"SET n = if_not_exists(n, :one)", nil, `{"n":{"N":"1"},"pk":{"S":"k"}}`},
		{"SET n = if_not_exists(n, :one)", Item{"n": Num("7")}, `{"n":{"N":"7"},"pk":{"S":"k"}}`},
		{"SET l = list_append(l, :l)", Item{"l": {T: TypeL, L: []Value{Num("1")}}}, `{"l":{"L":[{"N":"1"},{"S":"x"}]},"pk":{"S":"k"}}`},
		{"SET l[5] = :s", Item{"l": {T: TypeL, L: []Value{Num("1")}}}, `{"l":{"L":[{"N":"1"},{"S":"x"}]},"pk":{"S":"k"}}`},
		{"SET m.x = :s", Item{"m": {T: TypeM, M: Item{}}}, `{"m":{"M":{"x":{"S":"x"}}},"pk":{"S":"k"}}`},
		{"SET a = b, b = a", Item{"a": Num("1"), "b": Num("2")}, `{"a":{"N":"2"},"b":{"N":"1"},"pk":{"S":"k"}}`},
		{"REMOVE a, l[0], l[2]", Item{"a": Num("1"), "l": {T: TypeL, L: []Value{Num("0"), Num("1"), Num("2"), Num("3")}}}, `{"l":{"L":[{"N":"1"},{"N":"3"}]},"pk":{"S":"k"}}`},
		{"ADD n :one, s :ss", Item{"s": {T: TypeSS, Set: []string{"a"}}}, `{"n":{"N":"1"},"pk":{"S":"k"},"s":{"SS":["a","b"]}}`},
		{"DELETE s :ss", Item{"s": {T: TypeSS, Set: []string{"a", "b"}}}, `{"pk":{"S":"k"}}`},
		{"remove a set b = :one add c :one", Item{"a": Num("1")}, `{"b":{"N":"1"},"c":{"N":"1"},"pk":{"S":"k"}}`},
	}
	values := map[string]Value{":one": Num("1"), ":half": Num("0.5"), ":s": Str("x"), ":l": {T: TypeL, L: []Value{Str("x")}},
		":ss": {T: TypeSS, Set: []string{"a", "b"}}}
	for _, c := range cases {
		ph := newPlaceholders(nil, values)
		u, err := parseUpdate(c.expr, ph)
		if err != nil {
			t.Errorf("%s: %v", c.expr, err)
			continue
		}
		got, err := u.apply(c.old, key)
		if err != nil {
			t.Errorf("%s: %v", c.expr, err)
			continue
		}
		if b, _ := (Value{T: TypeM, M: got}).MarshalJSON(); string(b) != `{"M":`+c.want+`}` {
			t.Errorf("%s: got %s, want %s", c.expr, b, c.want)
		}
	}
	errs := []struct{ expr, want string }{
		{"SET a = :one SET b = :one", "can only be used once"},
		{"SET a = :one, a = :s", "conflict"},
		{"SET m.x = :one REMOVE m", "overlap"},
		{"ADD a :s", "Incorrect operand type"},
		{"DELETE a :one", "Incorrect operand type"},
		{"SET a = bogus(a)", "Invalid function name"},
	}
	for _, c := range errs {
		if _, err := parseUpdate(c.expr, newPlaceholders(nil, values)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err = %v, want %q", c.expr, err, c.want)
		}
	}
	u, _ := parseUpdate("SET n = n + :one", newPlaceholders(nil, values))
	if _, err := u.apply(Item{"n": Str("x")}, key); err == nil {
		t.Error("adding to a string was accepted")
	}
	if _, err := u.apply(nil, key); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("adding to a missing attribute: %v", err)
	}
}

func TestProjection(t *testing.T) {
	paths, err := parseProjection("s, m.y.deep, l[2][0], l[0], nope", newPlaceholders(nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := (Value{T: TypeM, M: project(testItem, paths)}).MarshalJSON()
	want := `{"M":{"l":{"L":[{"S":"a"},{"L":[{"S":"inner"}]}]},"m":{"M":{"y":{"M":{"deep":{"S":"d"}}}}},"s":{"S":"hello"}}}`
	if string(got) != want {
		t.Fatalf("projection = %s, want %s", got, want)
	}
	if _, err := parseProjection("a.b, a", newPlaceholders(nil, nil)); err == nil {
		t.Fatal("overlapping projection paths were accepted")
	}
}

func TestNumbers(t *testing.T) {
	for in, want := range map[string]string{"1.0": "1", "0010": "10", "1e2": "100", "-0": "0", "1.50": "1.5", "0.000": "0", "-2.5E-3": "-0.0025", "+7": "7"} {
		n, err := parseNumber(in)
		if err != nil || n.String() != want {
			t.Errorf("parseNumber(%q) = %v, %v; want %s", in, n, err, want)
		}
	}
	for _, bad := range []string{"", "abc", "1..2", "1e", "123456789012345678901234567890123456789", "1e126", "1e-131"} {
		if _, err := parseNumber(bad); err == nil {
			t.Errorf("parseNumber(%q) accepted", bad)
		}
	}
	ordered := []string{"-100", "-2.5", "-1", "0", "0.001", "1", "1.5", "2", "10", "1e20"}
	for i := range ordered {
		for j := range ordered {
			a, b := Num(ordered[i]).S, Num(ordered[j]).S
			if got := compareNumbers(a, b); got != cmpInt(i, j) {
				t.Errorf("compare(%s, %s) = %d", a, b, got)
			}
		}
	}
	if s, _ := addNumbers("0.1", "0.2", false); s != "0.3" {
		t.Errorf("0.1 + 0.2 = %s", s)
	}
	if s, _ := addNumbers("5", "7.25", true); s != "-2.25" {
		t.Errorf("5 - 7.25 = %s", s)
	}
	for n, want := range map[string]int{"0": 1, "1": 2, "-1": 3, "100": 2, "1.5": 3, "123.456": 5, "0.001": 2, "12345678901234567890": 11} {
		if got := numberSize(Num(n).S); got != want {
			t.Errorf("size of %s = %d, want %d", n, got, want)
		}
	}
}
