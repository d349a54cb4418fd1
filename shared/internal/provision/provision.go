// Package provision creates, checks and deletes the tables and queues of
// package schema through the AWS SDK. `qasync provision` and the tests use
// it against the local stack; strict startup uses Check* against AWS.
package provision

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/qasync/qasync/shared/schema"
)

// CreateTables creates every table that does not exist yet (on-demand
// billing, GSIs, TTL, stream), waits until each is active, and reports
// which it created. An existing table whose schema has a stream it lacks
// (one provisioned before the history table) gets it.
func CreateTables(ctx context.Context, c *dynamodb.Client, tables []schema.Table) (created []string, err error) {
	for _, t := range tables {
		_, err := c.CreateTable(ctx, createTableInput(t))
		var inUse *ddbtypes.ResourceInUseException
		switch {
		case errors.As(err, &inUse):
			if err := enableStream(ctx, c, t); err != nil {
				return created, err
			}
			continue
		case err != nil:
			return created, fmt.Errorf("provision: create table %s: %w", t.Name, err)
		}
		if err := dynamodb.NewTableExistsWaiter(c).Wait(ctx, &dynamodb.DescribeTableInput{TableName: &t.Name}, 2*time.Minute); err != nil {
			return created, fmt.Errorf("provision: wait for table %s: %w", t.Name, err)
		}
		if t.TTLAttribute != "" {
			if _, err := c.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{TableName: &t.Name,
				TimeToLiveSpecification: &ddbtypes.TimeToLiveSpecification{AttributeName: &t.TTLAttribute, Enabled: aws.Bool(true)}}); err != nil {
				return created, fmt.Errorf("provision: enable TTL on %s: %w", t.Name, err)
			}
		}
		created = append(created, t.Name)
	}
	return created, nil
}

func createTableInput(t schema.Table) *dynamodb.CreateTableInput {
	attrs := map[string]ddbtypes.ScalarAttributeType{}
	key := func(a schema.Attr, kt ddbtypes.KeyType) []ddbtypes.KeySchemaElement {
		if a.Name == "" {
			return nil
		}
		attrs[a.Name] = ddbtypes.ScalarAttributeType(a.Type)
		return []ddbtypes.KeySchemaElement{{AttributeName: aws.String(a.Name), KeyType: kt}}
	}
	in := &dynamodb.CreateTableInput{
		TableName:   aws.String(t.Name),
		BillingMode: ddbtypes.BillingModePayPerRequest,
		KeySchema:   append(key(t.PartitionKey, ddbtypes.KeyTypeHash), key(t.SortKey, ddbtypes.KeyTypeRange)...),
	}
	for _, ix := range t.Indexes {
		in.GlobalSecondaryIndexes = append(in.GlobalSecondaryIndexes, ddbtypes.GlobalSecondaryIndex{
			IndexName: aws.String(ix.Name),
			KeySchema: append(key(ix.PartitionKey, ddbtypes.KeyTypeHash), key(ix.SortKey, ddbtypes.KeyTypeRange)...),
			Projection: &ddbtypes.Projection{
				ProjectionType:   ddbtypes.ProjectionTypeInclude,
				NonKeyAttributes: ix.NonKeyAttributes,
			},
		})
	}
	if t.Stream != "" {
		in.StreamSpecification = streamSpec(t)
	}
	for name, typ := range attrs {
		in.AttributeDefinitions = append(in.AttributeDefinitions, ddbtypes.AttributeDefinition{AttributeName: aws.String(name), AttributeType: typ})
	}
	return in
}

func streamSpec(t schema.Table) *ddbtypes.StreamSpecification {
	return &ddbtypes.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: ddbtypes.StreamViewType(t.Stream)}
}

// hasStream reports whether a described table has the schema's stream.
func hasStream(d *ddbtypes.TableDescription, t schema.Table) bool {
	s := d.StreamSpecification
	return s != nil && aws.ToBool(s.StreamEnabled) && string(s.StreamViewType) == string(t.Stream)
}

// enableStream turns on the schema's stream of an existing table that has
// none, and waits until the table is active again.
func enableStream(ctx context.Context, c *dynamodb.Client, t schema.Table) error {
	if t.Stream == "" {
		return nil
	}
	out, err := c.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(t.Name)})
	if err != nil {
		return fmt.Errorf("provision: describe table %s: %w", t.Name, err)
	}
	if hasStream(out.Table, t) {
		return nil
	}
	if s := out.Table.StreamSpecification; s != nil && aws.ToBool(s.StreamEnabled) {
		return fmt.Errorf("provision: table %s has a %s stream; qasync needs %s (disable the stream, then provision again)", t.Name, s.StreamViewType, t.Stream)
	}
	if _, err := c.UpdateTable(ctx, &dynamodb.UpdateTableInput{TableName: aws.String(t.Name), StreamSpecification: streamSpec(t)}); err != nil {
		return fmt.Errorf("provision: enable the stream of table %s: %w", t.Name, err)
	}
	if err := dynamodb.NewTableExistsWaiter(c).Wait(ctx, &dynamodb.DescribeTableInput{TableName: &t.Name}, 2*time.Minute); err != nil {
		return fmt.Errorf("provision: wait for table %s: %w", t.Name, err)
	}
	return nil
}

// CheckTables verifies that every table exists, is active, and has the
// key schema, indexes and stream the schema defines. Errors name the table.
func CheckTables(ctx context.Context, c *dynamodb.Client, tables []schema.Table) error {
	var errs []error
	for _, t := range tables {
		out, err := c.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(t.Name)})
		if err != nil {
			errs = append(errs, fmt.Errorf("table %s: %w", t.Name, err))
			continue
		}
		d := out.Table
		if d.TableStatus != ddbtypes.TableStatusActive && d.TableStatus != ddbtypes.TableStatusUpdating {
			errs = append(errs, fmt.Errorf("table %s: status %s", t.Name, d.TableStatus))
		}
		want := createTableInput(t)
		if !sameKeys(d.KeySchema, want.KeySchema) {
			errs = append(errs, fmt.Errorf("table %s: key schema differs from the one qasync needs", t.Name))
		}
		if t.Stream != "" && !hasStream(d, t) {
			errs = append(errs, fmt.Errorf("table %s: no %s stream (it feeds the execution history; qasync provision adds it)", t.Name, t.Stream))
		}
		for _, ix := range want.GlobalSecondaryIndexes {
			found := false
			for _, have := range d.GlobalSecondaryIndexes {
				found = found || (aws.ToString(have.IndexName) == aws.ToString(ix.IndexName) && sameKeys(have.KeySchema, ix.KeySchema))
			}
			if !found {
				errs = append(errs, fmt.Errorf("table %s: index %s missing or different", t.Name, aws.ToString(ix.IndexName)))
			}
		}
	}
	return errors.Join(errs...)
}

func sameKeys(a, b []ddbtypes.KeySchemaElement) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if aws.ToString(a[i].AttributeName) != aws.ToString(b[i].AttributeName) || a[i].KeyType != b[i].KeyType {
			return false
		}
	}
	return true
}

// DeleteTables deletes the tables, ignoring ones already gone.
func DeleteTables(ctx context.Context, c *dynamodb.Client, names ...string) error {
	var errs []error
	for _, n := range names {
		_, err := c.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(n)})
		var missing *ddbtypes.ResourceNotFoundException
		if err != nil && !errors.As(err, &missing) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// CreateQueues creates the queues in order (a redrive target before the
// queue that redrives to it) and returns their URLs by name. Creating an
// existing queue with the same attributes is a no-op in SQS.
func CreateQueues(ctx context.Context, c *sqs.Client, queues []schema.Queue) (map[string]string, error) {
	urls := map[string]string{}
	arns := map[string]string{}
	for _, q := range queues {
		attrs := map[string]string{
			string(sqstypes.QueueAttributeNameVisibilityTimeout):      strconv.Itoa(int(q.VisibilityTimeout / time.Second)),
			string(sqstypes.QueueAttributeNameMessageRetentionPeriod): strconv.Itoa(int(q.Retention / time.Second)),
		}
		if q.RedriveTo != "" {
			arn, ok := arns[q.RedriveTo]
			if !ok {
				return urls, fmt.Errorf("provision: queue %s redrives to %s, which must be created first", q.Name, q.RedriveTo)
			}
			attrs[string(sqstypes.QueueAttributeNameRedrivePolicy)] = fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"%d"}`, arn, q.MaxReceiveCount)
		}
		out, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(q.Name), Attributes: attrs})
		if err != nil {
			return urls, fmt.Errorf("provision: create queue %s: %w", q.Name, err)
		}
		urls[q.Name] = aws.ToString(out.QueueUrl)
		got, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: out.QueueUrl,
			AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
		if err != nil {
			return urls, fmt.Errorf("provision: queue %s attributes: %w", q.Name, err)
		}
		arns[q.Name] = got.Attributes[string(sqstypes.QueueAttributeNameQueueArn)]
	}
	return urls, nil
}

// CheckQueue verifies that the queue at url exists.
func CheckQueue(ctx context.Context, c *sqs.Client, url string) error {
	_, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	return err
}

// DeleteQueues deletes the queues at the URLs, ignoring ones already gone.
func DeleteQueues(ctx context.Context, c *sqs.Client, urls ...string) error {
	var errs []error
	for _, u := range urls {
		_, err := c.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(u)})
		var missing *sqstypes.QueueDoesNotExist
		if err != nil && !errors.As(err, &missing) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
