package ddbmodel

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// keyAttr is one key attribute: its name and scalar type.
type keyAttr struct {
	name string
	t    Type
}

// keySchema is a hash key and an optional range key (name "" for none).
type keySchema struct {
	hash, rng keyAttr
}

func (k keySchema) names() []string {
	if k.rng.name == "" {
		return []string{k.hash.name}
	}
	return []string{k.hash.name, k.rng.name}
}

// encode is a scalar key value as a map key: equal values, equal text.
func encode(v Value) string { return string(v.T) + strconv.Itoa(len(v.S)) + ":" + v.S }

// record is a stored item. Its item is never changed in place (a write
// stores a new record), so answers may share it.
type record struct {
	key  string // the encoded primary key
	item Item
	// size is the item's size (itemSize), counted once when stored.
	size int
	// sdk is the item in the SDK's values once the direct path answered
	// it (see sdkOf).
	sdk map[string]types.AttributeValue
	// ttlDue is the TTL expiry the record is filed under in the table's
	// expiring list (zero when none), deleteAt its drawn deletion time
	// once expired (zero until drawn).
	ttlDue, deleteAt time.Time
}

// partition is the records of one hash key value, sorted by the owner's
// order.
type partition struct {
	recs []*record
}

// index is a global secondary index.
type index struct {
	name       string
	key        keySchema
	projection string // KEYS_ONLY, INCLUDE or ALL
	nonKey     []string
	parts      map[string]*partition
	created    time.Time
}

// table is one table and its indexes.
type table struct {
	name      string
	arn       string
	key       keySchema
	attrDefs  []keyAttr
	indexes   []*index
	billing   string
	created   time.Time
	items     map[string]*record
	parts     map[string]*partition
	ttlAttr   string
	ttlOn     bool
	stream    *stream // the enabled stream, nil when none
	viewType  string
	expiring  []*record // by ttlDue, then key: not yet given a deletion time
	doomed    []*record // by deleteAt, then key: to be deleted by TTL
	sizeBytes int
}

// primaryKey is the encoded primary key of an item.
func (t *table) primaryKey(item Item) string {
	k := encode(item[t.key.hash.name])
	if t.key.rng.name != "" {
		k += "|" + encode(item[t.key.rng.name])
	}
	return k
}

// keyOf returns the key attributes of an item.
func keyOf(k keySchema, item Item) Item {
	out := Item{k.hash.name: item[k.hash.name]}
	if k.rng.name != "" {
		out[k.rng.name] = item[k.rng.name]
	}
	return out
}

// tableOrder orders records of one table partition by range key.
func (t *table) tableOrder(a, b *record) int {
	if t.key.rng.name == "" {
		return 0
	}
	c, _ := compare(a.item[t.key.rng.name], b.item[t.key.rng.name])
	return c
}

// indexOrder orders records of one index partition: by the index's
// range key, then by the table's key.
func (t *table) indexOrder(ix *index) func(a, b *record) int {
	return func(a, b *record) int {
		if ix.key.rng.name != "" {
			if c, _ := compare(a.item[ix.key.rng.name], b.item[ix.key.rng.name]); c != 0 {
				return c
			}
		}
		if c, _ := compare(a.item[t.key.hash.name], b.item[t.key.hash.name]); c != 0 {
			return c
		}
		return t.tableOrder(a, b)
	}
}

// inIndex reports whether the item has the index's key attributes (of
// the right types: writes refuse others).
func (ix *index) holds(item Item) bool {
	for _, k := range []keyAttr{ix.key.hash, ix.key.rng} {
		if k.name == "" {
			continue
		}
		if v, ok := item[k.name]; !ok || v.T != k.t {
			return false
		}
	}
	return true
}

// entry is the item as the index stores it: table and index keys and the
// projected attributes.
func (t *table) entry(ix *index, item Item) Item {
	if ix.projection == "ALL" {
		return item
	}
	out := keyOf(t.key, item)
	for k, v := range keyOf(ix.key, item) {
		out[k] = v
	}
	if ix.projection == "INCLUDE" {
		for _, name := range ix.nonKey {
			if v, ok := item[name]; ok {
				out[name] = v
			}
		}
	}
	return out
}

func insertSorted(p *partition, r *record, order func(a, b *record) int) {
	i, _ := slices.BinarySearchFunc(p.recs, r, order)
	p.recs = slices.Insert(p.recs, i, r)
}

func removeSorted(p *partition, r *record, order func(a, b *record) int) {
	i, _ := slices.BinarySearchFunc(p.recs, r, order)
	for ; i < len(p.recs); i++ {
		if p.recs[i] == r {
			p.recs = slices.Delete(p.recs, i, i+1)
			return
		}
	}
}

func partOf(parts map[string]*partition, hash Value) *partition {
	k := encode(hash)
	p := parts[k]
	if p == nil {
		p = &partition{}
		parts[k] = p
	}
	return p
}

func dropIfEmpty(parts map[string]*partition, hash Value) {
	if p := parts[encode(hash)]; p != nil && len(p.recs) == 0 {
		delete(parts, encode(hash))
	}
}

// put stores item (replacing the record with its key, if any) and keeps
// the indexes and TTL lists in step; it returns the old item.
func (t *table) put(item Item) Item {
	key := t.primaryKey(item)
	old := t.items[key]
	var oldItem Item
	if old != nil {
		oldItem = old.item
		t.unlink(old)
	}
	r := &record{key: key, item: item}
	t.items[key] = r
	t.link(r)
	return oldItem
}

// remove deletes the record with the item's key and returns its item.
func (t *table) remove(key string) Item {
	r := t.items[key]
	if r == nil {
		return nil
	}
	t.unlink(r)
	delete(t.items, key)
	return r.item
}

// link adds a record to the partitions, indexes and TTL lists.
func (t *table) link(r *record) {
	insertSorted(partOf(t.parts, r.item[t.key.hash.name]), r, t.tableOrder)
	for _, ix := range t.indexes {
		if ix.holds(r.item) {
			insertSorted(partOf(ix.parts, r.item[ix.key.hash.name]), r, t.indexOrder(ix))
		}
	}
	r.size = itemSize(r.item)
	t.sizeBytes += r.size
	t.fileTTL(r)
}

// unlink removes a record from the partitions, indexes and TTL lists.
func (t *table) unlink(r *record) {
	hash := r.item[t.key.hash.name]
	removeSorted(t.parts[encode(hash)], r, t.tableOrder)
	dropIfEmpty(t.parts, hash)
	for _, ix := range t.indexes {
		if ix.holds(r.item) {
			h := r.item[ix.key.hash.name]
			removeSorted(ix.parts[encode(h)], r, t.indexOrder(ix))
			dropIfEmpty(ix.parts, h)
		}
	}
	t.sizeBytes -= r.size
	t.unfileTTL(r)
}

// sortedParts returns the partition keys in order (the model's scan
// order).
func sortedParts(parts map[string]*partition) []string {
	return sortedNames(parts)
}

// allRecords returns the table's records in scan order.
func (t *table) allRecords() []*record {
	var out []*record
	for _, k := range sortedParts(t.parts) {
		out = append(out, t.parts[k].recs...)
	}
	return out
}

// indexRecords returns the index's records in scan order.
func (ix *index) allRecords() []*record {
	var out []*record
	for _, k := range sortedParts(ix.parts) {
		out = append(out, ix.parts[k].recs...)
	}
	return out
}

// describeKey spells a key for messages.
func describeKey(item Item) string {
	var parts []string
	for _, k := range sortedNames(item) {
		parts = append(parts, k)
	}
	return strings.Join(parts, ",")
}
