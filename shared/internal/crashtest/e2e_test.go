package crashtest_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qasync/qasync/shared/internal/awstest"
	"github.com/qasync/qasync/shared/internal/crashtest"
	"github.com/qasync/qasync/shared/schema"
)

// The process harness (building qasync, fresh tables and queues, starting
// and stopping `qasync serve`, the HTTP calls) is shared with the HA gate
// and the chaos runner in shared/crashtest.

// durableEnv provisions fresh tables and queues and returns the serve
// environment pointing at them.
func durableEnv(t *testing.T) []string {
	t.Helper()
	return crashtest.NewStack(t).Env()
}

// startServer starts one `qasync serve` process, killed when the test ends.
func startServer(t *testing.T, env []string) *crashtest.Server {
	t.Helper()
	return crashtest.Start(t, env, "serve")
}

// stop sends SIGTERM and expects a clean exit.
func stop(t *testing.T, s *crashtest.Server) {
	t.Helper()
	if err := s.Stop(30 * time.Second); err != nil {
		t.Error(err)
	}
}

// runAcross submits n executions alternately to the servers, 8 at a time,
// and waits until all are terminal; it returns ids and the elapsed time.
func runAcross(t *testing.T, servers []*crashtest.Server, n int, pipelineID string, body func(i int) []byte) ([]string, time.Duration) {
	t.Helper()
	ids := make([]string, n)
	start := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Int32
	sem := make(chan struct{}, 8)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			code, s, err := crashtest.Submit(servers[i%len(servers)].Addr, pipelineID, "key-"+strconv.Itoa(i), body(i))
			if err != nil || code != http.StatusAccepted {
				failed.Add(1)
				t.Errorf("submit %d: %d %v", i, code, err)
				return
			}
			ids[i] = s.ExecutionID
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.FailNow()
	}
	deadline := time.Now().Add(3 * time.Minute)
	for pending := ids; len(pending) > 0; {
		var still []string
		for _, id := range pending {
			s, err := crashtest.GetStatus(servers[0].Addr, id)
			if err != nil || (s.Status != "SUCCEEDED" && s.Status != "DLQ" && s.Status != "FAILED") {
				still = append(still, id)
			}
		}
		pending = still
		if len(pending) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d executions not terminal after 3 minutes", len(pending), n)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return ids, time.Since(start)
}

// TestTwoServersShareTheWork: two `qasync serve` processes on the same
// DynamoDB tables and SQS queues; 200 checkout executions submitted across
// both all succeed, each step claimed and committed exactly once (version
// 1 + 2 x 4), and a duplicate submit to the other server resolves to the
// same execution.
func TestTwoServersShareTheWork(t *testing.T) {
	env := durableEnv(t)
	servers := []*crashtest.Server{startServer(t, env), startServer(t, env)}
	const n = 200
	ids, elapsed := runAcross(t, servers, n, crashtest.CheckoutID, func(i int) []byte {
		return []byte(fmt.Sprintf(`{"orderId":"o-%d","items":[{"sku":"sku-%d","qty":1}],"amountCents":%d}`, i, i, 100+i))
	})
	for i, id := range ids {
		s, err := crashtest.GetStatus(servers[1].Addr, id)
		if err != nil || s.Status != "SUCCEEDED" || s.Version != 6 {
			t.Errorf("execution %d (%s): %+v %v, want SUCCEEDED at version 6 (created, one claim, four chained commits)", i, id, s, err)
		}
	}
	for i := range 10 { // duplicates through the other server
		code, s, err := crashtest.Submit(servers[(i+1)%2].Addr, crashtest.CheckoutID, "key-"+strconv.Itoa(i),
			[]byte(fmt.Sprintf(`{"orderId":"o-%d","items":[{"sku":"sku-%d","qty":1}],"amountCents":%d}`, i, i, 100+i)))
		if err != nil || code != http.StatusOK || !s.Duplicate || s.ExecutionID != ids[i] {
			t.Errorf("duplicate %d: %d %+v %v", i, code, s, err)
		}
	}
	resp, err := http.Get("http://" + servers[0].Addr + "/v1/executions/" + ids[0] + "/result")
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Contains(b, []byte(`"status":"DELIVERY_SCHEDULED"`)) {
			t.Errorf("result: %d %s", resp.StatusCode, b)
		}
	}
	t.Logf("two servers: %d checkout executions (4 steps) in %s: %.1f executions/s, %.1f transitions/s",
		n, elapsed.Round(time.Millisecond), n/elapsed.Seconds(), 4*n/elapsed.Seconds())
	for _, s := range servers {
		stop(t, s)
	}
}

// TestThroughputAgainstUpdateItemCeiling measures, in one run, the raw
// conditional UpdateItem rate of DynamoDB Local and the executions per
// second of diag.drill through two serve processes, and logs both. It
// asserts correctness only: timings depend on the machine.
func TestThroughputAgainstUpdateItemCeiling(t *testing.T) {
	env := durableEnv(t)
	clients, _ := awstest.Clients(t)
	table := awstest.Name(t, "ceiling")
	awstest.Tables(t, clients, schema.Table{Name: table, PartitionKey: schema.Attr{Name: "pk", Type: schema.String}})
	rate := updateItemRate(t, clients.DynamoDB, table, 8, 3*time.Second)

	servers := []*crashtest.Server{startServer(t, env), startServer(t, env)}
	const n = 300
	_, elapsed := runAcross(t, servers, n, crashtest.DrillID, func(i int) []byte { return []byte(`{"echo":` + strconv.Itoa(i) + `}`) })
	execRate := n / elapsed.Seconds()
	// Each drill execution is 3 steps; each step is a claim and a commit.
	t.Logf("DynamoDB Local conditional UpdateItem ceiling: %.0f/s (8 goroutines); diag.drill: %.1f executions/s = %.0f conditional writes/s (%.0f%% of the ceiling)",
		rate, execRate, execRate*7, 100*execRate*7/rate)
	for _, s := range servers {
		stop(t, s)
	}
}

// updateItemRate runs conditional UpdateItems on workers goroutines for d
// and returns the rate.
func updateItemRate(t *testing.T, db *dynamodb.Client, table string, workers int, d time.Duration) float64 {
	ctx := context.Background()
	var total atomic.Int64
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			key := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "k" + strconv.Itoa(w)}}
			for v := 0; time.Now().Before(stop); v++ {
				cond := "attribute_not_exists(v) OR v = :old"
				_, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(table), Key: key,
					UpdateExpression: aws.String("SET v = :new"), ConditionExpression: aws.String(cond),
					ExpressionAttributeValues: map[string]types.AttributeValue{
						":old": &types.AttributeValueMemberN{Value: strconv.Itoa(v - 1)},
						":new": &types.AttributeValueMemberN{Value: strconv.Itoa(v)}}})
				if err != nil {
					t.Errorf("UpdateItem: %v", err)
					return
				}
				total.Add(1)
			}
		})
	}
	wg.Wait()
	return float64(total.Load()) / d.Seconds()
}
