package ddbmodel

import (
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// get resolves a document path in an item.
func get(item Item, p docPath) (Value, bool) {
	v, ok := item[p[0].name]
	if !ok || p[0].isIndex {
		return Value{}, false
	}
	for _, e := range p[1:] {
		switch {
		case e.isIndex && v.T == TypeL && e.index < len(v.L):
			v = v.L[e.index]
		case !e.isIndex && v.T == TypeM:
			if v, ok = v.M[e.name]; !ok {
				return Value{}, false
			}
		default:
			return Value{}, false
		}
	}
	return v, true
}

// operandValue evaluates a condition operand; ok is false when it names
// a missing attribute (or size of a value that has none).
func operandValue(item Item, o operand) (Value, bool) {
	switch o := o.(type) {
	case valueOp:
		return o.v, true
	case pathOp:
		return get(item, o.path)
	case sizeOp:
		v, ok := get(item, o.path)
		if !ok {
			return Value{}, false
		}
		n := -1
		switch v.T {
		case TypeS:
			n = utf8.RuneCountInString(v.S)
		case TypeB:
			n = len(v.S)
		case TypeSS, TypeNS, TypeBS:
			n = len(v.Set)
		case TypeM:
			n = len(v.M)
		case TypeL:
			n = len(v.L)
		}
		if n < 0 {
			return Value{}, false
		}
		return Value{T: TypeN, S: strconv.Itoa(n)}, true
	}
	return Value{}, false
}

// eval evaluates a condition against an item (nil when there is none).
func eval(c cond, item Item) bool {
	switch c := c.(type) {
	case andCond:
		return eval(c.a, item) && eval(c.b, item)
	case orCond:
		return eval(c.a, item) || eval(c.b, item)
	case notCond:
		return !eval(c.a, item)
	case cmpCond:
		a, okA := operandValue(item, c.a)
		b, okB := operandValue(item, c.b)
		if c.op == "<>" {
			return !okA || !okB || !a.equal(b)
		}
		if !okA || !okB {
			return false
		}
		if c.op == "=" {
			return a.equal(b)
		}
		r, ok := compare(a, b)
		if !ok {
			return false
		}
		switch c.op {
		case "<":
			return r < 0
		case "<=":
			return r <= 0
		case ">":
			return r > 0
		}
		return r >= 0
	case betweenCond:
		a, okA := operandValue(item, c.a)
		lo, okL := operandValue(item, c.lo)
		hi, okH := operandValue(item, c.hi)
		if !okA || !okL || !okH {
			return false
		}
		r1, ok1 := compare(lo, a)
		r2, ok2 := compare(a, hi)
		return ok1 && ok2 && r1 <= 0 && r2 <= 0
	case inCond:
		a, ok := operandValue(item, c.a)
		if !ok {
			return false
		}
		return slices.ContainsFunc(c.list, func(o operand) bool {
			v, ok := operandValue(item, o)
			return ok && a.equal(v)
		})
	case funcCond:
		return evalFunc(c, item)
	}
	return false
}

func evalFunc(c funcCond, item Item) bool {
	v, ok := operandValue(item, c.args[0])
	switch c.name {
	case "attribute_exists":
		return ok
	case "attribute_not_exists":
		return !ok
	}
	if !ok {
		return false
	}
	arg, okArg := operandValue(item, c.args[1])
	if !okArg {
		return false
	}
	switch c.name {
	case "attribute_type":
		return arg.T == TypeS && string(v.T) == arg.S
	case "begins_with":
		return (v.T == TypeS || v.T == TypeB) && v.T == arg.T && strings.HasPrefix(v.S, arg.S)
	case "contains":
		switch v.T {
		case TypeS, TypeB:
			return arg.T == v.T && strings.Contains(v.S, arg.S)
		case TypeSS, TypeNS, TypeBS:
			return arg.T == v.T.scalarOf() && slices.Contains(v.Set, arg.S)
		case TypeL:
			return slices.ContainsFunc(v.L, arg.equal)
		}
	}
	return false
}

// --- projections ---

// projNode is a tree of projected paths: a whole value, or some of its
// map members or list elements.
type projNode struct {
	whole   bool
	members map[string]*projNode
	indexes map[int]*projNode
}

// project returns the parts of item the paths name, nested as in the
// item; a projected list keeps the chosen elements in their order.
func project(item Item, paths []docPath) Item {
	root := &projNode{members: map[string]*projNode{}}
	for _, p := range paths {
		n := root
		for _, e := range p {
			if e.isIndex {
				if n.indexes == nil {
					n.indexes = map[int]*projNode{}
				}
				if n.indexes[e.index] == nil {
					n.indexes[e.index] = &projNode{}
				}
				n = n.indexes[e.index]
			} else {
				if n.members == nil {
					n.members = map[string]*projNode{}
				}
				if n.members[e.name] == nil {
					n.members[e.name] = &projNode{}
				}
				n = n.members[e.name]
			}
		}
		n.whole = true
	}
	out := Item{}
	for name, n := range root.members {
		if v, ok := item[name]; ok {
			if got, ok := n.pick(v); ok {
				out[name] = got
			}
		}
	}
	return out
}

// pick is the part of v the node names; ok is false when none of it
// exists.
func (n *projNode) pick(v Value) (Value, bool) {
	if n.whole {
		return v.clone(), true
	}
	switch {
	case v.T == TypeM && n.members != nil:
		m := map[string]Value{}
		for name, c := range n.members {
			if child, ok := v.M[name]; ok {
				if got, ok := c.pick(child); ok {
					m[name] = got
				}
			}
		}
		return Value{T: TypeM, M: m}, len(m) > 0
	case v.T == TypeL && n.indexes != nil:
		var l []Value
		for _, i := range sortedKeys(n.indexes) {
			if i < len(v.L) {
				if got, ok := n.indexes[i].pick(v.L[i]); ok {
					l = append(l, got)
				}
			}
		}
		return Value{T: TypeL, L: l}, len(l) > 0
	}
	return Value{}, false
}

func sortedKeys[V any](m map[int]V) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// --- updates ---

// apply runs an update on a copy of old (nil when the item does not
// exist yet, key holding the key attributes) and returns the new item.
// Right-hand sides are evaluated against old.
func (u *update) apply(old Item, key Item) (Item, error) {
	base := old
	if base == nil {
		base = Item{}
	}
	item := cloneItem(base)
	for k, v := range key {
		item[k] = v
	}
	type assign struct {
		path docPath
		v    Value
	}
	var sets []assign
	for _, s := range u.sets {
		v, err := setOperandValue(base, s.v)
		if err != nil {
			return nil, err
		}
		sets = append(sets, assign{s.path, v})
	}
	for _, s := range sets {
		if err := setPath(item, s.path, s.v); err != nil {
			return nil, err
		}
	}
	// Remove list elements from the highest index down, so that several
	// removals from one list name the original positions.
	removes := slices.Clone(u.removes)
	slices.SortStableFunc(removes, func(a, b docPath) int {
		if len(a) == len(b) && a[len(a)-1].isIndex && b[len(b)-1].isIndex && slices.Equal(a[:len(a)-1], b[:len(b)-1]) {
			return b[len(b)-1].index - a[len(a)-1].index
		}
		return 0
	})
	for _, p := range removes {
		if err := removePath(item, p); err != nil {
			return nil, err
		}
	}
	for _, a := range u.adds {
		cur, ok := get(item, a.path)
		var next Value
		switch {
		case !ok:
			next = a.v.clone()
		case cur.T == TypeN && a.v.T == TypeN:
			sum, err := addNumbers(cur.S, a.v.S, false)
			if err != nil {
				return nil, err
			}
			next = Value{T: TypeN, S: sum}
		case cur.T.isSet() && cur.T == a.v.T:
			next = cur.clone()
			for _, s := range a.v.Set {
				if !slices.Contains(next.Set, s) {
					next.Set = append(next.Set, s)
				}
			}
		default:
			return nil, validation("An operand in the update expression has an incorrect data type")
		}
		if err := setPath(item, a.path, next); err != nil {
			return nil, err
		}
	}
	for _, d := range u.deletes {
		cur, ok := get(item, d.path)
		if !ok {
			continue
		}
		if cur.T != d.v.T {
			return nil, validation("An operand in the update expression has an incorrect data type")
		}
		next := Value{T: cur.T}
		for _, s := range cur.Set {
			if !slices.Contains(d.v.Set, s) {
				next.Set = append(next.Set, s)
			}
		}
		var err error
		if len(next.Set) == 0 {
			err = removePath(item, d.path)
		} else {
			err = setPath(item, d.path, next)
		}
		if err != nil {
			return nil, err
		}
	}
	return item, nil
}

func setOperandValue(item Item, o operand) (Value, error) {
	missing := validation("The provided expression refers to an attribute that does not exist in the item")
	switch o := o.(type) {
	case valueOp:
		return o.v.clone(), nil
	case pathOp:
		v, ok := get(item, o.path)
		if !ok {
			return Value{}, missing
		}
		return v.clone(), nil
	case ifNotExistsOp:
		if v, ok := get(item, o.path); ok {
			return v.clone(), nil
		}
		return setOperandValue(item, o.def)
	case listAppendOp:
		a, err := setOperandValue(item, o.a)
		if err != nil {
			return Value{}, err
		}
		b, err := setOperandValue(item, o.b)
		if err != nil {
			return Value{}, err
		}
		if a.T != TypeL || b.T != TypeL {
			return Value{}, validation("Invalid UpdateExpression: Incorrect operand type for operator or function; operator or function: list_append, operand type: %s", typeWord(a.T))
		}
		return Value{T: TypeL, L: append(slices.Clone(a.L), b.L...)}, nil
	case arithOp:
		a, err := setOperandValue(item, o.a)
		if err != nil {
			return Value{}, err
		}
		b, err := setOperandValue(item, o.b)
		if err != nil {
			return Value{}, err
		}
		if a.T != TypeN || b.T != TypeN {
			return Value{}, validation("An operand in the update expression has an incorrect data type")
		}
		sum, err := addNumbers(a.S, b.S, o.sub)
		if err != nil {
			return Value{}, err
		}
		return Value{T: TypeN, S: sum}, nil
	}
	return Value{}, validation("Invalid UpdateExpression")
}

var errInvalidPath = validation("The document path provided in the update expression is invalid for update")

// setPath sets the value at p, creating nothing but the last element
// (a list index past the end appends).
func setPath(item Item, p docPath, v Value) error {
	if len(p) == 1 {
		item[p[0].name] = v
		return nil
	}
	top, ok := item[p[0].name]
	if !ok {
		return errInvalidPath
	}
	next, err := setIn(top, p[1:], v)
	if err != nil {
		return err
	}
	item[p[0].name] = next
	return nil
}

// setIn returns a copy of cur with v set at rest.
func setIn(cur Value, rest docPath, v Value) (Value, error) {
	e := rest[0]
	last := len(rest) == 1
	switch {
	case !e.isIndex && cur.T == TypeM:
		m := make(map[string]Value, len(cur.M)+1)
		for k, x := range cur.M {
			m[k] = x
		}
		if last {
			m[e.name] = v
		} else {
			child, ok := cur.M[e.name]
			if !ok {
				return Value{}, errInvalidPath
			}
			next, err := setIn(child, rest[1:], v)
			if err != nil {
				return Value{}, err
			}
			m[e.name] = next
		}
		return Value{T: TypeM, M: m}, nil
	case e.isIndex && cur.T == TypeL:
		l := slices.Clone(cur.L)
		if last {
			if e.index >= len(l) {
				l = append(l, v)
			} else {
				l[e.index] = v
			}
			return Value{T: TypeL, L: l}, nil
		}
		if e.index >= len(l) {
			return Value{}, errInvalidPath
		}
		next, err := setIn(l[e.index], rest[1:], v)
		if err != nil {
			return Value{}, err
		}
		l[e.index] = next
		return Value{T: TypeL, L: l}, nil
	}
	return Value{}, errInvalidPath
}

// removePath removes the value at p; a missing last element is no error.
func removePath(item Item, p docPath) error {
	if len(p) == 1 {
		delete(item, p[0].name)
		return nil
	}
	top, ok := item[p[0].name]
	if !ok {
		return nil
	}
	next, err := removeIn(top, p[1:])
	if err != nil {
		return err
	}
	item[p[0].name] = next
	return nil
}

func removeIn(cur Value, rest docPath) (Value, error) {
	e := rest[0]
	last := len(rest) == 1
	switch {
	case !e.isIndex && cur.T == TypeM:
		child, ok := cur.M[e.name]
		if !ok {
			return cur, nil
		}
		m := make(map[string]Value, len(cur.M))
		for k, x := range cur.M {
			m[k] = x
		}
		if last {
			delete(m, e.name)
		} else {
			next, err := removeIn(child, rest[1:])
			if err != nil {
				return Value{}, err
			}
			m[e.name] = next
		}
		return Value{T: TypeM, M: m}, nil
	case e.isIndex && cur.T == TypeL:
		if e.index >= len(cur.L) {
			return cur, nil
		}
		l := slices.Clone(cur.L)
		if last {
			l = slices.Delete(l, e.index, e.index+1)
		} else {
			next, err := removeIn(l[e.index], rest[1:])
			if err != nil {
				return Value{}, err
			}
			l[e.index] = next
		}
		return Value{T: TypeL, L: l}, nil
	}
	return Value{}, errInvalidPath
}
