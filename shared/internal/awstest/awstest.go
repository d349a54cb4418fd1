// Package awstest connects tests to the local AWS stack (DynamoDB Local and
// the SQS server that scripts/stack.sh starts) and gives each test its own
// uniquely named tables and queues, deleted when it ends, so that tests run
// in parallel.
//
// Without the stack's environment (AWS_ENDPOINT_URL_DYNAMODB and
// AWS_ENDPOINT_URL_SQS) tests skip, unless QASYNC_REQUIRE_STACK=1 or CI is
// set, in which case they fail: `make test` always runs them.
package awstest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/qasync/qasync/shared/internal/awsclient"
	"github.com/qasync/qasync/shared/internal/provision"
	"github.com/qasync/qasync/shared/schema"
)

// Clients returns SDK clients for the local stack with a request counter
// installed, or skips the test when no stack is configured.
func Clients(t testing.TB) (awsclient.Clients, *awsclient.Counter) {
	t.Helper()
	Require(t)
	counter := awsclient.NewCounter()
	c, err := awsclient.Load(context.Background(), counter.APIOption)
	if err != nil {
		t.Fatalf("awstest: load AWS config: %v", err)
	}
	return c, counter
}

// Require skips the test unless the local stack is configured (or fails
// it when the stack is required).
func Require(t testing.TB) {
	t.Helper()
	if os.Getenv("AWS_ENDPOINT_URL_DYNAMODB") != "" && os.Getenv("AWS_ENDPOINT_URL_SQS") != "" {
		if !awsclient.IsLoopback(os.Getenv("AWS_ENDPOINT_URL_DYNAMODB")) || !awsclient.IsLoopback(os.Getenv("AWS_ENDPOINT_URL_SQS")) {
			t.Fatal("awstest: refusing to run tests against a non-loopback AWS endpoint")
		}
		return
	}
	if os.Getenv("QASYNC_REQUIRE_STACK") == "1" || os.Getenv("CI") != "" {
		t.Fatal("awstest: the local AWS stack is required: run through `make test` or `scripts/stack.sh run go test ...`")
	}
	t.Skip("local AWS stack not configured (scripts/stack.sh run go test ... runs these tests)")
}

var unsafe = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// Name returns a name unique to this test run: prefix, a slug of the test
// name and a random suffix, within SQS's 80-character limit.
func Name(t testing.TB, prefix string) string {
	slug := strings.Trim(unsafe.ReplaceAllString(t.Name(), "-"), "-")
	if len(slug) > 40 {
		slug = slug[len(slug)-40:]
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + slug + "-" + hex.EncodeToString(b[:])
}

// Names returns a fresh set of table and queue names for one test.
func Names(t testing.TB) schema.Names {
	base := Name(t, "t")
	return schema.Names{
		ExecutionTable: base + "-exec", PayloadTable: base + "-payload", DeadLetterTable: base + "-dl",
		EffectTable: base + "-fx", HistoryTable: base + "-hist",
		WorkQueue: base + "-work", UrgentQueue: base + "-urgent", PoisonQueue: base + "-poison", DLQQueue: base + "-dlq",
		RejectQueue: base + "-rej", HistoryFailureQueue: base + "-histfail",
	}
}

// Tables creates the tables and deletes them when the test ends.
func Tables(t testing.TB, c awsclient.Clients, tables ...schema.Table) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	names := make([]string, len(tables))
	for i, tb := range tables {
		names[i] = tb.Name
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := provision.DeleteTables(ctx, c.DynamoDB, names...); err != nil {
			t.Errorf("awstest: delete tables: %v", err)
		}
	})
	if _, err := provision.CreateTables(ctx, c.DynamoDB, tables); err != nil {
		t.Fatalf("awstest: %v", err)
	}
}

// Queues creates the queues, returns their URLs by name, and deletes them
// when the test ends.
func Queues(t testing.TB, c awsclient.Clients, queues ...schema.Queue) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	urls, err := provision.CreateQueues(ctx, c.SQS, queues)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		all := make([]string, 0, len(urls))
		for _, u := range urls {
			all = append(all, u)
		}
		if err := provision.DeleteQueues(ctx, c.SQS, all...); err != nil {
			t.Errorf("awstest: delete queues: %v", err)
		}
	})
	if err != nil {
		t.Fatalf("awstest: %v", err)
	}
	return urls
}

// Bucket creates an S3 bucket on the local stack (AWS_ENDPOINT_URL_S3,
// served by the SQS server) and empties and deletes it when the test
// ends; it returns the bucket's name.
func Bucket(t testing.TB, c awsclient.Clients) string {
	t.Helper()
	if ep := os.Getenv("AWS_ENDPOINT_URL_S3"); !awsclient.IsLoopback(ep) {
		if ep != "" || os.Getenv("QASYNC_REQUIRE_STACK") == "1" || os.Getenv("CI") != "" {
			t.Fatal("awstest: AWS_ENDPOINT_URL_S3 must point at the local stack (scripts/stack.sh env)")
		}
		t.Skip("local S3 endpoint not configured")
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "qasync-test-" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.S3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("awstest: create bucket: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := c.S3.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(name)})
		if err == nil {
			for _, o := range out.Contents {
				_, _ = c.S3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(name), Key: o.Key})
			}
		}
		if _, err := c.S3.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(name)}); err != nil {
			t.Errorf("awstest: delete bucket %s: %v", name, err)
		}
	})
	return name
}

// Receive reads messages (with all attributes) from the queue at url until
// want were read or wait has passed, deleting what it reads.
func Receive(ctx context.Context, c *sqs.Client, url string, want int, wait time.Duration) ([]sqstypes.Message, error) {
	var got []sqstypes.Message
	deadline := time.Now().Add(wait)
	for len(got) < want && time.Now().Before(deadline) {
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
			MessageAttributeNames: []string{"All"},
		})
		if err != nil {
			return got, err
		}
		for _, m := range out.Messages {
			got = append(got, m)
			if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
				return got, err
			}
		}
	}
	return got, nil
}
