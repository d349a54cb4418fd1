package benchdurable

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qasync/qasync/shared/clock"
)

// UpdateItemCeiling measures the conditional-write ceiling of a DynamoDB
// endpoint: workers goroutines each run conditional UpdateItems on their
// own new item of table (partition key "pk", a string), every write
// conditioned on the version the previous one set, as the runtime's
// claims and commits are. The first warmup is not counted: DynamoDB
// Local is a JVM, and on a 2-core machine its rate kept climbing for
// 10-15 s of load (DefaultConfig warms up 15 s). The answer is the
// writes per second started and completed during the d after it, by clk
// (nil: the system clock; a test's clock makes the windows hold a number
// of readings instead of machine time).
func UpdateItemCeiling(ctx context.Context, db *dynamodb.Client, table string, workers int, warmup, d time.Duration, clk clock.Clock) (float64, error) {
	if clk == nil {
		clk = clock.System{}
	}
	start := clk.Now()
	// Each call writes items of its own: versions start again at 0.
	prefix := "ceiling-" + strconv.FormatInt(start.UnixNano(), 36) + "-"
	from, until := start.Add(warmup), start.Add(warmup+d)
	var counted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			key := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: prefix + strconv.Itoa(w)}}
			for v := 0; ; v++ {
				now := clk.Now()
				if !now.Before(until) || ctx.Err() != nil {
					return
				}
				_, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(table), Key: key,
					UpdateExpression:    aws.String("SET v = :new"),
					ConditionExpression: aws.String("attribute_not_exists(v) OR v = :old"),
					ExpressionAttributeValues: map[string]types.AttributeValue{
						":old": &types.AttributeValueMemberN{Value: strconv.Itoa(v - 1)},
						":new": &types.AttributeValueMemberN{Value: strconv.Itoa(v)}}})
				if err != nil {
					errs <- fmt.Errorf("benchdurable: ceiling UpdateItem: %w", err)
					return
				}
				if done := clk.Now(); !now.Before(from) && done.Before(until) {
					counted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return float64(counted.Load()) / d.Seconds(), nil
}

// SignaturesUnverified reports whether the DynamoDB endpoint at base
// accepts a request whose SigV4 signature is wrong (DynamoDB Local
// checks that an Authorization header is there, not that it matches):
// only then may a proxy change request bodies (ProxyOptions.Capacity).
func SignaturesUnverified(ctx context.Context, base string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base, strings.NewReader(`{"Limit":1}`))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	req.Header.Set("X-Amz-Target", "DynamoDB_20120810.ListTables")
	req.Header.Set("X-Amz-Date", "20200101T000000Z")
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=local/20200101/us-east-1/dynamodb/aws4_request, "+
		"SignedHeaders=host;x-amz-date;x-amz-target, Signature=0000000000000000000000000000000000000000000000000000000000000000")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == http.StatusOK, nil
}
