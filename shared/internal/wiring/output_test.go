package wiring_test

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/internal/awstest"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/objects"
	"github.com/qasync/qasync/shared/internal/wiring"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

type reportOrder struct {
	ID    string `json:"id"`
	Cents int    `json:"cents"`
}

// reportPipeline has two steps and publishes its output to to.
func reportPipeline(to string) pipeline.Pipeline {
	return pipeline.Pipeline{ID: "test.report", Output: &pipeline.Output{To: to}, Steps: []pipeline.Step{
		pipeline.NewStep("double", func(_ context.Context, _ pipeline.StepInfo, o reportOrder) (reportOrder, error) {
			o.Cents *= 2
			return o, nil
		}),
		pipeline.NewStep("total", func(_ context.Context, _ pipeline.StepInfo, o reportOrder) (map[string]any, error) {
			return map[string]any{"id": o.ID, "total": o.Cents}, nil
		}),
	}}
}

// openReport opens a memory runtime serving p.
func openReport(t *testing.T, p pipeline.Pipeline, opts ...option) *wiring.Process {
	t.Helper()
	return openReportWith(t, p, nil, opts...)
}

// openReportWith opens a memory runtime serving p, with mutate applied
// to the configuration.
func openReportWith(t *testing.T, p pipeline.Pipeline, mutate func(*config.Config), opts ...option) *wiring.Process {
	t.Helper()
	c := config.Default()
	c.StateProvider = "memory"
	if mutate != nil {
		mutate(&c)
	}
	c.MaxRetries, c.RetryDelay, c.RetryMaxDelay = 2, 20*time.Millisecond, 20*time.Millisecond
	reg, err := pipeline.NewRegistry(p)
	if err != nil {
		t.Fatal(err)
	}
	set, err := open(context.Background(), c, reg, slog.New(slog.DiscardHandler), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = set.Close(context.Background()) })
	return set
}

// submitAndWait submits o and waits for a terminal status.
func submitAndWait(t *testing.T, set *wiring.Process, o reportOrder) store.Execution {
	t.Helper()
	in, _ := payload.JSON(o)
	ctx := context.Background()
	res, err := set.Runtime.Submit(ctx, engine.SubmitRequest{TenantID: "acme", PipelineID: "test.report", Input: in})
	if err != nil {
		t.Fatal(err)
	}
	key := store.Key{TenantID: "acme", ExecutionID: res.Execution.ExecutionID}
	for deadline := time.Now().Add(15 * time.Second); ; {
		row, err := set.Runtime.Status(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if row.Status == store.Succeeded || row.Status == store.DLQ {
			return row
		}
		if time.Now().After(deadline) {
			t.Fatalf("execution still %s", row.Status)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkPublished: the execution SUCCEEDED, and the object at uri holds
// the result's bytes.
func checkPublished(t *testing.T, set *wiring.Process, objs objects.Store, row store.Execution, uri string) {
	t.Helper()
	if row.Status != store.Succeeded {
		t.Fatalf("status %s (%+v), want SUCCEEDED", row.Status, row.Error)
	}
	_, res, err := set.Runtime.Result(context.Background(), row.Key())
	if err != nil {
		t.Fatal(err)
	}
	got, err := objs.Get(context.Background(), uri)
	if err != nil {
		t.Fatalf("object %s: %v", uri, err)
	}
	if string(got) != string(res.Data) || string(got) != `{"id":"o-1","total":900}` {
		t.Fatalf("object %s = %s, result %s", uri, got, res.Data)
	}
}

// TestOutputPublishedToFileBeforeSuccess: the last step's output is
// written to the file target, and the execution is not SUCCEEDED while
// the write happens; a replay of the last step writes the same key and
// bytes.
func TestOutputPublishedToFileBeforeSuccess(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	to := (&url.URL{Scheme: "file", Path: filepath.ToSlash(dir)}).String() + "/{tenant}/{pipelineId}/{executionId}.json"
	p := reportPipeline(to)
	var seen []store.Status
	var mu sync.Mutex
	var set *wiring.Process
	// Observe the row at the moment of the write.
	set = openReport(t, p, withObjects(objectStoreFunc(func(ctx context.Context, uri string, data []byte, ct string) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, currentStatus(set, uri))
		return objects.File{}.Put(ctx, uri, data, ct)
	})))
	row := submitAndWait(t, set, reportOrder{ID: "o-1", Cents: 450})
	uri := (&url.URL{Scheme: "file", Path: filepath.ToSlash(filepath.Join(dir, "acme", "test.report", row.ExecutionID+".json"))}).String()
	checkPublished(t, set, objects.File{}, row, uri)
	mu.Lock()
	if len(seen) != 1 || seen[0] == store.Succeeded {
		t.Fatalf("statuses at the write %v, want one, not SUCCEEDED", seen)
	}
	mu.Unlock()

	// Replay: the wrapped last step run again for the same execution.
	reg, _ := pipeline.NewRegistry(p)
	rp, _ := reg.Get(p.ID)
	in, _ := payload.JSON(reportOrder{ID: "o-1", Cents: 900})
	info := pipeline.StepInfo{TenantID: "acme", PipelineID: p.ID, ExecutionID: row.ExecutionID, StepIndex: 1, Attempt: 2, Objects: objects.File{}}
	if _, err := rp.Steps[1].Run(context.Background(), info, in); err != nil {
		t.Fatal(err)
	}
	checkPublished(t, set, objects.File{}, row, uri)
	if files, _ := os.ReadDir(filepath.Join(dir, "acme", "test.report")); len(files) != 1 {
		t.Fatalf("%d objects, want 1", len(files))
	}
}

// TestOutputPublishedToS3: the same against S3 on the local stack.
func TestOutputPublishedToS3(t *testing.T) {
	t.Parallel()
	c, _ := awstest.Clients(t)
	bucket := awstest.Bucket(t, c)
	set := openReport(t, reportPipeline("s3://"+bucket+"/out/{tenant}/{pipelineId}/{executionId}.json"))
	row := submitAndWait(t, set, reportOrder{ID: "o-1", Cents: 450})
	checkPublished(t, set, objects.S3{Client: c.S3}, row, "s3://"+bucket+"/out/acme/test.report/"+row.ExecutionID+".json")
}

// TestOutputBucketPlaceholderS3: s3://{outputBucket}/... publishes to
// the bucket of output.bucket (the CDK stack's output bucket).
func TestOutputBucketPlaceholderS3(t *testing.T) {
	t.Parallel()
	c, _ := awstest.Clients(t)
	bucket := awstest.Bucket(t, c)
	set := openReportWith(t, reportPipeline("s3://{outputBucket}/results/{tenant}/{pipelineId}/{executionId}.json"),
		func(c *config.Config) { c.OutputBucket = bucket })
	row := submitAndWait(t, set, reportOrder{ID: "o-1", Cents: 450})
	checkPublished(t, set, objects.S3{Client: c.S3}, row, "s3://"+bucket+"/results/acme/test.report/"+row.ExecutionID+".json")
}

// TestOutputBucketRequiredAtStartup: a registry with a pipeline whose
// target uses {outputBucket} does not open without output.bucket, and
// the error names the key and the pipeline.
func TestOutputBucketRequiredAtStartup(t *testing.T) {
	t.Parallel()
	reg, err := pipeline.NewRegistry(reportPipeline("s3://{outputBucket}/results/{executionId}.json"))
	if err != nil {
		t.Fatal(err)
	}
	c := config.Default()
	c.StateProvider = "memory"
	set, err := open(context.Background(), c, reg, slog.New(slog.DiscardHandler))
	if err == nil {
		_ = set.Close(context.Background())
		t.Fatal("Open succeeded without output.bucket")
	}
	if pipeline.OutputBucketKey != config.FullKey("output.bucket") {
		t.Fatalf("pipeline.OutputBucketKey %q is not the config key", pipeline.OutputBucketKey)
	}
	if msg := err.Error(); !strings.Contains(msg, "pipeline.orchestrator.output.bucket") || !strings.Contains(msg, "test.report") {
		t.Fatalf("error %q names neither the key nor the pipeline", msg)
	}
}

// TestOutputPublishFailureRetriesThenDeadLetters: a target that refuses
// every write: the last step retries (max-retries 2) and the execution
// ends DLQ with output_publish_failed, never SUCCEEDED.
func TestOutputPublishFailureRetriesThenDeadLetters(t *testing.T) {
	t.Parallel()
	var puts int
	var mu sync.Mutex
	set := openReport(t, reportPipeline("file:///nonexistent/{executionId}.json"), withObjects(objectStoreFunc(func(context.Context, string, []byte, string) error {
		mu.Lock()
		defer mu.Unlock()
		puts++
		return errors.New("target refused the write")
	})))
	row := submitAndWait(t, set, reportOrder{ID: "o-1", Cents: 450})
	if row.Status != store.DLQ || row.Error == nil || row.Error.Code != pipeline.CodeOutputPublishFailed || row.Attempt != 3 || row.StepIndex != 1 {
		t.Fatalf("status %s step %d attempt %d error %+v, want DLQ at step 1 after 3 attempts with %s", row.Status, row.StepIndex, row.Attempt, row.Error, pipeline.CodeOutputPublishFailed)
	}
	mu.Lock()
	defer mu.Unlock()
	if puts != 3 {
		t.Fatalf("%d writes, want 3", puts)
	}
}

type objectStoreFunc func(ctx context.Context, uri string, data []byte, ct string) error

func (f objectStoreFunc) Put(ctx context.Context, uri string, data []byte, ct string) error {
	return f(ctx, uri, data, ct)
}

func (f objectStoreFunc) Get(context.Context, string) ([]byte, error) { return nil, fs.ErrNotExist }

// currentStatus reads the status of the execution whose id ends uri.
func currentStatus(set *wiring.Process, uri string) store.Status {
	id := filepath.Base(uri)
	id = id[:len(id)-len(".json")]
	row, err := set.Runtime.Status(context.Background(), store.Key{TenantID: "acme", ExecutionID: id})
	if err != nil {
		return ""
	}
	return row.Status
}
