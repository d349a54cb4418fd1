package pipeline_test

import (
	"context"
	"errors"
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

func outputRegistry(t *testing.T, to string) pipeline.Step {
	t.Helper()
	reg, err := pipeline.NewRegistry(pipeline.Pipeline{ID: "shop.report", Output: &pipeline.Output{To: to}, Steps: []pipeline.Step{
		pipeline.NewStep("total", func(_ context.Context, _ pipeline.StepInfo, n int) (int, error) { return n * 2, nil }),
	}})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := reg.Get("shop.report")
	return p.Steps[0]
}

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

	step := outputRegistry(t, o.To)
	var store puts
	info.Objects = &store
	in, _ := payload.JSON(21)
	out, err := step.Run(context.Background(), info, in)
	if err != nil || string(out.Data) != "42" {
		t.Fatalf("run: %s, %v", out.Data, err)
	}
	if len(store) != 1 || store[0] != "s3://qasync-dev-output-1a2b/results/acme/shop.report/e-1.json" {
		t.Fatalf("puts %v", store)
	}
}

// TestOutputBucketPlaceholderUnset: without an output bucket the publish
// is a retryable output_publish_failed naming the key, and nothing is
// written.
func TestOutputBucketPlaceholderUnset(t *testing.T) {
	step := outputRegistry(t, "s3://{outputBucket}/results/{executionId}.json")
	var store puts
	in, _ := payload.JSON(21)
	_, err := step.Run(context.Background(), pipeline.StepInfo{TenantID: "acme", ExecutionID: "e-1", Objects: &store}, in)
	var pe *pipeline.Error
	if !errors.As(err, &pe) || pe.Code != pipeline.CodeOutputPublishFailed || !pe.Retryable || !strings.Contains(err.Error(), pipeline.OutputBucketKey) {
		t.Fatalf("err %v", err)
	}
	if len(store) != 0 {
		t.Fatalf("puts %v", store)
	}
}
