package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qasync/qasync/shared/awstest"
	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/schema"
)

// binary builds qasync once per test binary (or uses QASYNC_BIN).
var binary = sync.OnceValues(func() (string, error) {
	if p := os.Getenv("QASYNC_BIN"); p != "" {
		return p, nil
	}
	dir, err := os.MkdirTemp("", "qasync-e2e")
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "qasync")
	b, err := exec.Command("go", "build", "-o", out, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v: %s", err, b)
	}
	return out, nil
})

// server is one `qasync serve` process.
type server struct {
	cmd  *exec.Cmd
	addr string
	log  *bytes.Buffer
	done chan error
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// durableEnv provisions fresh tables and queues and returns the serve
// environment pointing at them.
func durableEnv(t *testing.T) []string {
	t.Helper()
	clients, _ := awstest.Clients(t)
	n := awstest.Names(t)
	awstest.Tables(t, clients, schema.Tables(n)...)
	urls := awstest.Queues(t, clients, schema.Queues(n)...)
	set := map[string]string{
		"state-provider": "dynamo", "dispatcher-provider": "sqs", "dlq-provider": "sqs",
		"queue-url": urls[n.WorkQueue], "dlq-url": urls[n.DLQQueue],
		"dynamo.execution-table": n.ExecutionTable, "dynamo.key-table": n.KeyTable, "dynamo.execution-payload-table": n.PayloadTable,
		"dynamo.dead-letter-table": n.DeadLetterTable,
		"idempotency-policy":       "CLIENT_KEY_REQUIRED", "strict-startup": "true",
		"sqs.wait-seconds": "1", "sweep-interval": "1s", "sweep-grace": "5s", "log-level": "warn",
	}
	env := os.Environ()
	for k, v := range set {
		env = append(env, config.EnvName(config.KeyPrefix+k)+"="+v)
	}
	return env
}

func startServer(t *testing.T, env []string) *server {
	t.Helper()
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	s := &server{addr: freeAddr(t), log: &bytes.Buffer{}, done: make(chan error, 1)}
	s.cmd = exec.Command(bin, "serve", "--addr", s.addr)
	s.cmd.Env = env
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	t.Cleanup(func() { s.cmd.Process.Kill() })
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + s.addr + "/healthz")
		if err == nil && resp.StatusCode == 200 {
			resp.Body.Close()
			return s
		}
		select {
		case err := <-s.done:
			t.Fatalf("qasync serve exited: %v\n%s", err, s.log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("qasync serve did not answer /healthz\n%s", s.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop sends SIGTERM and expects a clean exit.
func (s *server) stop(t *testing.T) {
	t.Helper()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("qasync serve exited with %v after SIGTERM\n%s", err, s.log)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("qasync serve did not stop within 30 s of SIGTERM")
	}
}

type submitted struct {
	ExecutionID string `json:"executionId"`
	Duplicate   bool   `json:"duplicate"`
}

func submit(addr, pipelineID, key string, body []byte) (int, submitted, error) {
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/pipelines/"+pipelineID+"/executions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, submitted{}, err
	}
	defer resp.Body.Close()
	var s submitted
	err = json.NewDecoder(resp.Body).Decode(&s)
	return resp.StatusCode, s, err
}

type status struct {
	Status  string `json:"status"`
	Version int64  `json:"version"`
}

func getStatus(addr, id string) (status, error) {
	resp, err := http.Get("http://" + addr + "/v1/executions/" + id)
	if err != nil {
		return status{}, err
	}
	defer resp.Body.Close()
	var s status
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

// runAcross submits n executions alternately to the servers, 8 at a time,
// and waits until all are terminal; it returns ids and the elapsed time.
func runAcross(t *testing.T, servers []*server, n int, pipelineID string, body func(i int) []byte) ([]string, time.Duration) {
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
			code, s, err := submit(servers[i%len(servers)].addr, pipelineID, "key-"+strconv.Itoa(i), body(i))
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
			s, err := getStatus(servers[0].addr, id)
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
	servers := []*server{startServer(t, env), startServer(t, env)}
	const n = 200
	ids, elapsed := runAcross(t, servers, n, "checkout.deliver-order", func(i int) []byte {
		return []byte(fmt.Sprintf(`{"orderId":"o-%d","items":[{"sku":"sku-%d","qty":1}],"amountCents":%d}`, i, i, 100+i))
	})
	for i, id := range ids {
		s, err := getStatus(servers[1].addr, id)
		if err != nil || s.Status != "SUCCEEDED" || s.Version != 9 {
			t.Errorf("execution %d (%s): %+v %v, want SUCCEEDED at version 9", i, id, s, err)
		}
	}
	for i := range 10 { // duplicates through the other server
		code, s, err := submit(servers[(i+1)%2].addr, "checkout.deliver-order", "key-"+strconv.Itoa(i),
			[]byte(fmt.Sprintf(`{"orderId":"o-%d","items":[{"sku":"sku-%d","qty":1}],"amountCents":%d}`, i, i, 100+i)))
		if err != nil || code != http.StatusOK || !s.Duplicate || s.ExecutionID != ids[i] {
			t.Errorf("duplicate %d: %d %+v %v", i, code, s, err)
		}
	}
	resp, err := http.Get("http://" + servers[0].addr + "/v1/executions/" + ids[0] + "/result")
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
		s.stop(t)
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

	servers := []*server{startServer(t, env), startServer(t, env)}
	const n = 300
	_, elapsed := runAcross(t, servers, n, "diag.drill", func(i int) []byte { return []byte(`{"echo":` + strconv.Itoa(i) + `}`) })
	execRate := n / elapsed.Seconds()
	// Each drill execution is 3 steps; each step is a claim and a commit.
	t.Logf("DynamoDB Local conditional UpdateItem ceiling: %.0f/s (8 goroutines); diag.drill: %.1f executions/s = %.0f conditional writes/s (%.0f%% of the ceiling)",
		rate, execRate, execRate*7, 100*execRate*7/rate)
	for _, s := range servers {
		s.stop(t)
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
