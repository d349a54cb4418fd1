package ddbmodel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/qasync/qasync/shared/internal/awsclient"
)

// Endpoint is the base endpoint of the model's clients. Nothing ever
// connects to it (the model is the transport); the .invalid name never
// resolves, so a client that bypassed the model would fail.
const Endpoint = "http://ddbmodel.invalid"

// handler runs one operation.
type handler struct {
	decode func([]byte) (any, error)
	run    func(*Model, any) (any, error)
	tables func(*Model, any) []string
}

// op builds a handler from an operation's typed function.
func op[T any](run func(*Model, *T) (any, error), tables func(*Model, *T) []string) handler {
	return handler{
		decode: func(body []byte) (any, error) {
			in := new(T)
			if len(bytes.TrimSpace(body)) == 0 {
				return in, nil
			}
			if err := json.Unmarshal(body, in); err != nil {
				var e *Error
				if errors.As(err, &e) {
					return nil, e
				}
				return nil, clientError("SerializationException", "%v", err)
			}
			return in, nil
		},
		run:    func(m *Model, in any) (any, error) { return run(m, in.(*T)) },
		tables: func(m *Model, in any) []string { return tables(m, in.(*T)) },
	}
}

func one(name string) []string { return []string{name} }

// streamTable is the table of a stream ARN (…:table/NAME/stream/LABEL).
func streamTable(arn string) []string {
	_, rest, ok := strings.Cut(arn, ":table/")
	if !ok {
		return nil
	}
	name, _, _ := strings.Cut(rest, "/stream/")
	return one(name)
}

var handlers = map[string]handler{
	"DynamoDB_20120810.PutItem":    op((*Model).putItem, func(_ *Model, in *PutItemInput) []string { return one(in.TableName) }),
	"DynamoDB_20120810.GetItem":    op((*Model).getItem, func(_ *Model, in *GetItemInput) []string { return one(in.TableName) }),
	"DynamoDB_20120810.UpdateItem": op((*Model).updateItem, func(_ *Model, in *UpdateItemInput) []string { return one(in.TableName) }),
	"DynamoDB_20120810.DeleteItem": op((*Model).deleteItem, func(_ *Model, in *DeleteItemInput) []string { return one(in.TableName) }),
	"DynamoDB_20120810.Query":      op((*Model).query, func(_ *Model, in *QueryInput) []string { return one(in.TableName) }),
	"DynamoDB_20120810.Scan":       op((*Model).scan, func(_ *Model, in *ScanInput) []string { return one(in.TableName) }),
	"DynamoDB_20120810.BatchGetItem": op((*Model).batchGetItem, func(_ *Model, in *BatchGetItemInput) []string {
		return sortedNames(in.RequestItems)
	}),
	"DynamoDB_20120810.BatchWriteItem": op((*Model).batchWriteItem, func(_ *Model, in *BatchWriteItemInput) []string {
		return sortedNames(in.RequestItems)
	}),
	"DynamoDB_20120810.CreateTable":        op((*Model).createTable, func(_ *Model, in *CreateTableInput) []string { return one(in.TableName) }),
	"DynamoDB_20120810.DeleteTable":        op((*Model).deleteTable, func(_ *Model, in *TableNameInput) []string { return one(in.TableName) }),
	"DynamoDB_20120810.DescribeTable":      op((*Model).describeTable, func(_ *Model, in *TableNameInput) []string { return one(in.TableName) }),
	"DynamoDB_20120810.UpdateTable":        op((*Model).updateTable, func(_ *Model, in *UpdateTableInput) []string { return one(in.TableName) }),
	"DynamoDB_20120810.ListTables":         op((*Model).listTables, func(*Model, *ListTablesInput) []string { return nil }),
	"DynamoDB_20120810.UpdateTimeToLive":   op((*Model).updateTimeToLive, func(_ *Model, in *UpdateTimeToLiveInput) []string { return one(in.TableName) }),
	"DynamoDB_20120810.DescribeTimeToLive": op((*Model).describeTimeToLive, func(_ *Model, in *TableNameInput) []string { return one(in.TableName) }),
	"DynamoDBStreams_20120810.DescribeStream": op((*Model).describeStream, func(_ *Model, in *DescribeStreamInput) []string {
		return streamTable(in.StreamArn)
	}),
	"DynamoDBStreams_20120810.ListStreams": op((*Model).listStreams, func(_ *Model, in *ListStreamsInput) []string {
		if in.TableName != nil {
			return one(*in.TableName)
		}
		return nil
	}),
	"DynamoDBStreams_20120810.GetShardIterator": op((*Model).getShardIterator, func(_ *Model, in *GetShardIteratorInput) []string {
		return streamTable(in.StreamArn)
	}),
	"DynamoDBStreams_20120810.GetRecords": op((*Model).getRecords, func(_ *Model, in *GetRecordsInput) []string {
		it, err := decodeIterator(in.ShardIterator)
		if err != nil {
			return nil
		}
		return streamTable(it.arn)
	}),
}

// RoundTrip serves one SDK request synchronously: the model is the
// clients' transport (http.RoundTripper).
func (m *Model) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
	}
	status, out, err := m.Serve(req.Header.Get("X-Amz-Target"), body)
	if err != nil {
		return nil, err
	}
	return response(req, status, out, m.requestID()), nil
}

// Do is RoundTrip: the model is also an aws.HTTPClient, so that no
// http.Client (and none of its goroutines) stands between.
func (m *Model) Do(req *http.Request) (*http.Response, error) { return m.RoundTrip(req) }

func (m *Model) requestID() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests++
	return fmt.Sprintf("MODEL%020d", m.requests)
}

// Serve runs one request given its X-Amz-Target and JSON body and
// returns the HTTP status and the JSON answer. An error is a transport
// failure the fault hook chose (no answer at all).
func (m *Model) Serve(target string, body []byte) (int, []byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h, ok := handlers[target]
	if !ok {
		return answerError(clientError("UnknownOperationException", "Unknown operation %s", target))
	}
	in, err := h.decode(body)
	if err != nil {
		return answerError(err)
	}
	m.tick()
	var fault Fault
	if m.opts.Fault != nil {
		_, name, _ := strings.Cut(target, ".")
		fault = m.opts.Fault(Request{Op: name, Tables: h.tables(m, in), Input: in})
	}
	if fault.Err != nil && !fault.AfterApply {
		return answerError(fault.Err)
	}
	out, err := h.run(m, in)
	if fault.Err != nil {
		return answerError(fault.Err)
	}
	if err != nil {
		return answerError(err)
	}
	var b bytes.Buffer
	if merr := encodeAnswer(&b, out); merr != nil {
		return answerError(&Error{Code: "InternalServerError", Message: merr.Error(), Status: http.StatusInternalServerError})
	}
	return http.StatusOK, b.Bytes(), nil
}

// answerError turns an error into DynamoDB's error answer; an error that
// is not an *Error is a transport failure.
func answerError(err error) (int, []byte, error) {
	var e *Error
	if !errors.As(err, &e) {
		return 0, nil, err
	}
	b, merr := json.Marshal(e.body())
	if merr != nil {
		return 0, nil, merr
	}
	return e.Status, b, nil
}

func response(req *http.Request, status int, body []byte, id string) *http.Response {
	h := http.Header{}
	h.Set("Content-Type", "application/x-amz-json-1.0")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Amzn-Requestid", id)
	h.Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10))
	return &http.Response{
		Status: fmt.Sprintf("%d %s", status, http.StatusText(status)), StatusCode: status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h,
		Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)), Request: req,
	}
}

// Config is an aws.Config whose DynamoDB and DynamoDB Streams clients
// reach the model: static credentials, the model's region, the model as
// HTTP client, and no retries (the simulator injects faults itself and
// must stay deterministic).
func (m *Model) Config() aws.Config {
	return aws.Config{
		Region: m.opts.Region,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "ddbmodel", SecretAccessKey: "ddbmodel", Source: "ddbmodel"}, nil
		}),
		HTTPClient:       m,
		Retryer:          func() aws.Retryer { return aws.NopRetryer{} },
		RetryMaxAttempts: 1,
		BaseEndpoint:     aws.String(Endpoint),
	}
}

// Clients are the project's SDK clients on Config: DynamoDB and
// DynamoDB Streams reach the model (the others reach nothing).
func (m *Model) Clients() awsclient.Clients {
	return awsclient.FromConfig(m.Config())
}
