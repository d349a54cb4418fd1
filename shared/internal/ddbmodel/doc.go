// Package ddbmodel is an in-process, deterministic model of the part of
// DynamoDB and DynamoDB Streams that qasync uses, served to the real AWS
// SDK clients through an http.RoundTripper (Model.Config, Model.Clients):
// requests are answered synchronously in the calling goroutine, with no
// sockets, no goroutines of its own and no wall clock (time is
// Options.Clock), so that a deterministic simulator can run the real
// DynamoDB adapter (package dynamo) against it. The same inputs and the
// same clock give the same answers byte for byte. DirectConfig and
// DirectClients answer the reads (GetItem, BatchGetItem, Query) without
// the wire, with the same answers: for a simulator's own frequent reads.
//
// It speaks the JSON 1.0 protocol (X-Amz-Target DynamoDB_20120810.<Op> and
// DynamoDBStreams_20120810.<Op>) and answers errors as AWS does (a __type
// and a message, 400 for client errors, 500 for server errors), so the
// SDK decodes its typed errors.
//
// Modelled: tables with a hash or hash-and-range key and global secondary
// indexes (KEYS_ONLY, INCLUDE, ALL projections); CreateTable, DeleteTable,
// DescribeTable, UpdateTable (streams), ListTables, UpdateTimeToLive,
// DescribeTimeToLive; PutItem, GetItem, UpdateItem, DeleteItem,
// BatchGetItem, BatchWriteItem, Query and Scan with the full expression
// grammar (conditions, filters, key conditions, updates, projections,
// document paths, placeholders); ReturnValues,
// ReturnValuesOnConditionCheckFailure and ReturnConsumedCapacity with
// DynamoDB's unit arithmetic; the 400 KB item limit and key validation;
// TTL deletion after a per-item lag, with its service REMOVE record;
// streams (DescribeStream, GetShardIterator, GetRecords, ListStreams) with
// shard rollover, 24-hour trimming and 15-minute iterator expiry; a fault
// hook (Options.Fault) for the simulator to refuse a request or lose its
// answer; and introspection (Count, Dump).
//
// Left out: local secondary indexes, TransactWriteItems and
// TransactGetItems, PartiQL, the legacy parameters (Expected,
// AttributeUpdates, KeyConditions, QueryFilter, ScanFilter,
// AttributesToGet, ConditionalOperator), parallel Scan segments, tags,
// backups, global tables, provisioned throughput limits (the fault hook
// throttles instead), item collection metrics and the list of reserved
// words (the model accepts a reserved word used as a bare attribute name,
// which AWS refuses; qasync names every attribute through a placeholder).
// Index creation through UpdateTable is refused.
package ddbmodel
