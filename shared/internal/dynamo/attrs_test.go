package dynamo

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"testing"

	"github.com/qasync/qasync/shared/schema"
)

// TestAttributesMatchTheSchema: the key and index attributes this
// package writes are those package schema defines the tables with (the
// CDK stack and qasync provision create the tables from schema).
func TestAttributesMatchTheSchema(t *testing.T) {
	type keys struct {
		pk, sk, ttl string
		indexes     [][2]string // partition and sort key of each index
		projected   []string    // every index's non-key attributes
	}
	of := func(tb schema.Table) keys {
		k := keys{pk: tb.PartitionKey.Name, sk: tb.SortKey.Name, ttl: tb.TTLAttribute}
		for _, ix := range tb.Indexes {
			k.indexes = append(k.indexes, [2]string{ix.PartitionKey.Name, ix.SortKey.Name})
			k.projected = append(k.projected, ix.NonKeyAttributes...)
		}
		return k
	}
	for name, c := range map[string]struct {
		table schema.Table
		want  keys
	}{
		"execution": {schema.ExecutionTable("e"), keys{pk: AttrPK, ttl: AttrTTL,
			indexes:   [][2]string{{AttrDueShard, AttrSweepAt}, {AttrListKey, AttrCreated}, {AttrWaitKey, AttrCreated}, {AttrWaitKey, AttrRank}},
			projected: []string{AttrPipelineID, AttrPipelineID, AttrIncarnation, AttrIncarnation}}},
		"history": {schema.HistoryTable("h"), keys{pk: AttrPK, sk: AttrPage, ttl: AttrTTL}},
		"payload": {schema.PayloadTable("p"), keys{pk: AttrPayloadID, sk: AttrPayloadPart, ttl: AttrTTL}},
		"dead-letter": {schema.DeadLetterTable("d"), keys{pk: AttrRecordID, ttl: AttrTTL,
			indexes: [][2]string{{AttrRecordTenant, AttrRecordedAt}}, projected: []string{AttrRecord, AttrRecordPipeline, AttrTTL}}},
		"effect": {schema.EffectTable("f"), keys{pk: AttrCommandID, ttl: AttrTTL}},
	} {
		got := of(c.table)
		if got.pk != c.want.pk || got.sk != c.want.sk || got.ttl != c.want.ttl ||
			!slices.Equal(got.indexes, c.want.indexes) || !slices.Equal(got.projected, c.want.projected) {
			t.Errorf("%s table: schema defines %+v, this package writes %+v", name, got, c.want)
		}
	}
}

// TestRowAttributeNamesAreDistinct: no two attributes of an execution
// row (the first const block of attrs.go) share a name. Two features
// built apart once both chose "rk" (the rank and the rate key): one
// would have overwritten the other in every row.
func TestRowAttributeNamesAreDistinct(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "attrs.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var block *ast.GenDecl
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
			block = g
			break
		}
	}
	if block == nil {
		t.Fatal("attrs.go has no const block")
	}
	seen := map[string]string{}
	for _, spec := range block.Specs {
		vs := spec.(*ast.ValueSpec)
		for i, name := range vs.Names {
			lit, ok := vs.Values[i].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				continue
			}
			v, _ := strconv.Unquote(lit.Value)
			if other, dup := seen[v]; dup {
				t.Errorf("%s and %s are both %q", other, name.Name, v)
			}
			seen[v] = name.Name
		}
	}
	if len(seen) < 40 {
		t.Errorf("read %d row attributes from attrs.go: the first const block is not the row's any more", len(seen))
	}
}
