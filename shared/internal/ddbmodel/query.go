package ddbmodel

import (
	"slices"
	"sort"
	"strings"
)

// QueryInput is DynamoDB's Query request.
type QueryInput struct {
	TableName              string
	IndexName              *string
	KeyConditionExpression *string
	FilterExpression       *string
	ProjectionExpression   *string
	Select                 string
	Limit                  *int
	ExclusiveStartKey      Item
	ScanIndexForward       *bool
	ConsistentRead         bool
	ReturnConsumedCapacity string
	Placeholders
	legacy
}

// ScanInput is DynamoDB's Scan request (without parallel segments).
type ScanInput struct {
	TableName              string
	IndexName              *string
	FilterExpression       *string
	ProjectionExpression   *string
	Select                 string
	Limit                  *int
	ExclusiveStartKey      Item
	ConsistentRead         bool
	ReturnConsumedCapacity string
	Segment, TotalSegments *int
	Placeholders
	legacy
}

// maxPage is how much data one Query or Scan reads: 1 MB.
const maxPage = 1 << 20

// source is what a Query or Scan reads: a table or one of its indexes.
type source struct {
	t     *table
	ix    *index
	key   keySchema // the source's own key
	order func(a, b *record) int
}

func (m *Model) source(tableName string, indexName *string, consistent bool) (source, error) {
	t, err := m.table(tableName)
	if err != nil {
		return source{}, err
	}
	s := source{t: t, key: t.key, order: t.tableOrder}
	if indexName != nil {
		i := slices.IndexFunc(t.indexes, func(ix *index) bool { return ix.name == *indexName })
		if i < 0 {
			return source{}, validation("The table does not have the specified index: %s", *indexName)
		}
		s.ix = t.indexes[i]
		s.key = s.ix.key
		s.order = t.indexOrder(s.ix)
		if consistent {
			return source{}, validation("Consistent reads are not supported on global secondary indexes")
		}
	}
	return s, nil
}

// view is an item as the source returns it.
func (s source) view(item Item) Item {
	if s.ix == nil {
		return item
	}
	return s.t.entry(s.ix, item)
}

// lastKey is the LastEvaluatedKey of an item: the table's key, and the
// index's for an index.
func (s source) lastKey(item Item) Item {
	k := keyOf(s.t.key, item)
	if s.ix != nil {
		for n, v := range keyOf(s.ix.key, item) {
			k[n] = v
		}
	}
	return k
}

// startRecord checks an ExclusiveStartKey and returns it as a probe
// record to position after.
func (s source) startRecord(start Item) (*record, error) {
	want := s.lastKey(start)
	bad := validation("The provided starting key is invalid: The provided key element does not match the schema")
	if len(start) != len(want) {
		return nil, bad
	}
	for _, attrs := range []keySchema{s.t.key, s.key} {
		for _, k := range []keyAttr{attrs.hash, attrs.rng} {
			if k.name == "" {
				continue
			}
			if v, ok := start[k.name]; !ok || v.T != k.t {
				return nil, bad
			}
		}
	}
	return &record{item: start}, nil
}

// selectSpec checks Select and the projection and returns the paths to
// project (nil for all) and whether only a count is wanted.
func (s source) selectSpec(sel string, paths []docPath) (count bool, err error) {
	switch sel {
	case "", "ALL_PROJECTED_ATTRIBUTES":
	case "COUNT":
		if paths != nil {
			return false, validation("Cannot specify the ProjectionExpression when choosing to get only the COUNT")
		}
		return true, nil
	case "ALL_ATTRIBUTES":
		if s.ix != nil && s.ix.projection != "ALL" {
			return false, validation("One or more parameter values were invalid: Select type ALL_ATTRIBUTES is not supported for global secondary index %s because its projection type is not ALL", s.ix.name)
		}
		if paths != nil {
			return false, validation("Cannot specify the ProjectionExpression when choosing to get ALL_ATTRIBUTES")
		}
	case "SPECIFIC_ATTRIBUTES":
		if paths == nil {
			return false, validation("Must specify the AttributesToGet or ProjectionExpression when choosing to get SPECIFIC_ATTRIBUTES")
		}
	default:
		return false, validation("1 validation error detected: Value '%s' at 'select' failed to satisfy constraint: Member must satisfy enum value set: [SPECIFIC_ATTRIBUTES, COUNT, ALL_ATTRIBUTES, ALL_PROJECTED_ATTRIBUTES]", sel)
	}
	return false, nil
}

// page reads records in order from recs (already positioned), filtering
// and projecting, up to limit records or 1 MB; it returns the answer.
// beyond, when set, tells whether the partition holds records past one
// (see below).
func (s source) page(recs []*record, limit int, beyond func(*record) bool, filter cond, paths []docPath, count, consistent bool, mode string) map[string]any {
	items := []Item{}
	scanned, size := 0, 0
	var last *record
	for _, r := range recs {
		if scanned == limit || size >= maxPage {
			break
		}
		v := s.view(r.item)
		scanned++
		if s.ix == nil || s.ix.projection == "ALL" {
			size += r.size // the view is the item
		} else {
			size += itemSize(v)
		}
		last = r
		if filter != nil && !eval(filter, v) {
			continue
		}
		items = append(items, pick(v, paths))
	}
	out := map[string]any{"Count": len(items), "ScannedCount": scanned}
	if !count {
		out["Items"] = items
	}
	// A page that stopped at its limit or at 1 MB has a last key, also
	// when nothing follows (as DynamoDB documents); as DynamoDB Local
	// answers, none when the last item read sits on the inclusive bound
	// of a range key condition at the end of the read.
	more := last != nil && last != recs[len(recs)-1]
	if last != nil && (scanned == limit && (more || beyond == nil || beyond(last)) || size >= maxPage && more) {
		out["LastEvaluatedKey"] = s.lastKey(last.item)
	}
	u := usage{table: s.t.name}
	units := 0.0 // a read of nothing costs nothing (as DynamoDB Local reports)
	if size > 0 {
		units = readUnits(size, consistent)
	}
	if s.ix != nil {
		u.indexes = map[string]float64{s.ix.name: units}
	} else {
		u.tableUnits = units
	}
	if c := u.wire(mode); c != nil {
		out["ConsumedCapacity"] = c
	}
	return out
}

// readExpressions parses a read's filter and projection.
func readExpressions(filter, proj *string, ph *placeholders) (cond, []docPath, error) {
	f, err := condition("FilterExpression", filter, ph)
	if err != nil {
		return nil, nil, err
	}
	paths, err := projection(proj, ph)
	if err != nil {
		return nil, nil, err
	}
	return f, paths, nil
}

func checkLimit(limit *int) (int, error) {
	if limit == nil {
		return -1, nil
	}
	if *limit < 1 {
		return 0, validation("1 validation error detected: Value '%d' at 'limit' failed to satisfy constraint: Member must have value greater than or equal to 1", *limit)
	}
	return *limit, nil
}

func (m *Model) query(in *QueryInput) (any, error) {
	if err := in.check(); err != nil {
		return nil, err
	}
	s, err := m.source(in.TableName, in.IndexName, in.ConsistentRead)
	if err != nil {
		return nil, err
	}
	if in.KeyConditionExpression == nil {
		return nil, validation("Either the KeyConditions or KeyConditionExpression parameter must be specified in the request.")
	}
	ph := newPlaceholders(in.ExpressionAttributeNames, in.ExpressionAttributeValues)
	kc, err := parseCondition("KeyConditionExpression", *in.KeyConditionExpression, ph)
	if err != nil {
		return nil, err
	}
	filter, paths, err := readExpressions(in.FilterExpression, in.ProjectionExpression, ph)
	if err != nil {
		return nil, err
	}
	if err := ph.checkUnused(true); err != nil {
		return nil, err
	}
	hash, rng, err := s.keyCondition(kc)
	if err != nil {
		return nil, err
	}
	if filter != nil {
		if err := s.filterAvoidsKeys(filter); err != nil {
			return nil, err
		}
	}
	if err := s.projects(filter, paths); err != nil {
		return nil, err
	}
	count, err := s.selectSpec(in.Select, paths)
	if err != nil {
		return nil, err
	}
	limit, err := checkLimit(in.Limit)
	if err != nil {
		return nil, err
	}
	parts := s.t.parts
	if s.ix != nil {
		parts = s.ix.parts
	}
	var recs []*record
	if p := parts[encode(hash)]; p != nil {
		recs = p.recs
	}
	if rng != nil {
		lo := sort.Search(len(recs), func(i int) bool { return !rng.below(recs[i].item[s.key.rng.name]) })
		hi := sort.Search(len(recs), func(i int) bool { return rng.above(recs[i].item[s.key.rng.name]) })
		recs = recs[lo:max(lo, hi)]
	}
	forward := in.ScanIndexForward == nil || *in.ScanIndexForward
	if in.ExclusiveStartKey != nil {
		probe, err := s.startRecord(in.ExclusiveStartKey)
		if err != nil {
			return nil, err
		}
		if v := probe.item[s.key.hash.name]; !v.equal(hash) {
			return nil, validation("The provided starting key is outside query boundaries based on provided conditions")
		}
		i, found := slices.BinarySearchFunc(recs, probe, s.order)
		if forward {
			if found {
				i++
			}
			recs = recs[i:]
		} else {
			recs = recs[:i]
		}
	}
	if !forward {
		recs = slices.Clone(recs)
		slices.Reverse(recs)
	}
	var beyond func(*record) bool
	if end, ok := rng.end(forward); ok {
		beyond = func(r *record) bool { return !r.item[s.key.rng.name].equal(end) }
	}
	return s.page(recs, limit, beyond, filter, paths, count, in.ConsistentRead, in.ReturnConsumedCapacity), nil
}

// rangeCond is a key condition on the range key.
type rangeCond struct {
	op    string // = < <= > >= BETWEEN begins_with
	v, hi Value
}

// end is the inclusive bound of <=, >= or BETWEEN that ends a read in
// the given direction, where DynamoDB Local leaves a page's last key out.
func (c *rangeCond) end(forward bool) (Value, bool) {
	switch {
	case c == nil:
	case forward && c.op == "<=", !forward && c.op == ">=", !forward && c.op == "BETWEEN":
		return c.v, true
	case forward && c.op == "BETWEEN":
		return c.hi, true
	}
	return Value{}, false
}

// below and above report that a range key value sorts before or after
// the values the condition accepts (which lie together in key order).
func (c *rangeCond) below(x Value) bool {
	r, _ := compare(x, c.v)
	switch c.op {
	case "=", ">=", "BETWEEN", "begins_with":
		return r < 0
	case ">":
		return r <= 0
	}
	return false
}

func (c *rangeCond) above(x Value) bool {
	r, _ := compare(x, c.v)
	switch c.op {
	case "=", "<=":
		return r > 0
	case "<":
		return r >= 0
	case "BETWEEN":
		h, _ := compare(x, c.hi)
		return h > 0
	case "begins_with":
		return r > 0 && !strings.HasPrefix(x.S, c.v.S)
	}
	return false
}

// keyCondition checks a key condition: the hash key equal to a value
// and at most one condition on the range key.
func (s source) keyCondition(c cond) (Value, *rangeCond, error) {
	var parts []cond
	var flatten func(c cond) error
	flatten = func(c cond) error {
		switch c := c.(type) {
		case andCond:
			if err := flatten(c.a); err != nil {
				return err
			}
			return flatten(c.b)
		case orCond, notCond, inCond:
			return validation("Invalid operator used in KeyConditionExpression: %s", opName(c))
		}
		parts = append(parts, c)
		return nil
	}
	if err := flatten(c); err != nil {
		return Value{}, nil, err
	}
	if len(parts) > 2 {
		return Value{}, nil, validation("Conditions can be of length 1 or 2 only")
	}
	var hash *Value
	var rng *rangeCond
	for _, p := range parts {
		name, rc, err := keyPart(p)
		if err != nil {
			return Value{}, nil, err
		}
		switch {
		case name == s.key.hash.name && hash == nil && rc.op == "=":
			if rc.v.T != s.key.hash.t {
				return Value{}, nil, validation("One or more parameter values were invalid: Condition parameter type does not match schema type")
			}
			hash = &rc.v
		case name == s.key.hash.name:
			return Value{}, nil, validation("Query key condition not supported")
		case name == s.key.rng.name && s.key.rng.name != "" && rng == nil:
			if rc.v.T != s.key.rng.t || rc.op == "BETWEEN" && rc.hi.T != s.key.rng.t {
				return Value{}, nil, validation("One or more parameter values were invalid: Condition parameter type does not match schema type")
			}
			if rc.op == "begins_with" && s.key.rng.t == TypeN {
				return Value{}, nil, validation("Invalid KeyConditionExpression: Incorrect operand type for operator or function; operator or function: begins_with, operand type: NUMBER")
			}
			rng = rc
		default:
			return Value{}, nil, validation("Query condition missed key schema element: %s", s.key.hash.name)
		}
	}
	if hash == nil {
		return Value{}, nil, validation("Query condition missed key schema element: %s", s.key.hash.name)
	}
	return *hash, rng, nil
}

func opName(c cond) string {
	switch c.(type) {
	case orCond:
		return "OR"
	case notCond:
		return "NOT"
	case inCond:
		return "IN"
	}
	return "?"
}

// keyPart reads one condition of a key condition: a top-level attribute
// compared with values.
func keyPart(c cond) (string, *rangeCond, error) {
	unsupported := validation("Query key condition not supported")
	attr := func(o operand) (string, bool) {
		p, ok := o.(pathOp)
		if !ok || len(p.path) != 1 {
			return "", false
		}
		return p.path[0].name, true
	}
	val := func(o operand) (Value, bool) {
		v, ok := o.(valueOp)
		return v.v, ok
	}
	switch c := c.(type) {
	case cmpCond:
		if c.op == "<>" {
			return "", nil, validation("Unsupported operator on KeyConditionExpression: operator: <>")
		}
		name, ok1 := attr(c.a)
		v, ok2 := val(c.b)
		if !ok1 || !ok2 {
			return "", nil, unsupported
		}
		return name, &rangeCond{op: c.op, v: v}, nil
	case betweenCond:
		name, ok1 := attr(c.a)
		lo, ok2 := val(c.lo)
		hi, ok3 := val(c.hi)
		if !ok1 || !ok2 || !ok3 {
			return "", nil, unsupported
		}
		return name, &rangeCond{op: "BETWEEN", v: lo, hi: hi}, nil
	case funcCond:
		if c.name != "begins_with" {
			return "", nil, validation("Invalid operator used in KeyConditionExpression: %s", c.name)
		}
		name, ok1 := attr(c.args[0])
		v, ok2 := val(c.args[1])
		if !ok1 || !ok2 {
			return "", nil, unsupported
		}
		return name, &rangeCond{op: "begins_with", v: v}, nil
	}
	return "", nil, unsupported
}

// filterAvoidsKeys refuses a filter on the source's key attributes.
func (s source) filterAvoidsKeys(c cond) error {
	var err error
	walkPaths(c, func(p docPath) {
		if err == nil && slices.Contains(s.key.names(), p[0].name) {
			err = validation("Filter Expression can only contain non-primary key attributes: Primary key attribute: %s", p[0].name)
		}
	})
	return err
}

// projects refuses a filter or a projection naming attributes that the
// index does not project.
func (s source) projects(filter cond, paths []docPath) error {
	if s.ix == nil || s.ix.projection == "ALL" {
		return nil
	}
	have := append(append(s.t.key.names(), s.ix.key.names()...), s.ix.nonKey...)
	missing := func(p docPath) bool { return !slices.Contains(have, p[0].name) }
	var bad []string
	walkPaths(filter, func(p docPath) {
		if missing(p) && !slices.Contains(bad, p[0].name) {
			bad = append(bad, p[0].name)
		}
	})
	if len(bad) > 0 {
		return validation("One or more parameter values were invalid: Secondary index %s does not project one or more filter attributes: [%s]", s.ix.name, strings.Join(bad, ", "))
	}
	for _, p := range paths {
		if missing(p) {
			bad = append(bad, p[0].name)
		}
	}
	if len(bad) > 0 {
		return validation("One or more parameter values were invalid: Global secondary index %s does not project [%s]", s.ix.name, strings.Join(bad, ", "))
	}
	return nil
}

// walkPaths calls f with every document path of a condition.
func walkPaths(c cond, f func(docPath)) {
	ops := func(os ...operand) {
		for _, o := range os {
			switch o := o.(type) {
			case pathOp:
				f(o.path)
			case sizeOp:
				f(o.path)
			}
		}
	}
	switch c := c.(type) {
	case andCond:
		walkPaths(c.a, f)
		walkPaths(c.b, f)
	case orCond:
		walkPaths(c.a, f)
		walkPaths(c.b, f)
	case notCond:
		walkPaths(c.a, f)
	case cmpCond:
		ops(c.a, c.b)
	case betweenCond:
		ops(c.a, c.lo, c.hi)
	case inCond:
		ops(append([]operand{c.a}, c.list...)...)
	case funcCond:
		ops(c.args...)
	}
}

func (m *Model) scan(in *ScanInput) (any, error) {
	if err := in.check(); err != nil {
		return nil, err
	}
	if in.Segment != nil || in.TotalSegments != nil {
		return nil, validation("The model does not support parallel scans (Segment, TotalSegments)")
	}
	s, err := m.source(in.TableName, in.IndexName, in.ConsistentRead)
	if err != nil {
		return nil, err
	}
	ph := newPlaceholders(in.ExpressionAttributeNames, in.ExpressionAttributeValues)
	filter, paths, err := readExpressions(in.FilterExpression, in.ProjectionExpression, ph)
	if err != nil {
		return nil, err
	}
	if err := ph.checkUnused(in.FilterExpression != nil || in.ProjectionExpression != nil); err != nil {
		return nil, err
	}
	if err := s.projects(filter, paths); err != nil {
		return nil, err
	}
	count, err := s.selectSpec(in.Select, paths)
	if err != nil {
		return nil, err
	}
	limit, err := checkLimit(in.Limit)
	if err != nil {
		return nil, err
	}
	var recs []*record
	if s.ix != nil {
		recs = s.ix.allRecords()
	} else {
		recs = s.t.allRecords()
	}
	if in.ExclusiveStartKey != nil {
		probe, err := s.startRecord(in.ExclusiveStartKey)
		if err != nil {
			return nil, err
		}
		// Scan order: partitions by encoded hash key, then the source's
		// order within one.
		ph := encode(probe.item[s.key.hash.name])
		i := sort.Search(len(recs), func(i int) bool {
			rh := encode(recs[i].item[s.key.hash.name])
			if rh != ph {
				return rh > ph
			}
			return s.order(recs[i], probe) > 0
		})
		recs = recs[i:]
	}
	return s.page(recs, limit, nil, filter, paths, count, in.ConsistentRead, in.ReturnConsumedCapacity), nil
}
