package awsclient

import (
	"context"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
)

// CapacityMeter sums the DynamoDB capacity units calls consume: it asks
// every read and write for ReturnConsumedCapacity=INDEXES (when the call
// does not ask itself) and adds up what the answers report, per table and
// per index. It is how the tests count write units per step instead of
// assuming item sizes (DynamoDB Local reports them). Calls that fail (a
// refused condition) report nothing and are not counted.
type CapacityMeter struct {
	mu    sync.Mutex
	units Capacity
}

// Capacity is what a CapacityMeter measured.
type Capacity struct {
	// TableWrite and TableRead are units consumed on tables, by table name.
	TableWrite, TableRead map[string]float64
	// IndexWrite and IndexRead are units consumed on global secondary
	// indexes, by "table/index".
	IndexWrite, IndexRead map[string]float64
}

// NewCapacityMeter returns an empty meter.
func NewCapacityMeter() *CapacityMeter {
	m := &CapacityMeter{}
	m.Reset()
	return m
}

// Reset forgets what was measured.
func (m *CapacityMeter) Reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.units = Capacity{TableWrite: map[string]float64{}, TableRead: map[string]float64{}, IndexWrite: map[string]float64{}, IndexRead: map[string]float64{}}
}

// Snapshot returns a copy of the sums.
func (m *CapacityMeter) Snapshot() Capacity {
	m.mu.Lock()
	defer m.mu.Unlock()
	cp := func(in map[string]float64) map[string]float64 {
		out := make(map[string]float64, len(in))
		for k, v := range in {
			out[k] = v
		}
		return out
	}
	return Capacity{TableWrite: cp(m.units.TableWrite), TableRead: cp(m.units.TableRead), IndexWrite: cp(m.units.IndexWrite), IndexRead: cp(m.units.IndexRead)}
}

// Writes sums the write units of every table and index.
func (c Capacity) Writes() (table, index float64) {
	for _, v := range c.TableWrite {
		table += v
	}
	for _, v := range c.IndexWrite {
		index += v
	}
	return table, index
}

// APIOption installs the meter on a DynamoDB client's middleware stack.
func (m *CapacityMeter) APIOption(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("qasyncCapacityMeter",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			write := ask(in.Parameters)
			out, md, err := next.HandleInitialize(ctx, in)
			if err == nil {
				m.add(write, consumed(out.Result))
			}
			return out, md, err
		}), middleware.After)
}

// ask sets ReturnConsumedCapacity on the inputs that take it and reports
// whether the call writes.
func ask(params any) (write bool) {
	const want = types.ReturnConsumedCapacityIndexes
	switch p := params.(type) {
	case *dynamodb.UpdateItemInput:
		if p.ReturnConsumedCapacity == "" {
			p.ReturnConsumedCapacity = want
		}
		return true
	case *dynamodb.PutItemInput:
		if p.ReturnConsumedCapacity == "" {
			p.ReturnConsumedCapacity = want
		}
		return true
	case *dynamodb.DeleteItemInput:
		if p.ReturnConsumedCapacity == "" {
			p.ReturnConsumedCapacity = want
		}
		return true
	case *dynamodb.TransactWriteItemsInput:
		if p.ReturnConsumedCapacity == "" {
			p.ReturnConsumedCapacity = want
		}
		return true
	case *dynamodb.BatchWriteItemInput:
		if p.ReturnConsumedCapacity == "" {
			p.ReturnConsumedCapacity = want
		}
		return true
	case *dynamodb.GetItemInput:
		if p.ReturnConsumedCapacity == "" {
			p.ReturnConsumedCapacity = want
		}
	case *dynamodb.BatchGetItemInput:
		if p.ReturnConsumedCapacity == "" {
			p.ReturnConsumedCapacity = want
		}
	case *dynamodb.QueryInput:
		if p.ReturnConsumedCapacity == "" {
			p.ReturnConsumedCapacity = want
		}
	}
	return false
}

// consumed extracts the consumed capacity of a DynamoDB output.
func consumed(result any) []types.ConsumedCapacity {
	one := func(c *types.ConsumedCapacity) []types.ConsumedCapacity {
		if c == nil {
			return nil
		}
		return []types.ConsumedCapacity{*c}
	}
	switch r := result.(type) {
	case *dynamodb.UpdateItemOutput:
		return one(r.ConsumedCapacity)
	case *dynamodb.PutItemOutput:
		return one(r.ConsumedCapacity)
	case *dynamodb.DeleteItemOutput:
		return one(r.ConsumedCapacity)
	case *dynamodb.GetItemOutput:
		return one(r.ConsumedCapacity)
	case *dynamodb.QueryOutput:
		return one(r.ConsumedCapacity)
	case *dynamodb.TransactWriteItemsOutput:
		return r.ConsumedCapacity
	case *dynamodb.BatchWriteItemOutput:
		return r.ConsumedCapacity
	case *dynamodb.BatchGetItemOutput:
		return r.ConsumedCapacity
	}
	return nil
}

func (m *CapacityMeter) add(write bool, cs []types.ConsumedCapacity) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range cs {
		table := deref(c.TableName)
		tableUnits := units(c.Table)
		if c.Table == nil && len(c.GlobalSecondaryIndexes) == 0 {
			tableUnits = deref64(c.CapacityUnits) // only the total was reported
		}
		if write {
			m.units.TableWrite[table] += tableUnits
		} else {
			m.units.TableRead[table] += tableUnits
		}
		for name, ix := range c.GlobalSecondaryIndexes {
			if write {
				m.units.IndexWrite[table+"/"+name] += units(&ix)
			} else {
				m.units.IndexRead[table+"/"+name] += units(&ix)
			}
		}
	}
}

func units(c *types.Capacity) float64 {
	if c == nil {
		return 0
	}
	return deref64(c.CapacityUnits)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func deref64(f *float64) float64 {
	if f == nil {
		return 0
	}
	return *f
}
