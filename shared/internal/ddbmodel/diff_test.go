package ddbmodel_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/internal/awstest"
	"github.com/qasync/qasync/shared/internal/ddbmodel"
)

// The differential test: seeded random request sequences sent both to
// DynamoDB Local and to the model, their normalized answers compared
// (items, error codes, consumed capacity). It runs only with the local
// stack (scripts/stack.sh run go test ./shared/internal/ddbmodel/).
// DIFF_DEBUG=<sequence> runs that one sequence and logs every request
// and Local's answer, to study a disagreement.

const (
	diffSequences = 200
	diffSteps     = 40
)

// diffTable is the table every sequence creates on both sides: a hash
// and range key, an INCLUDE index with a range key and a KEYS_ONLY index
// with a hash key only, TTL on "ttl".
func diffTable(name string) *dynamodb.CreateTableInput {
	s, n := types.ScalarAttributeTypeS, types.ScalarAttributeTypeN
	def := func(name string, t types.ScalarAttributeType) types.AttributeDefinition {
		return types.AttributeDefinition{AttributeName: aws.String(name), AttributeType: t}
	}
	key := func(name string, t types.KeyType) types.KeySchemaElement {
		return types.KeySchemaElement{AttributeName: aws.String(name), KeyType: t}
	}
	return &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{def("pk", s), def("sk", n), def("gk", s), def("gs", n), def("hk", n)},
		KeySchema:            []types.KeySchemaElement{key("pk", types.KeyTypeHash), key("sk", types.KeyTypeRange)},
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{
			{IndexName: aws.String("inc"), KeySchema: []types.KeySchemaElement{key("gk", types.KeyTypeHash), key("gs", types.KeyTypeRange)},
				Projection: &types.Projection{ProjectionType: types.ProjectionTypeInclude, NonKeyAttributes: []string{"a", "m"}}},
			{IndexName: aws.String("keys"), KeySchema: []types.KeySchemaElement{key("hk", types.KeyTypeHash)},
				Projection: &types.Projection{ProjectionType: types.ProjectionTypeKeysOnly}},
		},
		StreamSpecification: &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeNewAndOldImages},
	}
}

// side is one DynamoDB: Local or the model.
type side struct {
	name string
	db   *dynamodb.Client
}

func TestDifferential(t *testing.T) {
	awstest.Require(t)
	local, _ := awstest.Clients(t)
	model := ddbmodel.New(ddbmodel.Options{Clock: clock.NewFake(time.Now().UTC())})
	sides := []side{{"local", local.DynamoDB}, {"model", model.Clients().DynamoDB}}
	ctx := context.Background()
	name := awstest.Name(t, "diff")
	for _, s := range sides {
		if _, err := s.db.CreateTable(ctx, diffTable(name)); err != nil {
			t.Fatalf("%s: create table: %v", s.name, err)
		}
		if _, err := s.db.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{TableName: aws.String(name),
			TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String("ttl"), Enabled: aws.Bool(true)}}); err != nil {
			t.Fatalf("%s: ttl: %v", s.name, err)
		}
	}
	t.Cleanup(func() {
		_, _ = local.DynamoDB.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(name)})
	})
	stats := map[string]int{}
	for seq := range diffSequences {
		if os.Getenv("DIFF_DEBUG") != "" && strconv.Itoa(seq) != os.Getenv("DIFF_DEBUG") {
			continue
		}
		g := &gen{r: rand.New(rand.NewPCG(uint64(seq), 7)), table: name, seq: seq, now: time.Now().Unix()}
		for step := range diffSteps {
			req := g.request()
			var answers [2]string
			for i, s := range sides {
				answers[i] = req.run(ctx, s.db)
			}
			if os.Getenv("DIFF_DEBUG") != "" {
				t.Logf("step %d %s %s -> %.300s", step, req.op, req.describe, answers[0])
			}
			kind := strings.SplitN(answers[0], " ", 2)[0]
			if kind == "error" {
				kind = strings.SplitN(comparable(answers[0]), " ", 3)[1]
			}
			stats[req.op+" "+kind]++
			if comparable(answers[0]) != comparable(answers[1]) {
				t.Fatalf("sequence %d step %d: %s %s\nlocal: %.3000s\nmodel: %.3000s", seq, step, req.op, req.describe, answers[0], answers[1])
			}
		}
	}
	keys := make([]string, 0, len(stats))
	for k := range stats {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	total := 0
	for _, k := range keys {
		fmt.Fprintf(&b, "  %-30s %d\n", k, stats[k])
		total += stats[k]
	}
	t.Logf("%d requests in %d sequences agreed:\n%s", total, diffSequences, b.String())
}

// TestDifferentialItemSizes checks the model's item size arithmetic to the
// byte against DynamoDB Local: for each value, an item padded to exactly
// 1,024 bytes by the model's count costs one write unit on both sides and
// one byte more costs two.
func TestDifferentialItemSizes(t *testing.T) {
	awstest.Require(t)
	local, _ := awstest.Clients(t)
	model := ddbmodel.New(ddbmodel.Options{})
	sides := []side{{"local", local.DynamoDB}, {"model", model.Clients().DynamoDB}}
	ctx := context.Background()
	name := awstest.Name(t, "size")
	for _, s := range sides {
		if _, err := s.db.CreateTable(ctx, diffTable(name)); err != nil {
			t.Fatalf("%s: create table: %v", s.name, err)
		}
	}
	t.Cleanup(func() {
		_, _ = local.DynamoDB.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(name)})
	})
	values := map[string]types.AttributeValue{
		"n0": num("0"), "n1": num("1"), "n7": num("7"), "n10": num("10"), "n100": num("100"), "n12": num("12"), "n123": num("123"),
		"n1234": num("1234"), "n12345": num("12345"), "neg": num("-5"), "neg12": num("-12"), "neg123": num("-123"), "frac": num("1.5"),
		"frac2": num("0.25"), "frac3": num("123.456"), "small": num("0.001"), "big": num("1E+20"), "n38": num("12345678901234567890123456789012345678"),
		"str": str("héllo"), "empty": str(""), "bool": &types.AttributeValueMemberBOOL{Value: true},
		"null": &types.AttributeValueMemberNULL{Value: true}, "bin": &types.AttributeValueMemberB{Value: []byte{1, 2, 3}},
		"ss": &types.AttributeValueMemberSS{Value: []string{"a", "bc"}}, "ns": &types.AttributeValueMemberNS{Value: []string{"1", "22", "-3.5"}},
		"bs":   &types.AttributeValueMemberBS{Value: [][]byte{{1}, {2, 3}}},
		"map":  &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"x": num("1"), "yy": str("z")}},
		"list": &types.AttributeValueMemberL{Value: []types.AttributeValue{num("1"), str("ab"), &types.AttributeValueMemberL{}}},
		"emap": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}},
	}
	names := make([]string, 0, len(values))
	for k := range values {
		names = append(names, k)
	}
	sort.Strings(names)
	for i, attr := range names {
		base := map[string]types.AttributeValue{"pk": str("size"), "sk": num(strconv.Itoa(i)), attr: values[attr], "pad": &types.AttributeValueMemberB{Value: []byte{}}}
		pad := 1024 - modelSize(t, base)
		for _, extra := range []int{0, 1} {
			item := map[string]types.AttributeValue{}
			for k, v := range base {
				item[k] = v
			}
			item["pad"] = &types.AttributeValueMemberB{Value: make([]byte, pad+extra)}
			var units [2]float64
			for j, s := range sides {
				out, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(name), Item: item, ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal})
				if err != nil {
					t.Fatalf("%s: put %s: %v", s.name, attr, err)
				}
				units[j] = aws.ToFloat64(out.ConsumedCapacity.CapacityUnits)
			}
			if units[0] != units[1] || units[0] != float64(1+extra) {
				t.Errorf("%s with %d pad bytes (model size %d): local %v units, model %v, want %d", attr, pad+extra, 1024+extra, units[0], units[1], 1+extra)
			}
		}
	}
}

// modelSize is the item's size as the model counts it (ItemSize).
func modelSize(t *testing.T, item map[string]types.AttributeValue) int {
	t.Helper()
	n, err := ddbmodel.ItemSizeOf(item)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }
func num(s string) types.AttributeValue { return &types.AttributeValueMemberN{Value: s} }

// --- requests ---

// diffRequest is one request for both sides.
type diffRequest struct {
	op, describe string
	run          func(ctx context.Context, db *dynamodb.Client) string
}

// gen makes random requests over a small key space, so that writes
// collide and conditions go both ways.
type gen struct {
	r     *rand.Rand
	table string
	seq   int
	now   int64
}

func (g *gen) pick(options ...string) string { return options[g.r.IntN(len(options))] }

func (g *gen) pk() string { return fmt.Sprintf("s%d-p%d", g.seq, g.r.IntN(3)) }
func (g *gen) sk() string { return strconv.Itoa(g.r.IntN(8) - 2) }
func (g *gen) key() map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": str(g.pk()), "sk": num(g.sk())}
}

// gk and hk are index hash keys of this sequence (index partitions do
// not grow across sequences).
func (g *gen) gk() string { return fmt.Sprintf("s%d-g%d", g.seq, 1+g.r.IntN(2)) }
func (g *gen) hk() string { return strconv.Itoa(g.seq*10 + 1 + g.r.IntN(2)) }

func (g *gen) number() string {
	return g.pick("0", "1", "-1", "2", "10", "3.5", "-0.25", "100", "12345678901234567890", "7e3", "0.001")
}

func (g *gen) scalar() types.AttributeValue {
	switch g.r.IntN(5) {
	case 0:
		return str(g.pick("", "a", "ab", "b", "héllo", "zz"))
	case 1:
		return &types.AttributeValueMemberBOOL{Value: g.r.IntN(2) == 0}
	case 2:
		return &types.AttributeValueMemberB{Value: []byte(g.pick("", "x", "xy"))}
	}
	return num(g.number())
}

func (g *gen) value(depth int) types.AttributeValue {
	switch k := g.r.IntN(10); {
	case k < 5 || depth > 1:
		return g.scalar()
	case k == 5:
		return &types.AttributeValueMemberSS{Value: g.set("a", "b", "c", "d")}
	case k == 6:
		return &types.AttributeValueMemberNS{Value: g.set("1", "2", "3.5", "-4")}
	case k == 7:
		return &types.AttributeValueMemberNULL{Value: true}
	case k == 8:
		m := map[string]types.AttributeValue{}
		for range g.r.IntN(3) {
			m[g.pick("x", "y", "z")] = g.value(depth + 1)
		}
		return &types.AttributeValueMemberM{Value: m}
	}
	var l []types.AttributeValue
	for range g.r.IntN(4) {
		l = append(l, g.value(depth+1))
	}
	return &types.AttributeValueMemberL{Value: l}
}

func (g *gen) set(members ...string) []string {
	var out []string
	for _, m := range members {
		if g.r.IntN(2) == 0 {
			out = append(out, m)
		}
	}
	if len(out) == 0 {
		out = members[:1]
	}
	return out
}

// item is a random item; index keys are usually of the right type.
func (g *gen) item() map[string]types.AttributeValue {
	item := g.key()
	for _, a := range []string{"a", "b", "m", "l", "c"} {
		if g.r.IntN(3) > 0 {
			item[a] = g.value(0)
		}
	}
	if g.r.IntN(3) > 0 {
		item["gk"] = str(g.gk())
		if g.r.IntN(20) == 0 {
			item["gk"] = num("1") // wrong type: refused
		}
	}
	if g.r.IntN(3) > 0 {
		item["gs"] = num(g.number())
	}
	if g.r.IntN(4) == 0 {
		item["hk"] = num(g.hk())
	}
	if g.r.IntN(4) == 0 {
		item["ttl"] = num(strconv.FormatInt(g.now+3600+int64(g.r.IntN(100)), 10))
	}
	return item
}

// exprs collects placeholders for one request.
type exprs struct {
	names  map[string]string
	values map[string]types.AttributeValue
}

func newExprs() *exprs {
	return &exprs{names: map[string]string{}, values: map[string]types.AttributeValue{}}
}

func (e *exprs) name(attr string) string {
	p := "#" + attr
	e.names[p] = attr
	return p
}

func (e *exprs) value(v types.AttributeValue) string {
	p := ":v" + strconv.Itoa(len(e.values))
	e.values[p] = v
	return p
}

func (e *exprs) namesOrNil() map[string]string {
	if len(e.names) == 0 {
		return nil
	}
	return e.names
}

func (e *exprs) valuesOrNil() map[string]types.AttributeValue {
	if len(e.values) == 0 {
		return nil
	}
	return e.values
}

// path is a random document path over the item's attributes.
func (g *gen) path(e *exprs) string {
	p := e.name(g.pick("a", "b", "c", "m", "l"))
	switch g.r.IntN(5) {
	case 0:
		p += "." + e.name(g.pick("x", "y"))
	case 1:
		p += "[" + strconv.Itoa(g.r.IntN(3)) + "]"
	}
	return p
}

// condition is a random condition of up to depth levels.
func (g *gen) condition(e *exprs, depth int) string {
	if depth > 0 && g.r.IntN(3) == 0 {
		a, b := g.condition(e, depth-1), g.condition(e, depth-1)
		switch g.r.IntN(4) {
		case 0:
			return a + " AND " + b
		case 1:
			return a + " OR " + b
		case 2:
			return "NOT (" + a + ")"
		}
		return "(" + a + " OR " + b + ") AND " + g.condition(e, 0)
	}
	p := g.path(e)
	switch g.r.IntN(10) {
	case 0:
		return "attribute_exists(" + p + ")"
	case 1:
		return "attribute_not_exists(" + p + ")"
	case 2:
		return "attribute_type(" + p + ", " + e.value(str(g.pick("S", "N", "M", "L", "SS", "BOOL", "NULL"))) + ")"
	case 3:
		return "begins_with(" + p + ", " + e.value(str(g.pick("a", "h", ""))) + ")"
	case 4:
		return "contains(" + p + ", " + e.value(g.scalar()) + ")"
	case 5:
		return "size(" + p + ") " + g.pick("=", "<", ">=") + " " + e.value(num(strconv.Itoa(g.r.IntN(4))))
	case 6:
		return p + " BETWEEN " + e.value(num("0")) + " AND " + e.value(num(g.pick("1", "10", "1000")))
	case 7:
		return p + " IN (" + e.value(g.scalar()) + ", " + e.value(g.scalar()) + ")"
	}
	return p + " " + g.pick("=", "<>", "<", "<=", ">", ">=") + " " + e.value(g.scalar())
}

// update is a random update expression.
func (g *gen) update(e *exprs) string {
	var sets, removes, adds, deletes []string
	used := map[string]bool{}
	for range 1 + g.r.IntN(3) {
		attr := g.pick("a", "b", "c", "m", "l", "n", "s", "gk", "gs", "hk", "ttl")
		if used[attr] {
			continue
		}
		used[attr] = true
		p := e.name(attr)
		switch g.r.IntN(9) {
		case 0:
			removes = append(removes, p)
		case 1:
			adds = append(adds, p+" "+e.value(num(g.number())))
		case 2:
			adds = append(adds, p+" "+e.value(&types.AttributeValueMemberSS{Value: g.set("a", "b", "c")}))
		case 3:
			deletes = append(deletes, p+" "+e.value(&types.AttributeValueMemberSS{Value: g.set("a", "b", "c")}))
		case 4:
			sets = append(sets, p+" = "+p+" "+g.pick("+", "-")+" "+e.value(num(g.number())))
		case 5:
			sets = append(sets, p+" = if_not_exists("+p+", "+e.value(num(g.number()))+")")
		case 6:
			sets = append(sets, p+" = list_append(if_not_exists("+p+", "+e.value(&types.AttributeValueMemberL{})+"), "+
				e.value(&types.AttributeValueMemberL{Value: []types.AttributeValue{g.scalar()}})+")")
		case 7:
			if attr == "m" || attr == "l" {
				sets = append(sets, g.subPath(e, p)+" = "+e.value(g.scalar()))
				continue
			}
			fallthrough
		default:
			v := g.value(0)
			switch attr {
			case "gk":
				v = str(g.gk())
			case "gs", "hk", "ttl":
				v = num(g.pick("1", "2", strconv.FormatInt(g.now+7200, 10)))
			}
			sets = append(sets, p+" = "+e.value(v))
		}
	}
	var parts []string
	for _, c := range []struct {
		kw      string
		actions []string
	}{{"SET", sets}, {"REMOVE", removes}, {"ADD", adds}, {"DELETE", deletes}} {
		if len(c.actions) > 0 {
			parts = append(parts, c.kw+" "+strings.Join(c.actions, ", "))
		}
	}
	g.r.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
	if len(parts) == 0 {
		return "REMOVE " + e.name("zz")
	}
	return strings.Join(parts, " ")
}

func (g *gen) subPath(e *exprs, p string) string {
	if strings.HasSuffix(p, "#m") {
		return p + "." + e.name(g.pick("x", "y"))
	}
	return p + "[" + strconv.Itoa(g.r.IntN(3)) + "]"
}

func (g *gen) projection(e *exprs) *string {
	if g.r.IntN(3) > 0 {
		return nil
	}
	paths := []string{e.name("pk")}
	for range 1 + g.r.IntN(3) {
		p := g.path(e)
		if !slices.Contains(paths, p) {
			paths = append(paths, p)
		}
	}
	// Overlapping paths are refused by both sides alike.
	return aws.String(strings.Join(paths, ", "))
}

func (g *gen) capacity() types.ReturnConsumedCapacity {
	return types.ReturnConsumedCapacity(g.pick("INDEXES", "TOTAL", "NONE"))
}

func (g *gen) request() diffRequest {
	e := newExprs()
	switch k := g.r.IntN(20); {
	case k < 5:
		in := &dynamodb.PutItemInput{TableName: aws.String(g.table), Item: g.item(), ReturnConsumedCapacity: g.capacity(),
			ReturnValues: types.ReturnValue(g.pick("NONE", "ALL_OLD"))}
		if g.r.IntN(2) == 0 {
			in.ConditionExpression = aws.String(g.condition(e, 2))
			in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailure(g.pick("ALL_OLD", "NONE"))
		}
		in.ExpressionAttributeNames, in.ExpressionAttributeValues = e.namesOrNil(), e.valuesOrNil()
		return diffRequest{"PutItem", describe(in), func(ctx context.Context, db *dynamodb.Client) string {
			out, err := db.PutItem(ctx, in)
			return answer(err, func() any { return []any{out.Attributes, out.ConsumedCapacity} })
		}}
	case k < 10:
		in := &dynamodb.UpdateItemInput{TableName: aws.String(g.table), Key: g.key(), ReturnConsumedCapacity: g.capacity(),
			ReturnValues: types.ReturnValue(g.pick("NONE", "ALL_OLD", "ALL_NEW", "UPDATED_OLD", "UPDATED_NEW"))}
		if g.r.IntN(8) > 0 {
			in.UpdateExpression = aws.String(g.update(e))
		}
		if g.r.IntN(2) == 0 {
			in.ConditionExpression = aws.String(g.condition(e, 2))
			in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailure(g.pick("ALL_OLD", "NONE"))
		}
		in.ExpressionAttributeNames, in.ExpressionAttributeValues = e.namesOrNil(), e.valuesOrNil()
		return diffRequest{"UpdateItem", describe(in), func(ctx context.Context, db *dynamodb.Client) string {
			out, err := db.UpdateItem(ctx, in)
			return answer(err, func() any { return []any{out.Attributes, out.ConsumedCapacity} })
		}}
	case k < 11:
		in := &dynamodb.DeleteItemInput{TableName: aws.String(g.table), Key: g.key(), ReturnConsumedCapacity: g.capacity(),
			ReturnValues: types.ReturnValue(g.pick("NONE", "ALL_OLD"))}
		if g.r.IntN(2) == 0 {
			in.ConditionExpression = aws.String(g.condition(e, 1))
		}
		in.ExpressionAttributeNames, in.ExpressionAttributeValues = e.namesOrNil(), e.valuesOrNil()
		return diffRequest{"DeleteItem", describe(in), func(ctx context.Context, db *dynamodb.Client) string {
			out, err := db.DeleteItem(ctx, in)
			return answer(err, func() any {
				if in.ReturnConsumedCapacity == types.ReturnConsumedCapacityNone {
					// DynamoDB Local answers a DeleteItem's capacity even
					// when not asked to; AWS does not.
					out.ConsumedCapacity = nil
				}
				return []any{out.Attributes, out.ConsumedCapacity}
			})
		}}
	case k < 13:
		in := &dynamodb.GetItemInput{TableName: aws.String(g.table), Key: g.key(), ConsistentRead: aws.Bool(g.r.IntN(2) == 0),
			ReturnConsumedCapacity: g.capacity(), ProjectionExpression: g.projection(e)}
		in.ExpressionAttributeNames = e.namesOrNil()
		return diffRequest{"GetItem", describe(in), func(ctx context.Context, db *dynamodb.Client) string {
			out, err := db.GetItem(ctx, in)
			return answer(err, func() any { return []any{out.Item, out.ConsumedCapacity} })
		}}
	case k < 14:
		keys := []map[string]types.AttributeValue{}
		seen := map[string]bool{}
		for range 1 + g.r.IntN(6) {
			k := g.key()
			id := fmt.Sprint(k["pk"], k["sk"])
			if !seen[id] {
				seen[id] = true
				keys = append(keys, k)
			}
		}
		in := &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{g.table: {Keys: keys, ConsistentRead: aws.Bool(g.r.IntN(2) == 0)}},
			ReturnConsumedCapacity: g.capacity()}
		return diffRequest{"BatchGetItem", describe(in), func(ctx context.Context, db *dynamodb.Client) string {
			out, err := db.BatchGetItem(ctx, in)
			return answer(err, func() any {
				items := out.Responses[g.table]
				sorted := make([]string, len(items))
				for i, it := range items {
					sorted[i] = normalize(it)
				}
				sort.Strings(sorted)
				return []any{sorted, len(out.UnprocessedKeys), out.ConsumedCapacity}
			})
		}}
	default:
		return g.query(e)
	}
}

// query is a Query on the table or an index, read page by page to its
// end.
func (g *gen) query(e *exprs) diffRequest {
	in := &dynamodb.QueryInput{TableName: aws.String(g.table), ScanIndexForward: aws.Bool(g.r.IntN(2) == 0), ReturnConsumedCapacity: g.capacity()}
	if g.r.IntN(2) == 0 {
		in.Limit = aws.Int32(int32(1 + g.r.IntN(4)))
	}
	var rangeAttr string
	switch g.r.IntN(3) {
	case 0:
		in.KeyConditionExpression = aws.String(e.name("pk") + " = " + e.value(str(g.pk())))
		rangeAttr = "sk"
		in.ConsistentRead = aws.Bool(g.r.IntN(2) == 0)
	case 1:
		in.IndexName = aws.String("inc")
		in.KeyConditionExpression = aws.String(e.name("gk") + " = " + e.value(str(g.gk())))
		rangeAttr = "gs"
	default:
		in.IndexName = aws.String("keys")
		in.KeyConditionExpression = aws.String(e.name("hk") + " = " + e.value(num(g.hk())))
	}
	if rangeAttr != "" && g.r.IntN(3) > 0 {
		p := e.name(rangeAttr)
		var c string
		switch g.r.IntN(3) {
		case 0:
			c = p + " BETWEEN " + e.value(num("-1")) + " AND " + e.value(num(g.pick("3", "100")))
		default:
			c = p + " " + g.pick("=", "<", "<=", ">", ">=") + " " + e.value(num(g.pick("0", "1", "2", "3.5")))
		}
		if g.r.IntN(2) == 0 {
			*in.KeyConditionExpression = c + " AND " + *in.KeyConditionExpression
		} else {
			*in.KeyConditionExpression += " AND " + c
		}
	}
	if in.IndexName == nil || *in.IndexName == "inc" {
		if g.r.IntN(3) == 0 {
			in.FilterExpression = aws.String(g.condition(e, 1))
		}
		in.ProjectionExpression = g.projection(e)
	}
	if g.r.IntN(8) == 0 {
		in.Select = types.SelectCount
		in.ProjectionExpression = nil
	}
	if g.r.IntN(15) == 0 && in.IndexName != nil {
		in.ConsistentRead = aws.Bool(true) // refused on an index
	}
	in.ExpressionAttributeNames, in.ExpressionAttributeValues = e.namesOrNil(), e.valuesOrNil()
	return diffRequest{"Query", describe(in), func(ctx context.Context, db *dynamodb.Client) string {
		q := *in
		var pages []any
		// Index entries with equal index keys come in an order of each
		// side's own (DynamoDB leaves it undefined): with a limit the
		// pages split them differently, so an index query is compared as
		// its whole result, ties sorted, and its totals. So is a filtered
		// query: DynamoDB Local ends a page whose filter kept nothing
		// without a LastEvaluatedKey even when it stopped at its limit
		// (AWS, and the model, give one).
		paged := in.IndexName != nil && in.Limit != nil || in.FilterExpression != nil
		var all []map[string]types.AttributeValue
		count, scanned, n := int32(0), int32(0), 0
		for range 50 {
			out, err := db.Query(ctx, &q)
			if err != nil {
				return answer(err, nil)
			}
			n++
			all = append(all, out.Items...)
			count, scanned = count+out.Count, scanned+out.ScannedCount
			if !paged {
				items := tiesSorted(out.Items, aws.ToString(in.IndexName))
				lek := normalize(out.LastEvaluatedKey)
				if in.IndexName != nil {
					lek = fmt.Sprint(out.LastEvaluatedKey != nil)
				}
				pages = append(pages, []any{items, out.Count, out.ScannedCount, lek, out.ConsumedCapacity})
			}
			if out.LastEvaluatedKey == nil {
				break
			}
			q.ExclusiveStartKey = out.LastEvaluatedKey
		}
		if paged {
			pages = []any{tiesSorted(all, aws.ToString(in.IndexName)), count}
		}
		return answer(nil, func() any { return pages })
	}}
}

// comparable is an answer without its error message (which differs).
func comparable(answer string) string {
	s, _, _ := strings.Cut(answer, "\x00")
	return s
}

// tiesSorted normalizes items, sorting those with equal index keys.
func tiesSorted(items []map[string]types.AttributeValue, index string) []string {
	keys := map[string][]string{"": {"pk", "sk"}, "inc": {"gk", "gs"}, "keys": {"hk"}}[index]
	out := make([]string, len(items))
	group := make([]string, len(items))
	for i, it := range items {
		out[i] = normalize(it)
		var k []string
		for _, name := range keys {
			k = append(k, normalizeAny(it[name]))
		}
		group[i] = strings.Join(k, "|")
	}
	for start := 0; start < len(out); {
		end := start + 1
		for end < len(out) && group[end] == group[start] {
			end++
		}
		sort.Strings(out[start:end])
		start = end
	}
	return out
}

// answer is a request's normalized outcome: "error <code>" or "ok <json>".
func answer(err error, out func() any) string {
	if err != nil {
		var api smithy.APIError
		if errors.As(err, &api) {
			var ccf *types.ConditionalCheckFailedException
			if errors.As(err, &ccf) {
				return "error " + api.ErrorCode() + " " + normalize(ccf.Item)
			}
			return "error " + api.ErrorCode() + "\x00" + api.ErrorMessage()
		}
		return "error " + err.Error()
	}
	return "ok " + normalizeAny(out())
}

func describe(in any) string {
	b, _ := json.Marshal(sdkJSON(in))
	return string(b)
}

// normalizeAny renders outputs with attribute values in a canonical form
// (sets sorted, maps by key) and capacity as its units.
func normalizeAny(v any) string {
	b, err := json.Marshal(sdkJSON(v))
	if err != nil {
		return "unmarshalable: " + err.Error()
	}
	return string(b)
}

func normalize(item map[string]types.AttributeValue) string {
	if item == nil {
		return "null"
	}
	return normalizeAny(item)
}

// sdkJSON turns SDK values into plain JSON-able values.
func sdkJSON(v any) any {
	switch v := v.(type) {
	case nil:
		return nil
	case map[string]types.AttributeValue:
		out := map[string]any{}
		for k, e := range v {
			out[k] = sdkJSON(e)
		}
		return out
	case *types.AttributeValueMemberS:
		return map[string]any{"S": v.Value}
	case *types.AttributeValueMemberN:
		return map[string]any{"N": canonical(v.Value)}
	case *types.AttributeValueMemberB:
		return map[string]any{"B": v.Value}
	case *types.AttributeValueMemberBOOL:
		return map[string]any{"BOOL": v.Value}
	case *types.AttributeValueMemberNULL:
		return map[string]any{"NULL": v.Value}
	case *types.AttributeValueMemberSS:
		return map[string]any{"SS": sortedCopy(v.Value)}
	case *types.AttributeValueMemberNS:
		ns := make([]string, len(v.Value))
		for i, n := range v.Value {
			ns[i] = canonical(n)
		}
		return map[string]any{"NS": sortedCopy(ns)}
	case *types.AttributeValueMemberBS:
		s := make([]string, len(v.Value))
		for i, b := range v.Value {
			s[i] = string(b)
		}
		return map[string]any{"BS": sortedCopy(s)}
	case *types.AttributeValueMemberM:
		return map[string]any{"M": sdkJSON(v.Value)}
	case *types.AttributeValueMemberL:
		l := make([]any, len(v.Value))
		for i, e := range v.Value {
			l[i] = sdkJSON(e)
		}
		return map[string]any{"L": l}
	case *types.ConsumedCapacity:
		if v == nil {
			return nil
		}
		out := map[string]any{"table": aws.ToString(v.TableName), "units": aws.ToFloat64(v.CapacityUnits)}
		if v.Table != nil {
			out["tableUnits"] = aws.ToFloat64(v.Table.CapacityUnits)
		}
		ix := map[string]float64{}
		for k, c := range v.GlobalSecondaryIndexes {
			ix[k] = aws.ToFloat64(c.CapacityUnits)
		}
		if len(ix) > 0 {
			out["indexes"] = ix
		}
		return out
	case []types.ConsumedCapacity:
		out := make([]any, len(v))
		for i := range v {
			out[i] = sdkJSON(&v[i])
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = sdkJSON(e)
		}
		return out
	case []map[string]types.AttributeValue:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = sdkJSON(e)
		}
		return out
	case map[string]types.KeysAndAttributes:
		out := map[string]any{}
		for k, e := range v {
			out[k] = sdkJSON(e.Keys)
		}
		return out
	case *dynamodb.PutItemInput, *dynamodb.UpdateItemInput, *dynamodb.DeleteItemInput, *dynamodb.GetItemInput, *dynamodb.QueryInput, *dynamodb.BatchGetItemInput:
		return describeInput(v)
	}
	return v
}

// describeInput renders a request's fields for a failure message.
func describeInput(in any) any {
	out := map[string]any{}
	switch in := in.(type) {
	case *dynamodb.PutItemInput:
		out["Item"], out["Cond"], out["RV"] = sdkJSON(in.Item), aws.ToString(in.ConditionExpression), in.ReturnValues
		out["Names"], out["Values"] = in.ExpressionAttributeNames, sdkJSON(in.ExpressionAttributeValues)
	case *dynamodb.UpdateItemInput:
		out["Key"], out["Update"], out["Cond"], out["RV"] = sdkJSON(in.Key), aws.ToString(in.UpdateExpression), aws.ToString(in.ConditionExpression), in.ReturnValues
		out["Names"], out["Values"] = in.ExpressionAttributeNames, sdkJSON(in.ExpressionAttributeValues)
	case *dynamodb.DeleteItemInput:
		out["Key"], out["Cond"], out["RCC"] = sdkJSON(in.Key), aws.ToString(in.ConditionExpression), in.ReturnConsumedCapacity
		out["Names"], out["Values"] = in.ExpressionAttributeNames, sdkJSON(in.ExpressionAttributeValues)
	case *dynamodb.GetItemInput:
		out["Key"], out["Proj"], out["Names"], out["Consistent"] = sdkJSON(in.Key), aws.ToString(in.ProjectionExpression), in.ExpressionAttributeNames, aws.ToBool(in.ConsistentRead)
	case *dynamodb.QueryInput:
		out["Index"], out["Key"], out["Filter"], out["Proj"] = aws.ToString(in.IndexName), aws.ToString(in.KeyConditionExpression), aws.ToString(in.FilterExpression), aws.ToString(in.ProjectionExpression)
		out["Names"], out["Values"], out["Limit"], out["Forward"], out["Select"] = in.ExpressionAttributeNames, sdkJSON(in.ExpressionAttributeValues), aws.ToInt32(in.Limit), aws.ToBool(in.ScanIndexForward), in.Select
	case *dynamodb.BatchGetItemInput:
		out["Items"] = sdkJSON(in.RequestItems)
	}
	return out
}

// canonical is a number's canonical text: DynamoDB Local returns a
// number as it was written ("7e3"), the model in plain form ("7000").
func canonical(n string) string {
	v, err := ddbmodel.FromSDK(num(n))
	if err != nil {
		return n
	}
	return v.S
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	sort.Strings(out)
	return out
}
