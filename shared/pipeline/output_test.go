package pipeline_test

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
)

// puts records the URIs an ObjectStore was asked to write.
type puts []string

func (p *puts) Put(_ context.Context, uri string, _ []byte, _ string) error {
	*p = append(*p, uri)
	return nil
}

func (p *puts) Get(context.Context, string) ([]byte, error) { return nil, fs.ErrNotExist }

// TestOutputBucketPlaceholder: {outputBucket} is expanded from
// StepInfo.OutputBucket (config key output.bucket) with the other
// placeholders.
func TestOutputBucketPlaceholder(t *testing.T) {
	o := pipeline.Output{To: "s3://{outputBucket}/results/{tenant}/{pipelineId}/{executionId}.json"}
	if !o.UsesOutputBucket() || (pipeline.Output{To: "s3://b/{executionId}"}).UsesOutputBucket() {
		t.Fatal("UsesOutputBucket")
	}
	info := pipeline.StepInfo{TenantID: "acme", PipelineID: "shop.report", ExecutionID: "e-1", OutputBucket: "qasync-dev-output-1a2b"}
	if got, want := o.Target(info), "s3://qasync-dev-output-1a2b/results/acme/shop.report/e-1.json"; got != want {
		t.Fatalf("Target = %q, want %q", got, want)
	}

	var store puts
	info.Objects = &store
	out, _ := payload.JSON(42)
	if err := o.Publish(context.Background(), info, out); err != nil {
		t.Fatalf("publish: %v", err)
	}
	if len(store) != 1 || store[0] != "s3://qasync-dev-output-1a2b/results/acme/shop.report/e-1.json" {
		t.Fatalf("puts %v", store)
	}
}

// TestOutputBucketPlaceholderUnset: without an output bucket the publish
// is a retryable output_publish_failed naming the key, and nothing is
// written.
func TestOutputBucketPlaceholderUnset(t *testing.T) {
	o := pipeline.Output{To: "s3://{outputBucket}/results/{executionId}.json"}
	var store puts
	out, _ := payload.JSON(42)
	err := o.Publish(context.Background(), pipeline.StepInfo{TenantID: "acme", ExecutionID: "e-1", Objects: &store}, out)
	var pe *pipeline.Error
	if !errors.As(err, &pe) || pe.Code != pipeline.CodeOutputPublishFailed || !pe.Retryable || !strings.Contains(err.Error(), pipeline.OutputBucketKey) {
		t.Fatalf("err %v", err)
	}
	if len(store) != 0 {
		t.Fatalf("puts %v", store)
	}
}
