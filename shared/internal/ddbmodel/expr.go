package ddbmodel

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The expression grammar of DynamoDB: conditions (ConditionExpression,
// FilterExpression, KeyConditionExpression), update expressions and
// projection expressions, over document paths with #name and :value
// placeholders.

// token is one lexical token of an expression.
type token struct {
	kind tokKind
	text string
	pos  int
}

type tokKind int

const (
	tokEOF tokKind = iota
	tokIdent
	tokName  // #name
	tokValue // :value
	tokInt   // a list index
	tokPunct
)

// lex splits an expression into tokens.
func lex(s string) ([]token, error) {
	var toks []token
	isWord := func(c byte) bool {
		return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
	}
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#' || c == ':':
			j := i + 1
			for j < len(s) && isWord(s[j]) {
				j++
			}
			if j == i+1 {
				return nil, fmt.Errorf("Syntax error; token: %q, near: %q", string(c), near(s, i))
			}
			kind := tokName
			if c == ':' {
				kind = tokValue
			}
			toks = append(toks, token{kind, s[i:j], i})
			i = j
		case c >= '0' && c <= '9':
			j := i
			for j < len(s) && s[j] >= '0' && s[j] <= '9' {
				j++
			}
			toks = append(toks, token{tokInt, s[i:j], i})
			i = j
		case isWord(c):
			j := i
			for j < len(s) && isWord(s[j]) {
				j++
			}
			toks = append(toks, token{tokIdent, s[i:j], i})
			i = j
		case strings.HasPrefix(s[i:], "<>") || strings.HasPrefix(s[i:], "<=") || strings.HasPrefix(s[i:], ">="):
			toks = append(toks, token{tokPunct, s[i : i+2], i})
			i += 2
		case strings.ContainsRune("=<>()[],.+-", rune(c)):
			toks = append(toks, token{tokPunct, s[i : i+1], i})
			i++
		default:
			return nil, fmt.Errorf("Invalid character encountered; character: %q", string(c))
		}
	}
	return append(toks, token{kind: tokEOF, pos: len(s)}), nil
}

func near(s string, i int) string {
	return s[max(0, i-5):min(len(s), i+10)]
}

// pathElem is one step of a document path: a map member or a list index.
type pathElem struct {
	name    string
	index   int
	isIndex bool
}

// docPath is a document path.
type docPath []pathElem

func (p docPath) String() string {
	parts := make([]string, len(p))
	for i, e := range p {
		if e.isIndex {
			parts[i] = "[" + strconv.Itoa(e.index) + "]"
		} else {
			parts[i] = e.name
		}
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// operand is a value in an expression.
type operand interface{ isOperand() }

type (
	pathOp  struct{ path docPath }
	valueOp struct {
		name string
		v    Value
	}
	sizeOp struct{ path docPath }
	// ifNotExistsOp, listAppendOp and arithOp appear in SET actions only.
	ifNotExistsOp struct {
		path docPath
		def  operand
	}
	listAppendOp struct{ a, b operand }
	arithOp      struct {
		sub  bool
		a, b operand
	}
)

func (pathOp) isOperand()        {}
func (valueOp) isOperand()       {}
func (sizeOp) isOperand()        {}
func (ifNotExistsOp) isOperand() {}
func (listAppendOp) isOperand()  {}
func (arithOp) isOperand()       {}

// cond is a condition.
type cond interface{ isCond() }

type (
	cmpCond struct {
		op   string
		a, b operand
	}
	betweenCond struct{ a, lo, hi operand }
	inCond      struct {
		a    operand
		list []operand
	}
	funcCond struct {
		name string
		args []operand
	}
	andCond struct{ a, b cond }
	orCond  struct{ a, b cond }
	notCond struct{ a cond }
)

func (cmpCond) isCond()     {}
func (betweenCond) isCond() {}
func (inCond) isCond()      {}
func (funcCond) isCond()    {}
func (andCond) isCond()     {}
func (orCond) isCond()      {}
func (notCond) isCond()     {}

// placeholders are a request's ExpressionAttributeNames and
// ExpressionAttributeValues, with what the expressions used of them.
type placeholders struct {
	names      map[string]string
	values     map[string]Value
	usedNames  map[string]bool
	usedValues map[string]bool
}

func newPlaceholders(names map[string]string, values map[string]Value) *placeholders {
	return &placeholders{names: names, values: values, usedNames: map[string]bool{}, usedValues: map[string]bool{}}
}

// checkUnused fails when a placeholder was defined but not used, or when
// placeholders were given with no expression to use them.
func (ph *placeholders) checkUnused(anyExpression bool) error {
	if !anyExpression && len(ph.names) > 0 {
		return validation("ExpressionAttributeNames can only be specified when using expressions")
	}
	if !anyExpression && len(ph.values) > 0 {
		return validation("ExpressionAttributeValues can only be specified when using expressions")
	}
	var unusedN, unusedV []string
	for _, k := range sortedNames(ph.names) {
		if !ph.usedNames[k] {
			unusedN = append(unusedN, k)
		}
	}
	for _, k := range sortedNames(ph.values) {
		if !ph.usedValues[k] {
			unusedV = append(unusedV, k)
		}
	}
	if len(unusedN) > 0 {
		return validation("Value provided in ExpressionAttributeNames unused in expressions: keys: {%s}", strings.Join(unusedN, ", "))
	}
	if len(unusedV) > 0 {
		return validation("Value provided in ExpressionAttributeValues unused in expressions: keys: {%s}", strings.Join(unusedV, ", "))
	}
	return nil
}

// parser parses one expression.
type parser struct {
	kind string // "ConditionExpression", ... for messages
	src  string
	toks []token
	pos  int
	ph   *placeholders
}

// exprError is a parse or static error of an expression.
type exprError struct{ msg string }

func (e *exprError) Error() string { return e.msg }

func newParser(kind, src string, ph *placeholders) (*parser, error) {
	if strings.TrimSpace(src) == "" {
		return nil, validation("Invalid %s: The expression can not be empty;", kind)
	}
	toks, err := lex(src)
	if err != nil {
		return nil, validation("Invalid %s: %s", kind, err.Error())
	}
	return &parser{kind: kind, src: src, toks: toks, ph: ph}, nil
}

func (p *parser) peek() token { return p.toks[p.pos] }

func (p *parser) next() token {
	t := p.toks[p.pos]
	if t.kind != tokEOF {
		p.pos++
	}
	return t
}

// fail panics with an exprError; parse functions recover it.
func (p *parser) fail(format string, args ...any) {
	panic(&exprError{fmt.Sprintf("Invalid %s: ", p.kind) + fmt.Sprintf(format, args...)})
}

func (p *parser) syntax(t token) {
	text := t.text
	if t.kind == tokEOF {
		text = "<EOF>"
	}
	p.fail("Syntax error; token: %q, near: %q", text, near(p.src, t.pos))
}

func (p *parser) isKeyword(t token, kw string) bool {
	return t.kind == tokIdent && strings.EqualFold(t.text, kw)
}

func (p *parser) expectPunct(s string) {
	if t := p.next(); t.kind != tokPunct || t.text != s {
		p.syntax(t)
	}
}

func (p *parser) atPunct(s string) bool {
	t := p.peek()
	return t.kind == tokPunct && t.text == s
}

// run calls f, turning its panic into a ValidationException.
func (p *parser) run(f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			e, ok := r.(*exprError)
			if !ok {
				panic(r)
			}
			err = validation("%s", e.msg)
		}
	}()
	f()
	if t := p.peek(); t.kind != tokEOF {
		p.syntax(t)
	}
	return nil
}

// reserved keywords that cannot stand as bare attribute names in the
// grammar itself.
var grammarWords = []string{"AND", "OR", "NOT", "BETWEEN", "IN", "SET", "REMOVE", "ADD", "DELETE"}

// path parses a document path.
func (p *parser) path() docPath {
	var out docPath
	out = append(out, pathElem{name: p.pathName()})
	for {
		switch {
		case p.atPunct("."):
			p.next()
			out = append(out, pathElem{name: p.pathName()})
		case p.atPunct("["):
			p.next()
			t := p.next()
			if t.kind != tokInt {
				p.syntax(t)
			}
			i, err := strconv.Atoi(t.text)
			if err != nil {
				p.syntax(t)
			}
			p.expectPunct("]")
			out = append(out, pathElem{index: i, isIndex: true})
		default:
			return out
		}
	}
}

func (p *parser) pathName() string {
	t := p.next()
	switch t.kind {
	case tokName:
		name, ok := p.ph.names[t.text]
		if !ok {
			p.fail("An expression attribute name used in the document path is not defined; attribute name: %s", t.text)
		}
		p.ph.usedNames[t.text] = true
		return name
	case tokIdent:
		if slices.ContainsFunc(grammarWords, func(w string) bool { return strings.EqualFold(w, t.text) }) {
			p.syntax(t)
		}
		if t.text[0] >= '0' && t.text[0] <= '9' {
			p.syntax(t)
		}
		return t.text
	}
	p.syntax(t)
	return ""
}

func (p *parser) value(t token) valueOp {
	v, ok := p.ph.values[t.text]
	if !ok {
		p.fail("An expression attribute value used in expression is not defined; attribute value: %s", t.text)
	}
	p.ph.usedValues[t.text] = true
	return valueOp{name: t.text, v: v}
}

// --- conditions ---

// parseCondition parses a condition expression.
func parseCondition(kind, src string, ph *placeholders) (cond, error) {
	p, err := newParser(kind, src, ph)
	if err != nil {
		return nil, err
	}
	var c cond
	if err := p.run(func() { c = p.or() }); err != nil {
		return nil, err
	}
	return c, nil
}

func (p *parser) or() cond {
	c := p.and()
	for p.isKeyword(p.peek(), "OR") {
		p.next()
		c = orCond{c, p.and()}
	}
	return c
}

func (p *parser) and() cond {
	c := p.not()
	for p.isKeyword(p.peek(), "AND") {
		p.next()
		c = andCond{c, p.not()}
	}
	return c
}

func (p *parser) not() cond {
	if p.isKeyword(p.peek(), "NOT") {
		p.next()
		return notCond{p.not()}
	}
	return p.primary()
}

// condFuncs are the functions that are conditions; size is an operand.
var condFuncs = map[string]int{"attribute_exists": 1, "attribute_not_exists": 1, "attribute_type": 2, "begins_with": 2, "contains": 2}

func (p *parser) primary() cond {
	if p.atPunct("(") {
		p.next()
		c := p.or()
		p.expectPunct(")")
		return c
	}
	t := p.peek()
	if t.kind == tokIdent && p.toks[p.pos+1].kind == tokPunct && p.toks[p.pos+1].text == "(" {
		if n, ok := condFuncs[t.text]; ok {
			p.next()
			return p.condFunc(t, n)
		}
	}
	a := p.operand()
	t = p.next()
	switch {
	case t.kind == tokPunct && slices.Contains([]string{"=", "<>", "<", "<=", ">", ">="}, t.text):
		b := p.operand()
		p.distinct(t.text, a, b)
		if t.text != "=" && t.text != "<>" {
			p.orderable(t.text, a, b)
		}
		return cmpCond{t.text, a, b}
	case p.isKeyword(t, "BETWEEN"):
		lo := p.operand()
		if !p.isKeyword(p.next(), "AND") {
			p.syntax(p.toks[p.pos-1])
		}
		hi := p.operand()
		p.orderable("BETWEEN", a, lo, hi)
		if l, ok := lo.(valueOp); ok {
			if h, ok := hi.(valueOp); ok {
				if c, ok := compare(l.v, h.v); ok && c > 0 {
					p.fail("The BETWEEN operator requires upper bound to be greater than or equal to lower bound; lower bound operand: AttributeValue: {%s:%s}, upper bound operand: AttributeValue: {%s:%s}", l.v.T, l.v.S, h.v.T, h.v.S)
				}
			}
		}
		return betweenCond{a, lo, hi}
	case p.isKeyword(t, "IN"):
		p.expectPunct("(")
		list := []operand{p.operand()}
		for p.atPunct(",") {
			p.next()
			list = append(list, p.operand())
		}
		p.expectPunct(")")
		if len(list) > 100 {
			p.fail("The IN operator is provided with too many operands; number of operands: %d", len(list))
		}
		return inCond{a, list}
	}
	p.syntax(t)
	return nil
}

// distinct refuses a comparison of an operand with itself, as DynamoDB does.
func (p *parser) distinct(op string, a, b operand) {
	same := false
	switch x := a.(type) {
	case pathOp:
		y, ok := b.(pathOp)
		same = ok && slices.Equal(x.path, y.path)
	case valueOp:
		y, ok := b.(valueOp)
		same = ok && x.name == y.name
	}
	if same {
		p.fail("The first operand must be distinct from the remaining operands for this operator or function; operator: %s, first operand: %s", op, describe(a))
	}
}

func describe(o operand) string {
	switch o := o.(type) {
	case pathOp:
		return o.path.String()
	case valueOp:
		return o.name
	}
	return "size"
}

// orderable refuses a literal that no ordering applies to.
func (p *parser) orderable(op string, ops ...operand) {
	for _, o := range ops {
		if v, ok := o.(valueOp); ok && v.v.T != TypeN && v.v.T != TypeS && v.v.T != TypeB {
			p.fail("Incorrect operand type for operator or function; operator or function: %s, operand type: %s", op, typeWord(v.v.T))
		}
	}
}

// typeWord names a type as DynamoDB's messages do.
func typeWord(t Type) string {
	switch t {
	case TypeS:
		return "STRING"
	case TypeN:
		return "NUMBER"
	case TypeB:
		return "BINARY"
	case TypeM:
		return "MAP"
	case TypeL:
		return "LIST"
	case TypeSS:
		return "STRING_SET"
	case TypeNS:
		return "NUMBER_SET"
	case TypeBS:
		return "BINARY_SET"
	}
	return string(t)
}

func (p *parser) condFunc(name token, n int) cond {
	p.expectPunct("(")
	var args []operand
	for {
		args = append(args, p.operand())
		if !p.atPunct(",") {
			break
		}
		p.next()
	}
	p.expectPunct(")")
	if len(args) != n {
		p.fail("Incorrect number of operands for operator or function; operator or function: %s, number of operands: %d", name.text, len(args))
	}
	if _, ok := args[0].(pathOp); !ok {
		p.fail("Operator or function requires a document path; operator or function: %s", name.text)
	}
	switch name.text {
	case "attribute_type":
		v, ok := args[1].(valueOp)
		if !ok || v.v.T != TypeS || !slices.Contains([]Type{TypeS, TypeN, TypeB, TypeBOOL, TypeNULL, TypeSS, TypeNS, TypeBS, TypeM, TypeL}, Type(v.v.S)) {
			p.fail("Invalid attribute type name found; type: %s, valid types: { B,NULL,SS,BOOL,L,BS,N,NS,S,M }", describe(args[1]))
		}
	case "begins_with":
		if v, ok := args[1].(valueOp); ok && v.v.T != TypeS && v.v.T != TypeB {
			p.fail("Incorrect operand type for operator or function; operator or function: begins_with, operand type: %s", typeWord(v.v.T))
		}
	}
	return funcCond{name.text, args}
}

// operand parses a condition operand: a path, a :value or size(path).
func (p *parser) operand() operand {
	t := p.peek()
	switch {
	case t.kind == tokValue:
		p.next()
		return p.value(t)
	case t.kind == tokIdent && p.toks[p.pos+1].kind == tokPunct && p.toks[p.pos+1].text == "(":
		if t.text != "size" {
			if _, ok := condFuncs[t.text]; ok {
				p.fail("The function is not allowed to be used this way in an expression; function: %s", t.text)
			}
			p.fail("Invalid function name; function: %s", t.text)
		}
		p.next()
		p.expectPunct("(")
		if p.peek().kind == tokValue {
			p.fail("Incorrect operand type for operator or function; operator or function: size, operand type: %s", typeWord(p.value(p.peek()).v.T))
		}
		path := p.path()
		p.expectPunct(")")
		return sizeOp{path}
	case t.kind == tokIdent || t.kind == tokName:
		return pathOp{p.path()}
	}
	p.syntax(t)
	return nil
}

// --- update expressions ---

// update is a parsed update expression.
type update struct {
	sets    []setAction
	removes []docPath
	adds    []valueAction
	deletes []valueAction
}

type setAction struct {
	path docPath
	v    operand
}

type valueAction struct {
	path docPath
	v    Value
}

// paths are every path the update writes, in order.
func (u *update) paths() []docPath {
	var out []docPath
	for _, s := range u.sets {
		out = append(out, s.path)
	}
	out = append(out, u.removes...)
	for _, a := range u.adds {
		out = append(out, a.path)
	}
	for _, d := range u.deletes {
		out = append(out, d.path)
	}
	return out
}

// parseUpdate parses an update expression.
func parseUpdate(src string, ph *placeholders) (*update, error) {
	p, err := newParser("UpdateExpression", src, ph)
	if err != nil {
		return nil, err
	}
	u := &update{}
	err = p.run(func() {
		seen := map[string]bool{}
		for p.peek().kind != tokEOF {
			t := p.next()
			kw := strings.ToUpper(t.text)
			if t.kind != tokIdent || !slices.Contains([]string{"SET", "REMOVE", "ADD", "DELETE"}, kw) {
				p.syntax(t)
			}
			if seen[kw] {
				p.fail("The %q section can only be used once in an update expression;", kw)
			}
			seen[kw] = true
			for {
				switch kw {
				case "SET":
					path := p.path()
					p.expectPunct("=")
					u.sets = append(u.sets, setAction{path, p.setValue()})
				case "REMOVE":
					u.removes = append(u.removes, p.path())
				case "ADD", "DELETE":
					path := p.path()
					vt := p.next()
					if vt.kind != tokValue {
						p.syntax(vt)
					}
					v := p.value(vt).v
					if kw == "ADD" {
						if v.T != TypeN && !v.T.isSet() {
							p.fail("Incorrect operand type for operator or function; operator: ADD, operand type: %s", typeWord(v.T))
						}
						u.adds = append(u.adds, valueAction{path, v})
					} else {
						if !v.T.isSet() {
							p.fail("Incorrect operand type for operator or function; operator: DELETE, operand type: %s", typeWord(v.T))
						}
						u.deletes = append(u.deletes, valueAction{path, v})
					}
				}
				if !p.atPunct(",") {
					break
				}
				p.next()
			}
		}
		if err := checkOverlap(u.paths()); err != "" {
			p.fail("%s", err)
		}
	})
	if err != nil {
		return nil, err
	}
	return u, nil
}

// checkOverlap reports two paths of which one is, or lies inside, the
// other, or that use one value both as a map and as a list.
func checkOverlap(paths []docPath) string {
	for i, a := range paths {
		for _, b := range paths[i+1:] {
			n := min(len(a), len(b))
			d := 0
			for d < n && a[d] == b[d] {
				d++
			}
			switch {
			case d < n && a[d].isIndex != b[d].isIndex:
				return fmt.Sprintf("Two document paths conflict with each other; must remove or rewrite one of these paths; path one: %s, path two: %s", a, b)
			case d < n:
				continue
			case len(a) == len(b):
				return fmt.Sprintf("Two document paths conflict with each other; must remove or rewrite one of these paths; path one: %s, path two: %s", a, b)
			}
			return fmt.Sprintf("Two document paths overlap with each other; must remove or rewrite one of these paths; path one: %s, path two: %s", a, b)
		}
	}
	return ""
}

// setValue parses the right side of a SET action: an operand, or two
// joined by + or -.
func (p *parser) setValue() operand {
	a := p.setOperand()
	if p.atPunct("+") || p.atPunct("-") {
		sub := p.next().text == "-"
		return arithOp{sub, a, p.setOperand()}
	}
	return a
}

func (p *parser) setOperand() operand {
	t := p.peek()
	switch {
	case t.kind == tokValue:
		p.next()
		return p.value(t)
	case t.kind == tokIdent && p.toks[p.pos+1].kind == tokPunct && p.toks[p.pos+1].text == "(":
		p.next()
		p.expectPunct("(")
		var out operand
		switch t.text {
		case "if_not_exists":
			path := p.path()
			p.expectPunct(",")
			out = ifNotExistsOp{path, p.setOperand()}
		case "list_append":
			a := p.setOperand()
			p.expectPunct(",")
			out = listAppendOp{a, p.setOperand()}
		default:
			p.fail("Invalid function name; function: %s", t.text)
		}
		p.expectPunct(")")
		return out
	case t.kind == tokIdent || t.kind == tokName:
		return pathOp{p.path()}
	}
	p.syntax(t)
	return nil
}

// --- projections ---

// parseProjection parses a projection expression.
func parseProjection(src string, ph *placeholders) ([]docPath, error) {
	p, err := newParser("ProjectionExpression", src, ph)
	if err != nil {
		return nil, err
	}
	var paths []docPath
	err = p.run(func() {
		paths = append(paths, p.path())
		for p.atPunct(",") {
			p.next()
			paths = append(paths, p.path())
		}
		if err := checkOverlap(paths); err != "" {
			p.fail("%s", err)
		}
	})
	return paths, err
}
