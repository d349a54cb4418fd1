package ddbmodel

// KeysAndAttributes is one table's part of a BatchGetItem request.
type KeysAndAttributes struct {
	Keys                     []Item
	ConsistentRead           bool
	ProjectionExpression     *string
	ExpressionAttributeNames map[string]string
	legacy
}

// BatchGetItemInput is DynamoDB's BatchGetItem request.
type BatchGetItemInput struct {
	RequestItems           map[string]KeysAndAttributes
	ReturnConsumedCapacity string
}

func (m *Model) batchGetItem(in *BatchGetItemInput) (any, error) {
	total := 0
	for _, ka := range in.RequestItems {
		total += len(ka.Keys)
	}
	if total > 100 {
		return nil, validation("Too many items requested for the BatchGetItem call")
	}
	if total == 0 {
		return nil, validation("1 validation error detected: Value at 'requestItems' failed to satisfy constraint: Member must have length greater than or equal to 1")
	}
	responses := map[string][]Item{}
	var consumed []*consumedCapacity
	for _, name := range sortedNames(in.RequestItems) {
		ka := in.RequestItems[name]
		if err := ka.check(); err != nil {
			return nil, err
		}
		t, err := m.table(name)
		if err != nil {
			return nil, err
		}
		ph := newPlaceholders(ka.ExpressionAttributeNames, nil)
		paths, err := projection(ka.ProjectionExpression, ph)
		if err != nil {
			return nil, err
		}
		if err := ph.checkUnused(ka.ProjectionExpression != nil); err != nil {
			return nil, err
		}
		seen := map[string]bool{}
		for _, k := range ka.Keys {
			if err := t.checkKey(k); err != nil {
				return nil, err
			}
			if seen[t.primaryKey(k)] {
				return nil, validation("Provided list of item keys contains duplicates")
			}
			seen[t.primaryKey(k)] = true
		}
		u := usage{table: name}
		items := []Item{}
		for _, k := range ka.Keys {
			// A key that finds nothing costs nothing (as DynamoDB Local
			// reports).
			if r := t.record(k); r != nil {
				u.tableUnits += readUnits(r.size, ka.ConsistentRead)
				items = append(items, pick(r.item, paths))
			}
		}
		responses[name] = items
		if c := u.wire(in.ReturnConsumedCapacity); c != nil {
			consumed = append(consumed, c)
		}
	}
	out := map[string]any{"Responses": responses, "UnprocessedKeys": map[string]any{}}
	if consumed != nil {
		out["ConsumedCapacity"] = consumed
	}
	return out, nil
}

// WriteRequest is one put or delete of a BatchWriteItem request.
type WriteRequest struct {
	PutRequest *struct {
		Item Item
	}
	DeleteRequest *struct {
		Key Item
	}
}

// BatchWriteItemInput is DynamoDB's BatchWriteItem request.
type BatchWriteItemInput struct {
	RequestItems                map[string][]WriteRequest
	ReturnConsumedCapacity      string
	ReturnItemCollectionMetrics string
}

func (m *Model) batchWriteItem(in *BatchWriteItemInput) (any, error) {
	total := 0
	for _, ws := range in.RequestItems {
		total += len(ws)
	}
	if total > 25 {
		return nil, validation("Too many items requested for the BatchWriteItem call")
	}
	if total == 0 {
		return nil, validation("1 validation error detected: Value at 'requestItems' failed to satisfy constraint: Member must have length greater than or equal to 1")
	}
	// Validate everything before writing anything.
	names := sortedNames(in.RequestItems)
	for _, name := range names {
		t, err := m.table(name)
		if err != nil {
			return nil, err
		}
		seen := map[string]bool{}
		for _, w := range in.RequestItems[name] {
			var key Item
			switch {
			case w.PutRequest != nil && w.DeleteRequest == nil:
				if err := t.checkItem(w.PutRequest.Item, "Item size has exceeded the maximum allowed size"); err != nil {
					return nil, err
				}
				key = keyOf(t.key, w.PutRequest.Item)
			case w.DeleteRequest != nil && w.PutRequest == nil:
				if err := t.checkKey(w.DeleteRequest.Key); err != nil {
					return nil, err
				}
				key = w.DeleteRequest.Key
			default:
				return nil, validation("Supplied AttributeValue has more than one datatypes set, must contain exactly one of the supported datatypes")
			}
			if seen[t.primaryKey(key)] {
				return nil, validation("Provided list of item keys contains duplicates")
			}
			seen[t.primaryKey(key)] = true
		}
	}
	var consumed []*consumedCapacity
	for _, name := range names {
		t := m.tables[name]
		u := usage{table: name}
		for _, w := range in.RequestItems[name] {
			var old, item Item
			if w.PutRequest != nil {
				item = cloneItem(w.PutRequest.Item)
				old = t.put(item)
			} else {
				old = t.remove(t.primaryKey(w.DeleteRequest.Key))
			}
			m.emit(t, old, item, false)
			u.add(t.writeCost(old, item))
		}
		if c := u.wire(in.ReturnConsumedCapacity); c != nil {
			consumed = append(consumed, c)
		}
	}
	out := map[string]any{"UnprocessedItems": map[string]any{}}
	if consumed != nil {
		out["ConsumedCapacity"] = consumed
	}
	return out, nil
}
