package ddbmodel

import (
	"cmp"
	"math/big"
	"slices"
	"strings"
	"time"
)

// TTL: an item whose TTL attribute (set with UpdateTimeToLive) is a
// number of epoch seconds at or before now has expired; reads still
// return it (as in AWS), and TTL deletes it once a lag drawn for it has
// passed, writing a REMOVE stream record by the service. Items whose
// expiry lies more than five years in the past are never deleted, as
// AWS documents.

const ttlIgnoredAfter = 5 * 365 * 24 * time.Hour

// ttlExpiry reads an item's TTL attribute.
func (t *table) ttlExpiry(item Item) (time.Time, bool) {
	if !t.ttlOn {
		return time.Time{}, false
	}
	v, ok := item[t.ttlAttr]
	if !ok || v.T != TypeN || strings.HasPrefix(v.S, "-") {
		return time.Time{}, false
	}
	whole, _, _ := strings.Cut(v.S, ".")
	secs, ok := new(big.Int).SetString(whole, 10)
	if !ok || !secs.IsInt64() || secs.Int64() > 1<<40 {
		return time.Time{}, false
	}
	return time.Unix(secs.Int64(), 0).UTC(), true
}

// expired reports whether TTL has expired the item at now.
func (t *table) expired(item Item, now time.Time) bool {
	at, ok := t.ttlExpiry(item)
	return ok && !at.After(now) && now.Sub(at) <= ttlIgnoredAfter
}

func byDue(a, b *record) int {
	return cmp.Or(a.ttlDue.Compare(b.ttlDue), strings.Compare(a.key, b.key))
}

func byDeleteAt(a, b *record) int {
	return cmp.Or(a.deleteAt.Compare(b.deleteAt), strings.Compare(a.key, b.key))
}

// fileTTL puts a record that has a TTL expiry on the expiring list.
func (t *table) fileTTL(r *record) {
	at, ok := t.ttlExpiry(r.item)
	if !ok {
		return
	}
	r.ttlDue = at
	i, _ := slices.BinarySearchFunc(t.expiring, r, byDue)
	t.expiring = slices.Insert(t.expiring, i, r)
}

// unfileTTL takes a record off the TTL lists.
func (t *table) unfileTTL(r *record) {
	drop := func(list []*record, order func(a, b *record) int) []*record {
		if i, ok := slices.BinarySearchFunc(list, r, order); ok && list[i] == r {
			return slices.Delete(list, i, i+1)
		}
		return list
	}
	switch {
	case !r.deleteAt.IsZero():
		t.doomed = drop(t.doomed, byDeleteAt)
	case !r.ttlDue.IsZero():
		t.expiring = drop(t.expiring, byDue)
	}
}

// refileTTL files every record again (TTL was turned on or off).
func (t *table) refileTTL() {
	t.expiring, t.doomed = nil, nil
	for _, r := range t.allRecords() {
		r.ttlDue, r.deleteAt = time.Time{}, time.Time{}
		t.fileTTL(r)
	}
}

// expire gives the items that have expired by now their deletion time,
// and deletes those whose time has come.
func (m *Model) expire(t *table, now time.Time) {
	for len(t.expiring) > 0 && !t.expiring[0].ttlDue.After(now) {
		r := t.expiring[0]
		t.expiring = t.expiring[1:]
		if now.Sub(r.ttlDue) > ttlIgnoredAfter {
			r.ttlDue = time.Time{}
			continue
		}
		r.deleteAt = r.ttlDue.Add(m.lag(t, r))
		i, _ := slices.BinarySearchFunc(t.doomed, r, byDeleteAt)
		t.doomed = slices.Insert(t.doomed, i, r)
	}
	for len(t.doomed) > 0 && !t.doomed[0].deleteAt.After(now) {
		r := t.doomed[0]
		old := t.remove(r.key)
		m.emit(t, old, nil, true)
	}
}

// lag draws the TTL deletion lag of one expired record.
func (m *Model) lag(t *table, r *record) time.Duration {
	if m.opts.TTLLag != nil {
		return max(0, m.opts.TTLLag(t.name, keyOf(t.key, r.item), r.ttlDue))
	}
	return time.Duration(m.rand.Int64N(int64(m.opts.MaxTTLLag) + 1))
}
