package ddbmodel

import (
	"encoding/json"
	"regexp"
	"slices"
)

// KeySchemaElement is one element of a key schema.
type KeySchemaElement struct {
	AttributeName string
	KeyType       string
}

// AttributeDefinition declares a key attribute's type.
type AttributeDefinition struct {
	AttributeName string
	AttributeType string
}

// Projection is a global secondary index's projection.
type Projection struct {
	ProjectionType   string
	NonKeyAttributes []string `json:",omitempty"`
}

// GlobalSecondaryIndex is one index of a CreateTable request.
type GlobalSecondaryIndex struct {
	IndexName  string
	KeySchema  []KeySchemaElement
	Projection Projection
}

// StreamSpecification turns a table's stream on or off.
type StreamSpecification struct {
	StreamEnabled  bool
	StreamViewType string `json:",omitempty"`
}

// CreateTableInput is DynamoDB's CreateTable request.
type CreateTableInput struct {
	TableName              string
	KeySchema              []KeySchemaElement
	AttributeDefinitions   []AttributeDefinition
	GlobalSecondaryIndexes []GlobalSecondaryIndex
	LocalSecondaryIndexes  json.RawMessage
	BillingMode            string
	StreamSpecification    *StreamSpecification
}

// TableNameInput is the request of DeleteTable, DescribeTable and
// DescribeTimeToLive.
type TableNameInput struct {
	TableName string
}

// UpdateTableInput is DynamoDB's UpdateTable request (billing mode and
// stream changes).
type UpdateTableInput struct {
	TableName                   string
	BillingMode                 string
	StreamSpecification         *StreamSpecification
	GlobalSecondaryIndexUpdates json.RawMessage
	AttributeDefinitions        []AttributeDefinition
}

// ListTablesInput is DynamoDB's ListTables request.
type ListTablesInput struct {
	ExclusiveStartTableName *string
	Limit                   *int
}

// UpdateTimeToLiveInput is DynamoDB's UpdateTimeToLive request.
type UpdateTimeToLiveInput struct {
	TableName               string
	TimeToLiveSpecification struct {
		AttributeName string
		Enabled       bool
	}
}

var tableNamePattern = regexp.MustCompile(`^[a-zA-Z0-9_.-]{3,255}$`)

var viewTypes = []string{"KEYS_ONLY", "NEW_IMAGE", "OLD_IMAGE", "NEW_AND_OLD_IMAGES"}

// keys reads a key schema against the attribute definitions.
func keys(elems []KeySchemaElement, defs map[string]Type) (keySchema, error) {
	var k keySchema
	if len(elems) == 0 || len(elems) > 2 || elems[0].KeyType != "HASH" || len(elems) == 2 && elems[1].KeyType != "RANGE" {
		return k, validation("1 validation error detected: Invalid KeySchema: The first KeySchemaElement is not a HASH key type")
	}
	for i, e := range elems {
		t, ok := defs[e.AttributeName]
		if !ok {
			return k, validation("One or more parameter values were invalid: Some index key attributes are not defined in AttributeDefinitions. Keys: [%s], AttributeDefinitions: [...]", e.AttributeName)
		}
		if i == 0 {
			k.hash = keyAttr{e.AttributeName, t}
		} else {
			k.rng = keyAttr{e.AttributeName, t}
		}
	}
	if k.hash.name == k.rng.name {
		return k, validation("Both the Hash Key and the Range Key element in the KeySchema have the same name")
	}
	return k, nil
}

func (m *Model) createTable(in *CreateTableInput) (any, error) {
	if !tableNamePattern.MatchString(in.TableName) {
		return nil, validation("TableName must be at least 3 characters long and at most 255 characters long, and may contain only the characters a-z, A-Z, 0-9, '_', '-', and '.'")
	}
	if len(in.LocalSecondaryIndexes) > 0 && string(in.LocalSecondaryIndexes) != "null" {
		return nil, validation("The model does not support local secondary indexes")
	}
	if m.tables[in.TableName] != nil {
		return nil, clientError("ResourceInUseException", "Table already exists: %s", in.TableName)
	}
	defs := map[string]Type{}
	var attrDefs []keyAttr
	for _, d := range in.AttributeDefinitions {
		t := Type(d.AttributeType)
		if t != TypeS && t != TypeN && t != TypeB {
			return nil, validation("1 validation error detected: Value '%s' at 'attributeDefinitions.member.attributeType' failed to satisfy constraint: Member must satisfy enum value set: [B, N, S]", d.AttributeType)
		}
		if _, dup := defs[d.AttributeName]; dup {
			return nil, validation("Cannot have two attributes with the same name")
		}
		defs[d.AttributeName] = t
		attrDefs = append(attrDefs, keyAttr{d.AttributeName, t})
	}
	key, err := keys(in.KeySchema, defs)
	if err != nil {
		return nil, err
	}
	used := map[string]bool{}
	for _, n := range key.names() {
		used[n] = true
	}
	now := m.now()
	t := &table{
		name: in.TableName, arn: "arn:aws:dynamodb:" + m.opts.Region + ":" + m.opts.Account + ":table/" + in.TableName,
		key: key, attrDefs: attrDefs, billing: in.BillingMode, created: now,
		items: map[string]*record{}, parts: map[string]*partition{},
	}
	if t.billing == "" {
		t.billing = "PROVISIONED"
	}
	for _, g := range in.GlobalSecondaryIndexes {
		if slices.ContainsFunc(t.indexes, func(ix *index) bool { return ix.name == g.IndexName }) {
			return nil, validation("One or more parameter values were invalid: Duplicate index name: %s", g.IndexName)
		}
		k, err := keys(g.KeySchema, defs)
		if err != nil {
			return nil, err
		}
		for _, n := range k.names() {
			used[n] = true
		}
		p := g.Projection
		switch {
		case p.ProjectionType == "INCLUDE" && len(p.NonKeyAttributes) > 0,
			(p.ProjectionType == "KEYS_ONLY" || p.ProjectionType == "ALL") && len(p.NonKeyAttributes) == 0:
		default:
			return nil, validation("One or more parameter values were invalid: ProjectionType is %s, but NonKeyAttributes is specified or missing", p.ProjectionType)
		}
		t.indexes = append(t.indexes, &index{name: g.IndexName, key: k, projection: p.ProjectionType,
			nonKey: slices.Clone(p.NonKeyAttributes), parts: map[string]*partition{}, created: now})
	}
	if len(used) != len(defs) {
		return nil, validation("One or more parameter values were invalid: Number of attributes in KeySchema does not exactly match number of attributes defined in AttributeDefinitions")
	}
	if spec := in.StreamSpecification; spec != nil && spec.StreamEnabled {
		if !slices.Contains(viewTypes, spec.StreamViewType) {
			return nil, validation("Stream view type must be one of %v", viewTypes)
		}
		t.viewType = spec.StreamViewType
		t.stream = m.newStream(t, spec.StreamViewType, now)
	}
	m.tables[t.name] = t
	return map[string]any{"TableDescription": m.describe(t, "ACTIVE")}, nil
}

// describe is a table's TableDescription.
func (m *Model) describe(t *table, status string) map[string]any {
	var defs []AttributeDefinition
	for _, d := range t.attrDefs {
		defs = append(defs, AttributeDefinition{d.name, string(d.t)})
	}
	throughput := map[string]int{"NumberOfDecreasesToday": 0, "ReadCapacityUnits": 0, "WriteCapacityUnits": 0}
	d := map[string]any{
		"TableName": t.name, "TableArn": t.arn, "TableStatus": status, "KeySchema": keySchemaOf(t.key),
		"AttributeDefinitions": defs, "CreationDateTime": epoch(t.created), "ItemCount": len(t.items),
		"TableSizeBytes": t.sizeBytes, "ProvisionedThroughput": throughput,
		"BillingModeSummary":        map[string]string{"BillingMode": t.billing},
		"DeletionProtectionEnabled": false,
	}
	var gsis []map[string]any
	for _, ix := range t.indexes {
		count, size := 0, 0
		for _, r := range ix.allRecords() {
			count++
			size += itemSize(t.entry(ix, r.item))
		}
		gsis = append(gsis, map[string]any{
			"IndexName": ix.name, "IndexArn": t.arn + "/index/" + ix.name, "IndexStatus": "ACTIVE",
			"KeySchema": keySchemaOf(ix.key), "Projection": Projection{ix.projection, ix.nonKey},
			"ProvisionedThroughput": throughput, "ItemCount": count, "IndexSizeBytes": size,
		})
	}
	if gsis != nil {
		d["GlobalSecondaryIndexes"] = gsis
	}
	if t.stream != nil {
		d["StreamSpecification"] = StreamSpecification{true, t.viewType}
	}
	if s := m.latestStream(t.name); s != nil {
		d["LatestStreamArn"], d["LatestStreamLabel"] = s.arn, s.label
	}
	return d
}

// latestStream is the table's newest stream, enabled or not.
func (m *Model) latestStream(tableName string) *stream {
	var latest *stream
	for _, arn := range sortedNames(m.streams) {
		if s := m.streams[arn]; s.table == tableName && (latest == nil || !s.created.Before(latest.created)) {
			latest = s
		}
	}
	return latest
}

func (m *Model) describeTable(in *TableNameInput) (any, error) {
	t, err := m.table(in.TableName)
	if err != nil {
		return nil, err
	}
	return map[string]any{"Table": m.describe(t, "ACTIVE")}, nil
}

func (m *Model) deleteTable(in *TableNameInput) (any, error) {
	t, err := m.table(in.TableName)
	if err != nil {
		return nil, err
	}
	if t.stream != nil {
		t.stream.disable(m.now())
	}
	delete(m.tables, t.name)
	return map[string]any{"TableDescription": m.describe(t, "DELETING")}, nil
}

func (m *Model) updateTable(in *UpdateTableInput) (any, error) {
	t, err := m.table(in.TableName)
	if err != nil {
		return nil, err
	}
	if len(in.GlobalSecondaryIndexUpdates) > 0 && string(in.GlobalSecondaryIndexUpdates) != "null" {
		return nil, validation("The model does not support changing indexes")
	}
	if spec := in.StreamSpecification; spec != nil {
		switch {
		case spec.StreamEnabled && t.stream != nil:
			return nil, validation("Table already has an enabled stream: %s", t.stream.arn)
		case spec.StreamEnabled:
			if !slices.Contains(viewTypes, spec.StreamViewType) {
				return nil, validation("Stream view type must be one of %v", viewTypes)
			}
			t.viewType = spec.StreamViewType
			t.stream = m.newStream(t, spec.StreamViewType, m.now())
		case t.stream == nil:
			return nil, validation("Table already has no stream enabled")
		default:
			t.stream.disable(m.now())
			t.stream, t.viewType = nil, ""
		}
	}
	if in.BillingMode != "" {
		t.billing = in.BillingMode
	}
	return map[string]any{"TableDescription": m.describe(t, "ACTIVE")}, nil
}

func (m *Model) listTables(in *ListTablesInput) (any, error) {
	limit := 100
	if in.Limit != nil {
		if *in.Limit < 1 || *in.Limit > 100 {
			return nil, validation("1 validation error detected: Value '%d' at 'limit' failed to satisfy constraint: Member must have value less than or equal to 100", *in.Limit)
		}
		limit = *in.Limit
	}
	names := []string{}
	var last string
	for _, n := range sortedNames(m.tables) {
		if in.ExclusiveStartTableName != nil && n <= *in.ExclusiveStartTableName {
			continue
		}
		if len(names) == limit {
			last = names[len(names)-1]
			break
		}
		names = append(names, n)
	}
	out := map[string]any{"TableNames": names}
	if last != "" {
		out["LastEvaluatedTableName"] = last
	}
	return out, nil
}

func (m *Model) updateTimeToLive(in *UpdateTimeToLiveInput) (any, error) {
	t, err := m.table(in.TableName)
	if err != nil {
		return nil, err
	}
	spec := in.TimeToLiveSpecification
	switch {
	case spec.AttributeName == "":
		return nil, validation("1 validation error detected: Value null at 'timeToLiveSpecification.attributeName' failed to satisfy constraint: Member must not be null")
	case spec.Enabled && t.ttlOn:
		return nil, validation("TimeToLive is already enabled")
	case !spec.Enabled && !t.ttlOn:
		return nil, validation("TimeToLive is already disabled")
	case !spec.Enabled && spec.AttributeName != t.ttlAttr:
		return nil, validation("TimeToLive is active on a different AttributeName: current AttributeName is %s", t.ttlAttr)
	}
	t.ttlOn, t.ttlAttr = spec.Enabled, spec.AttributeName
	t.refileTTL()
	return map[string]any{"TimeToLiveSpecification": spec}, nil
}

func (m *Model) describeTimeToLive(in *TableNameInput) (any, error) {
	t, err := m.table(in.TableName)
	if err != nil {
		return nil, err
	}
	d := map[string]string{"TimeToLiveStatus": "DISABLED"}
	if t.ttlOn {
		d = map[string]string{"TimeToLiveStatus": "ENABLED", "AttributeName": t.ttlAttr}
	}
	return map[string]any{"TimeToLiveDescription": d}, nil
}
