package ddbmodel

import (
	"encoding/json"
	"math"
	"slices"
)

// Placeholders are the expression attribute names and values a request
// carries.
type Placeholders struct {
	ExpressionAttributeNames  map[string]string
	ExpressionAttributeValues map[string]Value
}

// legacy holds the pre-expression parameters, which the model refuses.
type legacy struct {
	Expected, AttributeUpdates, KeyConditions, QueryFilter, ScanFilter, AttributesToGet, ConditionalOperator json.RawMessage
}

func (l legacy) check() error {
	for _, p := range [...]struct {
		name string
		v    json.RawMessage
	}{
		{"Expected", l.Expected}, {"AttributeUpdates", l.AttributeUpdates}, {"KeyConditions", l.KeyConditions},
		{"QueryFilter", l.QueryFilter}, {"ScanFilter", l.ScanFilter}, {"AttributesToGet", l.AttributesToGet},
		{"ConditionalOperator", l.ConditionalOperator},
	} {
		if len(p.v) > 0 && string(p.v) != "null" {
			return validation("The model does not support the legacy parameter %s: use expressions", p.name)
		}
	}
	return nil
}

// PutItemInput is DynamoDB's PutItem request.
type PutItemInput struct {
	TableName                           string
	Item                                Item
	ConditionExpression                 *string
	ReturnValues                        string
	ReturnValuesOnConditionCheckFailure string
	ReturnConsumedCapacity              string
	ReturnItemCollectionMetrics         string
	Placeholders
	legacy
}

// GetItemInput is DynamoDB's GetItem request.
type GetItemInput struct {
	TableName              string
	Key                    Item
	ConsistentRead         bool
	ProjectionExpression   *string
	ReturnConsumedCapacity string
	Placeholders
	legacy
}

// UpdateItemInput is DynamoDB's UpdateItem request.
type UpdateItemInput struct {
	TableName                           string
	Key                                 Item
	UpdateExpression                    *string
	ConditionExpression                 *string
	ReturnValues                        string
	ReturnValuesOnConditionCheckFailure string
	ReturnConsumedCapacity              string
	ReturnItemCollectionMetrics         string
	Placeholders
	legacy
}

// DeleteItemInput is DynamoDB's DeleteItem request.
type DeleteItemInput struct {
	TableName                           string
	Key                                 Item
	ConditionExpression                 *string
	ReturnValues                        string
	ReturnValuesOnConditionCheckFailure string
	ReturnConsumedCapacity              string
	ReturnItemCollectionMetrics         string
	Placeholders
	legacy
}

func (m *Model) table(name string) (*table, error) {
	t := m.tables[name]
	if t == nil {
		return nil, tableNotFound()
	}
	return t, nil
}

// checkKeyValue validates one key attribute's value.
func checkKeyValue(k keyAttr, v Value, ok bool, what string) error {
	if !ok {
		return validation("One or more parameter values were invalid: Missing the key %s in the item", k.name)
	}
	if v.T != k.t {
		return validation("One or more parameter values were invalid: Type mismatch for key %s expected: %s actual: %s", k.name, k.t, v.T)
	}
	if v.S == "" && (v.T == TypeS || v.T == TypeB) {
		return validation("One or more parameter values are not valid. The AttributeValue for a key attribute cannot contain an empty %s value. Key: %s", what, k.name)
	}
	return nil
}

func emptyWord(t Type) string {
	if t == TypeB {
		return "binary"
	}
	return "string"
}

// checkItem validates an item to be stored: its key, its index keys and
// its size.
func (t *table) checkItem(item Item, sizeMessage string) error {
	for _, k := range []keyAttr{t.key.hash, t.key.rng} {
		if k.name == "" {
			continue
		}
		v, ok := item[k.name]
		if err := checkKeyValue(k, v, ok, emptyWord(k.t)); err != nil {
			return err
		}
	}
	for _, ix := range t.indexes {
		for _, k := range []keyAttr{ix.key.hash, ix.key.rng} {
			v, ok := item[k.name]
			if k.name == "" || !ok {
				continue
			}
			if v.T != k.t {
				return validation("One or more parameter values were invalid: Type mismatch for Index Key %s Expected: %s Actual: %s IndexName: %s", k.name, k.t, v.T, ix.name)
			}
			if v.S == "" && (v.T == TypeS || v.T == TypeB) {
				return validation("One or more parameter values are not valid. A value specified for a secondary index key is not supported. The AttributeValue for a key attribute cannot contain an empty %s value. IndexName: %s, IndexKey: %s", emptyWord(v.T), ix.name, k.name)
			}
		}
	}
	if itemSize(item) > MaxItemSize {
		return validation("%s", sizeMessage)
	}
	return nil
}

// checkKey validates a request's Key: exactly the key attributes.
func (t *table) checkKey(key Item) error {
	names := t.key.names()
	if len(key) != len(names) {
		return validation("The provided key element does not match the schema")
	}
	for i, name := range names {
		k := t.key.hash
		if i == 1 {
			k = t.key.rng
		}
		v, ok := key[name]
		if !ok || v.T != k.t {
			return validation("The provided key element does not match the schema")
		}
		if err := checkKeyValue(k, v, true, emptyWord(k.t)); err != nil {
			return err
		}
	}
	return nil
}

func (t *table) get(key Item) Item {
	if r := t.items[t.primaryKey(key)]; r != nil {
		return r.item
	}
	return nil
}

// record returns the record with the key's item (nil when none).
func (t *table) record(key Item) *record {
	return t.items[t.primaryKey(key)]
}

// --- capacity ---

// usage is the capacity a request consumed on one table.
type usage struct {
	table      string
	tableUnits float64
	indexes    map[string]float64
}

func writeUnits(size int) float64 { return max(1, math.Ceil(float64(size)/1024)) }

func readUnits(size int, consistent bool) float64 {
	u := max(1, math.Ceil(float64(size)/4096))
	if !consistent {
		u /= 2
	}
	return u
}

// add merges another use of the same table.
func (u *usage) add(o usage) {
	u.tableUnits += o.tableUnits
	for k, v := range o.indexes {
		if u.indexes == nil {
			u.indexes = map[string]float64{}
		}
		u.indexes[k] += v
	}
}

// capacity is DynamoDB's ConsumedCapacity.
type capacity struct {
	CapacityUnits float64
}

type consumedCapacity struct {
	TableName              string
	CapacityUnits          float64
	Table                  *capacity           `json:",omitempty"`
	GlobalSecondaryIndexes map[string]capacity `json:",omitempty"`
}

// wire is the ConsumedCapacity answered for mode (nil for NONE).
func (u usage) wire(mode string) *consumedCapacity {
	if mode != "TOTAL" && mode != "INDEXES" {
		return nil
	}
	c := &consumedCapacity{TableName: u.table, CapacityUnits: u.tableUnits}
	for _, v := range u.indexes {
		c.CapacityUnits += v
	}
	if mode == "INDEXES" {
		c.Table = &capacity{u.tableUnits}
		if len(u.indexes) > 0 {
			c.GlobalSecondaryIndexes = map[string]capacity{}
			for k, v := range u.indexes {
				c.GlobalSecondaryIndexes[k] = capacity{v}
			}
		}
	}
	return c
}

// writeCost is what replacing old by new (either nil) costs: the table
// by the larger item, each index by the entries it writes: a put or a
// delete for an item entering or leaving it, a delete and a put for an
// index key change, one write for a changed projection, nothing when the
// entry stays as it was.
//
// One more charge follows DynamoDB Local, which qasync's cost tests
// count: an item in the index neither before nor after, that had some of
// the index's key attributes before and after but not the same ones
// (the hash key before, the range key after), costs the index one write
// (AWS documents no charge for it).
func (t *table) writeCost(old, new Item) usage {
	u := usage{table: t.name, tableUnits: writeUnits(max(itemSize(old), itemSize(new)))}
	for _, ix := range t.indexes {
		oldIn, newIn := old != nil && ix.holds(old), new != nil && ix.holds(new)
		var units float64
		switch {
		case oldIn && newIn:
			before, after := t.entry(ix, old), t.entry(ix, new)
			switch {
			case !itemsEqual(indexKey(ix, old), indexKey(ix, new)):
				units = writeUnits(itemSize(before)) + writeUnits(itemSize(after))
			case !itemsEqual(before, after):
				units = writeUnits(max(itemSize(before), itemSize(after)))
			}
		case oldIn:
			units = writeUnits(itemSize(t.entry(ix, old)))
		case newIn:
			units = writeUnits(itemSize(t.entry(ix, new)))
		default:
			before, after := indexKey(ix, old), indexKey(ix, new)
			if len(before) > 0 && len(after) > 0 && !slices.Equal(sortedNames(before), sortedNames(after)) {
				units = writeUnits(itemSize(t.entry(ix, new)))
			}
		}
		if units > 0 {
			if u.indexes == nil {
				u.indexes = map[string]float64{}
			}
			u.indexes[ix.name] = units
		}
	}
	return u
}

// indexKey is the index key attributes an item has.
func indexKey(ix *index, item Item) Item {
	out := Item{}
	for _, n := range ix.key.names() {
		if v, ok := item[n]; ok {
			out[n] = v
		}
	}
	return out
}

// --- conditions ---

// condition parses a request's optional condition.
func condition(kind string, expr *string, ph *placeholders) (cond, error) {
	if expr == nil {
		return nil, nil
	}
	return parseCondition(kind, *expr, ph)
}

// checkCondition evaluates a write's condition against the item as it
// is.
func checkCondition(c cond, old Item, onFailure string) error {
	if c != nil && !eval(c, old) {
		return conditionFailed(old, onFailure == "ALL_OLD")
	}
	return nil
}

func checkReturnValues(rv string, allowed ...string) error {
	if rv == "" || slices.Contains(allowed, rv) {
		return nil
	}
	return validation("ReturnValues can only be %v", allowed)
}

// writeOutput is the answer of a single-item write.
func writeOutput(attrs Item, u usage, mode string) map[string]any {
	out := map[string]any{}
	if len(attrs) > 0 {
		out["Attributes"] = attrs
	}
	if c := u.wire(mode); c != nil {
		out["ConsumedCapacity"] = c
	}
	return out
}

func (m *Model) putItem(in *PutItemInput) (any, error) {
	if err := in.check(); err != nil {
		return nil, err
	}
	t, err := m.table(in.TableName)
	if err != nil {
		return nil, err
	}
	if err := checkReturnValues(in.ReturnValues, "NONE", "ALL_OLD"); err != nil {
		return nil, err
	}
	ph := newPlaceholders(in.ExpressionAttributeNames, in.ExpressionAttributeValues)
	c, err := condition("ConditionExpression", in.ConditionExpression, ph)
	if err != nil {
		return nil, err
	}
	if err := ph.checkUnused(in.ConditionExpression != nil); err != nil {
		return nil, err
	}
	if err := t.checkItem(in.Item, "Item size has exceeded the maximum allowed size"); err != nil {
		return nil, err
	}
	old := t.get(in.Item)
	if err := checkCondition(c, old, in.ReturnValuesOnConditionCheckFailure); err != nil {
		return nil, err
	}
	item := cloneItem(in.Item)
	t.put(item)
	m.emit(t, old, item, false)
	var attrs Item
	if in.ReturnValues == "ALL_OLD" {
		attrs = old
	}
	return writeOutput(attrs, t.writeCost(old, item), in.ReturnConsumedCapacity), nil
}

func (m *Model) deleteItem(in *DeleteItemInput) (any, error) {
	if err := in.check(); err != nil {
		return nil, err
	}
	t, err := m.table(in.TableName)
	if err != nil {
		return nil, err
	}
	if err := checkReturnValues(in.ReturnValues, "NONE", "ALL_OLD"); err != nil {
		return nil, err
	}
	if err := t.checkKey(in.Key); err != nil {
		return nil, err
	}
	ph := newPlaceholders(in.ExpressionAttributeNames, in.ExpressionAttributeValues)
	c, err := condition("ConditionExpression", in.ConditionExpression, ph)
	if err != nil {
		return nil, err
	}
	if err := ph.checkUnused(in.ConditionExpression != nil); err != nil {
		return nil, err
	}
	old := t.get(in.Key)
	if err := checkCondition(c, old, in.ReturnValuesOnConditionCheckFailure); err != nil {
		return nil, err
	}
	if old != nil {
		t.remove(t.primaryKey(in.Key))
		m.emit(t, old, nil, false)
	}
	var attrs Item
	if in.ReturnValues == "ALL_OLD" {
		attrs = old
	}
	return writeOutput(attrs, t.writeCost(old, nil), in.ReturnConsumedCapacity), nil
}

func (m *Model) updateItem(in *UpdateItemInput) (any, error) {
	if err := in.check(); err != nil {
		return nil, err
	}
	t, err := m.table(in.TableName)
	if err != nil {
		return nil, err
	}
	if err := checkReturnValues(in.ReturnValues, "NONE", "ALL_OLD", "ALL_NEW", "UPDATED_OLD", "UPDATED_NEW"); err != nil {
		return nil, err
	}
	if err := t.checkKey(in.Key); err != nil {
		return nil, err
	}
	ph := newPlaceholders(in.ExpressionAttributeNames, in.ExpressionAttributeValues)
	var u *update
	if in.UpdateExpression != nil {
		if u, err = parseUpdate(*in.UpdateExpression, ph); err != nil {
			return nil, err
		}
		for _, p := range u.paths() {
			if slices.Contains(t.key.names(), p[0].name) {
				return nil, validation("One or more parameter values were invalid: Cannot update attribute %s. This attribute is part of the key", p[0].name)
			}
		}
	}
	c, err := condition("ConditionExpression", in.ConditionExpression, ph)
	if err != nil {
		return nil, err
	}
	if err := ph.checkUnused(in.UpdateExpression != nil || in.ConditionExpression != nil); err != nil {
		return nil, err
	}
	old := t.get(in.Key)
	if err := checkCondition(c, old, in.ReturnValuesOnConditionCheckFailure); err != nil {
		return nil, err
	}
	item := cloneItem(old)
	if u != nil {
		if item, err = u.apply(old, in.Key); err != nil {
			return nil, err
		}
	} else if item == nil {
		item = cloneItem(in.Key)
	}
	if err := t.checkItem(item, "Item size to update has exceeded the maximum allowed size"); err != nil {
		return nil, err
	}
	t.put(item)
	m.emit(t, old, item, false)
	var attrs Item
	switch in.ReturnValues {
	case "ALL_OLD":
		attrs = old
	case "ALL_NEW":
		attrs = item
	case "UPDATED_OLD", "UPDATED_NEW":
		if u != nil {
			from := old
			if in.ReturnValues == "UPDATED_NEW" {
				from = item
			}
			attrs = project(from, u.paths())
		}
	}
	return writeOutput(attrs, t.writeCost(old, item), in.ReturnConsumedCapacity), nil
}

func (m *Model) getItem(in *GetItemInput) (any, error) {
	if err := in.check(); err != nil {
		return nil, err
	}
	t, err := m.table(in.TableName)
	if err != nil {
		return nil, err
	}
	if err := t.checkKey(in.Key); err != nil {
		return nil, err
	}
	ph := newPlaceholders(in.ExpressionAttributeNames, in.ExpressionAttributeValues)
	paths, err := projection(in.ProjectionExpression, ph)
	if err != nil {
		return nil, err
	}
	if err := ph.checkUnused(in.ProjectionExpression != nil); err != nil {
		return nil, err
	}
	size := 0
	out := map[string]any{}
	if r := t.record(in.Key); r != nil {
		out["Item"] = pick(r.item, paths)
		size = r.size
	}
	u := usage{table: t.name, tableUnits: readUnits(size, in.ConsistentRead)}
	if c := u.wire(in.ReturnConsumedCapacity); c != nil {
		out["ConsumedCapacity"] = c
	}
	return out, nil
}

// projection parses an optional projection expression.
func projection(expr *string, ph *placeholders) ([]docPath, error) {
	if expr == nil {
		return nil, nil
	}
	return parseProjection(*expr, ph)
}

// pick returns the item for an answer, projected when paths are given.
// A stored item is never changed in place (a write stores a new item), so
// an answer may share it: it is encoded, or copied into the SDK's values,
// before the model's lock is let go.
func pick(item Item, paths []docPath) Item {
	if paths == nil {
		return item
	}
	return project(item, paths)
}
