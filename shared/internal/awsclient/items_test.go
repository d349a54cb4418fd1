package awsclient

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func TestPeakInWindow(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	at := func(ms ...int) []time.Time {
		out := make([]time.Time, len(ms))
		for i, m := range ms {
			out[i] = t0.Add(time.Duration(m) * time.Millisecond)
		}
		return out
	}
	for _, c := range []struct {
		name  string
		times []time.Time
		want  int
	}{
		{"none", nil, 0},
		{"one", at(5), 1},
		{"a second apart fall in two windows", at(0, 1000), 1},
		{"just under a second share one", at(0, 999), 2},
		{"unsorted", at(2500, 100, 2000, 300, 2900, 2100), 4},
		{"a burst inside a long run", at(0, 1500, 1600, 1700, 1800, 4000), 4},
	} {
		if got := PeakInWindow(c.times, time.Second); got != c.want {
			t.Errorf("%s: PeakInWindow = %d, want %d", c.name, got, c.want)
		}
	}
}

// TestItemMeterNamesTheItem: each kind of write call is recorded per item
// with the item's key, a PutItem's key told from the table's key names.
func TestItemMeterNamesTheItem(t *testing.T) {
	m := NewItemMeter()
	m.SetKeys("exec", "pk")
	m.SetKeys("parts", "id", "part")
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	n := func(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }
	for _, c := range []struct {
		call any
		want []ItemWrite
	}{
		{&dynamodb.PutItemInput{TableName: aws.String("exec"), Item: map[string]types.AttributeValue{"pk": s("t#1"), "v": n("3")}},
			[]ItemWrite{{Table: "exec", Key: "pk=t#1"}}},
		{&dynamodb.PutItemInput{TableName: aws.String("other"), Item: map[string]types.AttributeValue{"k": s("x")}},
			[]ItemWrite{{Table: "other"}}},
		{&dynamodb.UpdateItemInput{TableName: aws.String("parts"), Key: map[string]types.AttributeValue{"part": n("2"), "id": s("p")}},
			[]ItemWrite{{Table: "parts", Key: "id=p,part=2"}}},
		{&dynamodb.DeleteItemInput{TableName: aws.String("exec"), Key: map[string]types.AttributeValue{"pk": s("t#2")}},
			[]ItemWrite{{Table: "exec", Key: "pk=t#2"}}},
		{&dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{"parts": {
			{PutRequest: &types.PutRequest{Item: map[string]types.AttributeValue{"id": s("p"), "part": n("0"), "data": s("…")}}},
			{DeleteRequest: &types.DeleteRequest{Key: map[string]types.AttributeValue{"id": s("p"), "part": n("1")}}},
		}}}, []ItemWrite{{Table: "parts", Key: "id=p,part=0"}, {Table: "parts", Key: "id=p,part=1"}}},
		{&dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
			{Update: &types.Update{TableName: aws.String("exec"), Key: map[string]types.AttributeValue{"pk": s("t#1")}}},
			{ConditionCheck: &types.ConditionCheck{TableName: aws.String("exec"), Key: map[string]types.AttributeValue{"pk": s("t#3")}}},
		}}, []ItemWrite{{Table: "exec", Key: "pk=t#1"}, {Table: "exec", Key: "pk=t#3"}}},
		{&dynamodb.GetItemInput{TableName: aws.String("exec"), Key: map[string]types.AttributeValue{"pk": s("t#1")}}, nil},
	} {
		got := m.itemsOf(c.call)
		if len(got) != len(c.want) {
			t.Errorf("%T: items %+v, want %+v", c.call, got, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%T: item %d = %+v, want %+v", c.call, i, got[i], c.want[i])
			}
		}
	}
}

// TestLoadsPerItem: writes are grouped per item, with their refusals,
// units, span and busiest window, the busiest item first.
func TestLoadsPerItem(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	w := func(key string, ms int, units float64, refused bool) ItemWrite {
		return ItemWrite{Table: "exec", Key: key, At: t0.Add(time.Duration(ms) * time.Millisecond), Units: units, Refused: refused}
	}
	loads := Loads([]ItemWrite{
		w("pk=a", 0, 1, false), w("pk=b", 100, 1, false), w("pk=b", 200, 2, false),
		w("pk=b", 300, 0, true), w("pk=a", 5000, 1, false),
	}, time.Second)
	if len(loads) != 2 {
		t.Fatalf("loads %+v, want two items", loads)
	}
	b, a := loads[0], loads[1]
	if b.Key != "pk=b" || b.Writes != 3 || b.Refused != 1 || b.Units != 3 || b.MaxUnits != 2 || b.PeakWrites != 3 ||
		!b.First.Equal(t0.Add(100*time.Millisecond)) || !b.Last.Equal(t0.Add(300*time.Millisecond)) {
		t.Errorf("busiest item %+v, want pk=b: 3 writes (1 refused), 3 units (at most 2 in one), 3 in its peak second", b)
	}
	if a.Key != "pk=a" || a.Writes != 2 || a.PeakWrites != 1 {
		t.Errorf("second item %+v, want pk=a: 2 writes 5 s apart, 1 in its peak second", a)
	}
}
