package dynamo

import (
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/store"
)

// itemSize is an item's size as DynamoDB bills it: attribute names and
// values, numbers at one byte per two significant digits plus one, maps
// three bytes plus one per element.
func itemSize(item map[string]types.AttributeValue) int {
	n := 0
	for name, v := range item {
		n += len(name) + valueSize(v)
	}
	return n
}

func valueSize(v types.AttributeValue) int {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return len(v.Value)
	case *types.AttributeValueMemberN:
		d := strings.TrimLeft(strings.TrimLeft(v.Value, "-"), "0")
		return (len(d)+1)/2 + 1
	case *types.AttributeValueMemberB:
		return len(v.Value)
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	case *types.AttributeValueMemberM:
		n := 3
		for name, e := range v.Value {
			n += len(name) + valueSize(e) + 1
		}
		return n
	}
	panic("unsized attribute type")
}

// midRun is a row in the middle of a run: leased, a checkpoint written,
// names at typical lengths, an id with its incarnation, the records'
// horizon set.
func midRun(in, out []byte) store.Execution {
	now := time.UnixMilli(1_790_000_000_000)
	jsonRef := func(b []byte) payload.Ref {
		return payload.Ref{Encoding: payload.EncodingJSON, ContentType: payload.ContentTypeJSON, Length: int64(len(b)), SHA256: payload.Digest(b), Inline: b}
	}
	return store.Execution{
		TenantID: "acme-payments", ExecutionID: "0f5e8c4a-6b1d-8e2f-9a3b-4c5d6e7f8091.bbbbbbbbbbbbbbbb", PipelineID: "orders.checkout",
		PipelineVersion: "v1-3f9a2b7c4d5e6f70", Status: store.Running, Version: 7, StepIndex: 2, StepName: "charge-card",
		Attempt: 1, MaxAttempt: 4, LeaseOwner: "ip-10-0-12-34.ec2.in-0123456789abcdef", LeaseExpiresAt: now.Add(30 * time.Second),
		NextDueAt: now, SweepAt: now.Add(45 * time.Second), LastTransitionKey: "0f5e8c4a-6b1d-8e2f-9a3b-4c5d6e7f8091.bbbbbbbbbbbbbbbb:1:1",
		IdempotencyKey: "order-2026-12-01-000123", Fingerprint: strings.Repeat("a", 32), CreateToken: strings.Repeat("b", 16),
		Input: jsonRef(in), Result: jsonRef(out), CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(30 * 24 * time.Hour),
		RecordsExpireAt: now.Add(60 * 24 * time.Hour),
	}
}

// TestRowFitsOneWriteUnit: a row in the middle of a run, with an input
// and a step output each at the default inline budget, is under 1 KB, so
// every conditional write of it costs one write unit; a larger payload
// goes to the payload table and leaves a reference in the row.
func TestRowFitsOneWriteUnit(t *testing.T) {
	bare := midRun(nil, nil)
	bare.Input.Inline, bare.Result.Inline = []byte{}, []byte{}
	overhead := itemSize(encode(&bare, 4))
	full := midRun(make([]byte, payload.DefaultInlineBudget), make([]byte, payload.DefaultInlineBudget))
	size := itemSize(encode(&full, 4))
	t.Logf("row without payload bytes: %d B; with input and output at the %d B inline budget: %d B", overhead, payload.DefaultInlineBudget, size)
	if size > 1024 {
		t.Fatalf("a row with both payloads at the inline budget is %d B: over 1 KB, every write would cost 2 units", size)
	}
	manifest := midRun(nil, nil)
	manifest.Input = payload.Ref{Encoding: payload.EncodingJSON, ContentType: payload.ContentTypeJSON, Length: 10 << 10,
		SHA256: payload.Digest([]byte("x")), ManifestID: "0f5e8c4a-6b1d-8e2f-9a3b-4c5d6e7f8091/input", Whole: true}
	manifest.Result = manifest.Input
	if got := itemSize(encode(&manifest, 4)); got > 1024 {
		t.Fatalf("a row with both payloads out of the row is %d B", got)
	}
}
