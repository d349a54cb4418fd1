package awsclient

import (
	"context"
	"encoding/hex"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
)

// ItemMeter records every DynamoDB write request per item (table and
// primary key) with the time its answer came and the write units it
// consumed, so that a measurement can tell how often each item is
// written and its busiest second: DynamoDB serves one item at most
// 1,000 write units a second. A refused write (a condition that did not
// hold) is recorded too, marked refused: DynamoDB charges it against the
// item's partition like a write. A call is recorded once, whatever the
// SDK's retries of it. Tests and benchmarks use it.
type ItemMeter struct {
	mu     sync.Mutex
	keys   map[string][]string
	writes []ItemWrite
}

// ItemWrite is one write of one item as an ItemMeter saw it.
type ItemWrite struct {
	// Table is the table's name; Key the item's primary key as
	// "name=value" pairs in name order, joined by ',' (binary values in
	// hex; "" when the key could not be told: a PutItem of a table the
	// meter has no key names for).
	Table, Key string
	// At is when the answer came.
	At time.Time
	// Units are the write units the answer reported for the item on its
	// table (an index's units go to the index's partitions, not the
	// item's); 0 when it reported none for the item alone (a refused
	// write, a batch or a transaction).
	Units float64
	// Refused is set when the call failed.
	Refused bool
}

// NewItemMeter returns an empty meter.
func NewItemMeter() *ItemMeter {
	return &ItemMeter{keys: map[string][]string{}}
}

// SetKeys names a table's key attributes, which a PutItem's item does
// not set apart (UpdateItem and DeleteItem name their key themselves):
// a PutItem of a table without them is recorded with an empty Key.
func (m *ItemMeter) SetKeys(table string, names ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.keys[table] = slices.Clone(names)
}

// Reset forgets what was recorded.
func (m *ItemMeter) Reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writes = nil
}

// Writes returns a copy of the writes recorded, in the order their
// answers came.
func (m *ItemMeter) Writes() []ItemWrite {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.writes)
}

// APIOption installs the meter on a DynamoDB client's middleware stack.
// It asks each write for ReturnConsumedCapacity=INDEXES when the call does
// not ask itself, as CapacityMeter does.
func (m *ItemMeter) APIOption(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("qasyncItemMeter",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			if !ask(in.Parameters) {
				return next.HandleInitialize(ctx, in)
			}
			items := m.itemsOf(in.Parameters)
			out, md, err := next.HandleInitialize(ctx, in)
			at := time.Now()
			var used float64
			if err == nil && len(items) == 1 {
				for _, c := range consumed(out.Result) {
					if c.Table != nil {
						used += units(c.Table)
					} else if len(c.GlobalSecondaryIndexes) == 0 {
						used += deref64(c.CapacityUnits) // only the total was reported
					}
				}
			}
			m.mu.Lock()
			for _, it := range items {
				it.At, it.Refused = at, err != nil
				if len(items) == 1 {
					it.Units = used
				}
				m.writes = append(m.writes, it)
			}
			m.mu.Unlock()
			return out, md, err
		}), middleware.After)
}

// itemsOf lists the items a write call writes (Table and Key set).
func (m *ItemMeter) itemsOf(params any) []ItemWrite {
	var out []ItemWrite
	add := func(table *string, key map[string]types.AttributeValue) {
		out = append(out, ItemWrite{Table: deref(table), Key: keyString(key)})
	}
	put := func(table string, item map[string]types.AttributeValue) {
		m.mu.Lock()
		names := m.keys[table]
		m.mu.Unlock()
		if len(names) == 0 {
			out = append(out, ItemWrite{Table: table})
			return
		}
		key := make(map[string]types.AttributeValue, len(names))
		for _, n := range names {
			key[n] = item[n]
		}
		add(&table, key)
	}
	switch p := params.(type) {
	case *dynamodb.PutItemInput:
		put(deref(p.TableName), p.Item)
	case *dynamodb.UpdateItemInput:
		add(p.TableName, p.Key)
	case *dynamodb.DeleteItemInput:
		add(p.TableName, p.Key)
	case *dynamodb.BatchWriteItemInput:
		for table, reqs := range p.RequestItems {
			for _, r := range reqs {
				switch {
				case r.PutRequest != nil:
					put(table, r.PutRequest.Item)
				case r.DeleteRequest != nil:
					add(&table, r.DeleteRequest.Key)
				}
			}
		}
	case *dynamodb.TransactWriteItemsInput:
		// A condition check is charged as a write of its item.
		for _, ti := range p.TransactItems {
			switch {
			case ti.Put != nil:
				put(deref(ti.Put.TableName), ti.Put.Item)
			case ti.Update != nil:
				add(ti.Update.TableName, ti.Update.Key)
			case ti.Delete != nil:
				add(ti.Delete.TableName, ti.Delete.Key)
			case ti.ConditionCheck != nil:
				add(ti.ConditionCheck.TableName, ti.ConditionCheck.Key)
			}
		}
	}
	return out
}

// keyString renders a key as "name=value" pairs in name order.
func keyString(key map[string]types.AttributeValue) string {
	names := make([]string, 0, len(key))
	for n := range key {
		names = append(names, n)
	}
	slices.Sort(names)
	var b strings.Builder
	for i, n := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(n)
		b.WriteByte('=')
		switch v := key[n].(type) {
		case *types.AttributeValueMemberS:
			b.WriteString(v.Value)
		case *types.AttributeValueMemberN:
			b.WriteString(v.Value)
		case *types.AttributeValueMemberB:
			b.WriteString(hex.EncodeToString(v.Value))
		}
	}
	return b.String()
}

// ItemLoad is what an ItemMeter recorded of one item.
type ItemLoad struct {
	// Table and Key name the item as ItemWrite does.
	Table, Key string
	// Writes counts its write requests, Refused those of them that failed.
	Writes, Refused int
	// Units sums the write units reported; MaxUnits is the most one write
	// of the item consumed (1 while the item stays under 1 KB).
	Units, MaxUnits float64
	// PeakWrites is the most writes of the item whose answers came within
	// any one window.
	PeakWrites int
	// First and Last are when the first and the last answer came.
	First, Last time.Time
}

// Loads groups writes by item and computes each item's peak over any
// window (one second for DynamoDB's per-item limit), the busiest items
// first (ties by table and key).
func Loads(writes []ItemWrite, window time.Duration) []ItemLoad {
	type id struct{ table, key string }
	at := map[id][]time.Time{}
	loads := map[id]*ItemLoad{}
	for _, w := range writes {
		k := id{w.Table, w.Key}
		l := loads[k]
		if l == nil {
			l = &ItemLoad{Table: w.Table, Key: w.Key, First: w.At, Last: w.At}
			loads[k] = l
		}
		l.Writes++
		if w.Refused {
			l.Refused++
		}
		l.Units += w.Units
		l.MaxUnits = max(l.MaxUnits, w.Units)
		if w.At.Before(l.First) {
			l.First = w.At
		}
		if w.At.After(l.Last) {
			l.Last = w.At
		}
		at[k] = append(at[k], w.At)
	}
	out := make([]ItemLoad, 0, len(loads))
	for k, l := range loads {
		l.PeakWrites = PeakInWindow(at[k], window)
		out = append(out, *l)
	}
	slices.SortFunc(out, func(a, b ItemLoad) int {
		if a.PeakWrites != b.PeakWrites {
			return b.PeakWrites - a.PeakWrites
		}
		if a.Writes != b.Writes {
			return b.Writes - a.Writes
		}
		return strings.Compare(a.Table+"\x00"+a.Key, b.Table+"\x00"+b.Key)
	})
	return out
}

// PeakInWindow is the most of times within any window [t, t+window).
func PeakInWindow(times []time.Time, window time.Duration) int {
	ts := slices.Clone(times)
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	peak, i := 0, 0
	for j := range ts {
		for ts[j].Sub(ts[i]) >= window {
			i++
		}
		peak = max(peak, j-i+1)
	}
	return peak
}
