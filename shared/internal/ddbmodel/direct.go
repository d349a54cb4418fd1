package ddbmodel

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/schemas"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/aws/smithy-go/transport/http/protocol/awsjson"

	"github.com/qasync/qasync/shared/internal/awsclient"
)

// The direct path: DirectConfig's DynamoDB clients answer the reads
// (GetItem, BatchGetItem, Query) from the model without the wire. The
// SDK's operation is cut short at the end of its initialize step (after
// the SDK validated the input): the model takes the typed request and
// hands back the typed answer, with no JSON either way, no signing, no
// HTTP. Every other operation goes over the wire as on Config (a read
// with a legacy parameter is refused as over the wire). The answers,
// errors included, are the wire's (TestDirectAgreesWithWire runs the
// differential test's requests both ways): the same lock, the same
// passage of time (TTL deletion), the same fault hook, the same handlers.
//
// The simulator reads the stores through it to check its invariants, a
// read of every live execution every few virtual minutes, which over the
// wire cost more than all the runtime's own requests; the runtime's
// requests go over the wire.

// DirectConfig is Config with the direct path for reads.
func (m *Model) DirectConfig() aws.Config {
	cfg := m.Config()
	cfg.APIOptions = append(cfg.APIOptions, func(s *middleware.Stack) error {
		return s.Initialize.Add(middleware.InitializeMiddlewareFunc("ddbmodel.Direct", m.direct), middleware.After)
	})
	return cfg
}

// DirectClients are Clients on DirectConfig.
func (m *Model) DirectClients() awsclient.Clients {
	return awsclient.FromConfig(m.DirectConfig())
}

// direct answers the reads it knows from the model and passes any other
// request on to the wire.
func (m *Model) direct(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
	var req directRequest
	switch p := in.Parameters.(type) {
	case *dynamodb.GetItemInput:
		req = directGetItem(p)
	case *dynamodb.BatchGetItemInput:
		req = directBatchGetItem(p)
	case *dynamodb.QueryInput:
		req = directQuery(p)
	}
	if req.op == "" {
		return next.HandleInitialize(ctx, in)
	}
	out, err := m.serveDirect(ctx, req)
	return middleware.InitializeOutput{Result: out}, middleware.Metadata{}, err
}

// directRequest is one read for the direct path: its operation, the
// model's input (nil when the typed input could not be converted: decode
// holds the error the wire's decoding would answer), how to run it and
// how to turn the model's answer into the SDK's output.
type directRequest struct {
	op     string
	tables func(*Model) []string
	input  any
	decode error
	run    func(*Model) (any, error)
	output func(*Model, map[string]any) any
}

// serveDirect runs one read as Serve does, and answers the SDK's output
// or the error the SDK would have made of the wire's answer.
func (m *Model) serveDirect(ctx context.Context, req directRequest) (any, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests++
	id := fmt.Sprintf("MODEL%020d", m.requests)
	if req.decode != nil {
		return nil, wireError(ctx, req.decode, id)
	}
	m.tick()
	var fault Fault
	if m.opts.Fault != nil {
		fault = m.opts.Fault(Request{Op: req.op, Tables: req.tables(m), Input: req.input})
	}
	if fault.Err != nil && !fault.AfterApply {
		return nil, wireError(ctx, fault.Err, id)
	}
	out, err := req.run(m)
	if fault.Err != nil {
		return nil, wireError(ctx, fault.Err, id)
	}
	if err != nil {
		return nil, wireError(ctx, err, id)
	}
	return req.output(m, out.(map[string]any)), nil
}

// errorProtocol decodes the model's error answers as the DynamoDB client
// does.
var errorProtocol = awsjson.New10(schemas.DynamoDB_20120810)

// wireError is the error the SDK returns for the model's error err: an
// *Error as the client decodes DynamoDB's error answer (its typed
// exception, wrapped with the response), any other as a failed send.
func wireError(ctx context.Context, err error, requestID string) error {
	status, body, terr := answerError(err)
	if terr != nil {
		return &smithyhttp.RequestSendError{Err: terr}
	}
	h := http.Header{}
	h.Set("Content-Type", "application/x-amz-json-1.0")
	h.Set("X-Amzn-Requestid", requestID)
	resp := &smithyhttp.Response{Response: &http.Response{
		Status: strconv.Itoa(status) + " " + http.StatusText(status), StatusCode: status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h,
		Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)),
	}}
	apiErr := errorProtocol.DeserializeResponse(ctx, nil, dynamodb.TypeRegistry, resp, nil)
	return &awshttp.ResponseError{ResponseError: &smithyhttp.ResponseError{Response: resp, Err: apiErr}, RequestID: requestID}
}

// present marks a legacy parameter the request carries (the model
// refuses them, as over the wire).
var present = json.RawMessage(`"present"`)

func directGetItem(p *dynamodb.GetItemInput) directRequest {
	in := &GetItemInput{TableName: aws.ToString(p.TableName), ConsistentRead: aws.ToBool(p.ConsistentRead),
		ProjectionExpression: p.ProjectionExpression, ReturnConsumedCapacity: string(p.ReturnConsumedCapacity)}
	in.ExpressionAttributeNames = p.ExpressionAttributeNames
	if p.AttributesToGet != nil {
		in.AttributesToGet = present
	}
	var err error
	in.Key, err = itemFromSDK(p.Key)
	return directRequest{
		op: "GetItem", input: in, decode: err,
		tables: func(*Model) []string { return one(in.TableName) },
		run:    func(m *Model) (any, error) { return m.getItem(in) },
		output: func(m *Model, out map[string]any) any {
			o := &dynamodb.GetItemOutput{ConsumedCapacity: capacityToSDK(out["ConsumedCapacity"])}
			if item, ok := out["Item"].(Item); ok {
				o.Item = m.sdkOf(in.TableName, item)
			}
			return o
		},
	}
}

func directBatchGetItem(p *dynamodb.BatchGetItemInput) directRequest {
	in := &BatchGetItemInput{ReturnConsumedCapacity: string(p.ReturnConsumedCapacity)}
	var err error
	if p.RequestItems != nil {
		in.RequestItems = make(map[string]KeysAndAttributes, len(p.RequestItems))
	}
	for name, ka := range p.RequestItems {
		k := KeysAndAttributes{ConsistentRead: aws.ToBool(ka.ConsistentRead), ProjectionExpression: ka.ProjectionExpression,
			ExpressionAttributeNames: ka.ExpressionAttributeNames}
		if ka.AttributesToGet != nil {
			k.AttributesToGet = present
		}
		if ka.Keys != nil {
			k.Keys = make([]Item, len(ka.Keys))
		}
		for i, key := range ka.Keys {
			var kerr error
			if k.Keys[i], kerr = itemFromSDK(key); kerr != nil && err == nil {
				err = kerr
			}
		}
		in.RequestItems[name] = k
	}
	return directRequest{
		op: "BatchGetItem", input: in, decode: err,
		tables: func(*Model) []string { return sortedNames(in.RequestItems) },
		run:    func(m *Model) (any, error) { return m.batchGetItem(in) },
		output: func(m *Model, out map[string]any) any {
			o := &dynamodb.BatchGetItemOutput{Responses: map[string][]map[string]types.AttributeValue{},
				UnprocessedKeys: map[string]types.KeysAndAttributes{}}
			for name, items := range out["Responses"].(map[string][]Item) {
				o.Responses[name] = m.itemsToSDK(name, items)
			}
			if cs, ok := out["ConsumedCapacity"].([]*consumedCapacity); ok {
				o.ConsumedCapacity = make([]types.ConsumedCapacity, len(cs))
				for i, c := range cs {
					o.ConsumedCapacity[i] = *capacityToSDK(c)
				}
			}
			return o
		},
	}
}

func directQuery(p *dynamodb.QueryInput) directRequest {
	in := &QueryInput{TableName: aws.ToString(p.TableName), IndexName: p.IndexName, KeyConditionExpression: p.KeyConditionExpression,
		FilterExpression: p.FilterExpression, ProjectionExpression: p.ProjectionExpression, Select: string(p.Select),
		ScanIndexForward: p.ScanIndexForward, ConsistentRead: aws.ToBool(p.ConsistentRead), ReturnConsumedCapacity: string(p.ReturnConsumedCapacity)}
	if p.Limit != nil {
		limit := int(*p.Limit)
		in.Limit = &limit
	}
	if p.AttributesToGet != nil {
		in.AttributesToGet = present
	}
	if p.KeyConditions != nil {
		in.KeyConditions = present
	}
	if p.QueryFilter != nil {
		in.QueryFilter = present
	}
	if p.ConditionalOperator != "" {
		in.ConditionalOperator = present
	}
	in.ExpressionAttributeNames = p.ExpressionAttributeNames
	var err, verr error
	if p.ExpressionAttributeValues != nil {
		in.ExpressionAttributeValues, verr = itemFromSDK(p.ExpressionAttributeValues)
	}
	in.ExclusiveStartKey, err = itemFromSDK(p.ExclusiveStartKey)
	if err == nil {
		err = verr
	}
	return directRequest{
		op: "Query", input: in, decode: err,
		tables: func(*Model) []string { return one(in.TableName) },
		run:    func(m *Model) (any, error) { return m.query(in) },
		output: func(m *Model, out map[string]any) any {
			o := &dynamodb.QueryOutput{Count: int32(out["Count"].(int)), ScannedCount: int32(out["ScannedCount"].(int)),
				ConsumedCapacity: capacityToSDK(out["ConsumedCapacity"])}
			if items, ok := out["Items"].([]Item); ok {
				o.Items = m.itemsToSDK(in.TableName, items)
			}
			if k, ok := out["LastEvaluatedKey"].(Item); ok {
				o.LastEvaluatedKey = k.toSDK()
			}
			return o
		},
	}
}

// itemFromSDK converts an SDK item (nil stays nil) and validates its
// values as the wire's decoding does.
func itemFromSDK(item map[string]types.AttributeValue) (Item, error) {
	if item == nil {
		return nil, nil
	}
	out, err := ItemFromSDK(item)
	if err != nil {
		return nil, err
	}
	for _, v := range out {
		if err := v.checkSets(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// checkSets refuses an empty set or one with a member twice, at any
// depth (UnmarshalJSON's checks, which FromSDK leaves out).
func (v Value) checkSets() error {
	switch {
	case v.T.isSet():
		return checkSet(v.T, v.Set)
	case v.T == TypeM:
		for _, e := range v.M {
			if err := e.checkSets(); err != nil {
				return err
			}
		}
	case v.T == TypeL:
		for _, e := range v.L {
			if err := e.checkSets(); err != nil {
				return err
			}
		}
	}
	return nil
}

// itemsToSDK converts the items of an answer from the named table.
func (m *Model) itemsToSDK(tableName string, items []Item) []map[string]types.AttributeValue {
	out := make([]map[string]types.AttributeValue, len(items))
	for i, item := range items {
		out[i] = m.sdkOf(tableName, item)
	}
	return out
}

// sdkOf converts an item of an answer from the named table. A stored
// item answered whole (no projection, or an index that projects all)
// keeps its SDK form on its record, converted at its first read: each
// answer gets its own maps and lists, sharing their members (a member's
// string, number or bytes: readers read them, none writes into them).
// The audits read the same unchanged rows again and again: a read then
// copies the item's structure instead of converting it. Callers hold
// m.mu.
func (m *Model) sdkOf(tableName string, item Item) map[string]types.AttributeValue {
	if t := m.tables[tableName]; t != nil && item != nil {
		if r := t.items[t.primaryKey(item)]; r != nil && sameItem(r.item, item) {
			if r.sdk == nil {
				r.sdk = item.toSDK()
			}
			return copySDK(r.sdk)
		}
	}
	return item.toSDK()
}

func sameItem(a, b Item) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// copySDK copies an SDK item's maps and lists, sharing their members.
func copySDK(item map[string]types.AttributeValue) map[string]types.AttributeValue {
	out := maps.Clone(item)
	for k, v := range out {
		switch v := v.(type) {
		case *types.AttributeValueMemberM:
			out[k] = &types.AttributeValueMemberM{Value: copySDK(v.Value)}
		case *types.AttributeValueMemberL:
			out[k] = copySDKList(v)
		case *types.AttributeValueMemberSS:
			out[k] = &types.AttributeValueMemberSS{Value: slices.Clone(v.Value)}
		case *types.AttributeValueMemberNS:
			out[k] = &types.AttributeValueMemberNS{Value: slices.Clone(v.Value)}
		case *types.AttributeValueMemberBS:
			out[k] = &types.AttributeValueMemberBS{Value: slices.Clone(v.Value)}
		}
	}
	return out
}

func copySDKList(l *types.AttributeValueMemberL) *types.AttributeValueMemberL {
	out := slices.Clone(l.Value)
	for i, v := range out {
		switch v := v.(type) {
		case *types.AttributeValueMemberM:
			out[i] = &types.AttributeValueMemberM{Value: copySDK(v.Value)}
		case *types.AttributeValueMemberL:
			out[i] = copySDKList(v)
		}
	}
	return &types.AttributeValueMemberL{Value: out}
}

// capacityToSDK converts a consumed capacity (nil when none).
func capacityToSDK(c any) *types.ConsumedCapacity {
	cc, ok := c.(*consumedCapacity)
	if !ok || cc == nil {
		return nil
	}
	out := &types.ConsumedCapacity{TableName: aws.String(cc.TableName), CapacityUnits: aws.Float64(cc.CapacityUnits)}
	if cc.Table != nil {
		out.Table = &types.Capacity{CapacityUnits: aws.Float64(cc.Table.CapacityUnits)}
	}
	if cc.GlobalSecondaryIndexes != nil {
		out.GlobalSecondaryIndexes = make(map[string]types.Capacity, len(cc.GlobalSecondaryIndexes))
		for k, v := range cc.GlobalSecondaryIndexes {
			out.GlobalSecondaryIndexes[k] = types.Capacity{CapacityUnits: aws.Float64(v.CapacityUnits)}
		}
	}
	return out
}
