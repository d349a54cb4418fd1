package ddbmodel

import (
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// FromSDK converts an SDK attribute value to the model's (numbers in
// canonical form); it fails where DynamoDB would refuse the value.
func FromSDK(v types.AttributeValue) (Value, error) {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return Str(v.Value), nil
	case *types.AttributeValueMemberN:
		n, err := parseNumber(v.Value)
		if err != nil {
			return Value{}, err
		}
		return Value{T: TypeN, S: n.String()}, nil
	case *types.AttributeValueMemberB:
		return Bin(v.Value), nil
	case *types.AttributeValueMemberBOOL:
		return Value{T: TypeBOOL, Bool: v.Value}, nil
	case *types.AttributeValueMemberNULL:
		return Value{T: TypeNULL}, nil
	case *types.AttributeValueMemberSS:
		return Value{T: TypeSS, Set: append([]string(nil), v.Value...)}, nil
	case *types.AttributeValueMemberNS:
		out := Value{T: TypeNS}
		for _, s := range v.Value {
			n, err := parseNumber(s)
			if err != nil {
				return Value{}, err
			}
			out.Set = append(out.Set, n.String())
		}
		return out, nil
	case *types.AttributeValueMemberBS:
		out := Value{T: TypeBS}
		for _, b := range v.Value {
			out.Set = append(out.Set, string(b))
		}
		return out, nil
	case *types.AttributeValueMemberM:
		m, err := ItemFromSDK(v.Value)
		return Value{T: TypeM, M: m}, err
	case *types.AttributeValueMemberL:
		out := Value{T: TypeL, L: make([]Value, len(v.Value))}
		for i, e := range v.Value {
			var err error
			if out.L[i], err = FromSDK(e); err != nil {
				return Value{}, err
			}
		}
		return out, nil
	}
	return Value{}, fmt.Errorf("ddbmodel: unsupported attribute value %T", v)
}

// ItemFromSDK converts an SDK item.
func ItemFromSDK(item map[string]types.AttributeValue) (Item, error) {
	out := make(Item, len(item))
	for k, v := range item {
		mv, err := FromSDK(v)
		if err != nil {
			return nil, err
		}
		out[k] = mv
	}
	return out, nil
}

// ToSDK converts a model value to the SDK's.
func (v Value) ToSDK() types.AttributeValue {
	var a sdkArena
	return a.value(v)
}

// ToSDK converts an item to the SDK's attribute values.
func (item Item) ToSDK() map[string]types.AttributeValue {
	return item.toSDK()
}

func (item Item) toSDK() map[string]types.AttributeValue {
	var a sdkArena
	return a.item(item)
}

// sdkArena allocates the SDK's attribute values of one conversion a
// batch at a time: an item of thirty attributes takes a few allocations,
// not thirty (the direct path converts every item it answers). Each value
// is a value of its own; none is shared with the model or another answer.
type sdkArena struct {
	s []types.AttributeValueMemberS
	n []types.AttributeValueMemberN
	b []types.AttributeValueMemberB
	o []types.AttributeValueMemberBOOL
	m []types.AttributeValueMemberM
}

const arenaBatch = 16

// next returns the next free element of a batch, starting a new batch
// when it is full (the old one stays with the values it holds).
func next[T any](batch *[]T) *T {
	if len(*batch) == cap(*batch) {
		*batch = make([]T, 0, arenaBatch)
	}
	*batch = append(*batch, *new(T))
	return &(*batch)[len(*batch)-1]
}

func (a *sdkArena) item(item Item) map[string]types.AttributeValue {
	out := make(map[string]types.AttributeValue, len(item))
	for k, v := range item {
		out[k] = a.value(v)
	}
	return out
}

func (a *sdkArena) value(v Value) types.AttributeValue {
	switch v.T {
	case TypeS:
		m := next(&a.s)
		m.Value = v.S
		return m
	case TypeN:
		m := next(&a.n)
		m.Value = v.S
		return m
	case TypeB:
		m := next(&a.b)
		m.Value = []byte(v.S)
		return m
	case TypeBOOL:
		m := next(&a.o)
		m.Value = v.Bool
		return m
	case TypeNULL:
		return &types.AttributeValueMemberNULL{Value: true}
	case TypeSS:
		return &types.AttributeValueMemberSS{Value: append([]string(nil), v.Set...)}
	case TypeNS:
		return &types.AttributeValueMemberNS{Value: append([]string(nil), v.Set...)}
	case TypeBS:
		bs := make([][]byte, len(v.Set))
		for i, s := range v.Set {
			bs[i] = []byte(s)
		}
		return &types.AttributeValueMemberBS{Value: bs}
	case TypeM:
		m := next(&a.m)
		m.Value = a.item(v.M)
		return m
	case TypeL:
		l := make([]types.AttributeValue, len(v.L))
		for i, e := range v.L {
			l[i] = a.value(e)
		}
		return &types.AttributeValueMemberL{Value: l}
	}
	return nil
}

// ItemSize is an item's size as DynamoDB counts it against the 400 KB
// limit and bills it: attribute names plus values.
func ItemSize(item Item) int { return itemSize(item) }

// ItemSizeOf is ItemSize of an SDK item.
func ItemSizeOf(item map[string]types.AttributeValue) (int, error) {
	m, err := ItemFromSDK(item)
	return itemSize(m), err
}
