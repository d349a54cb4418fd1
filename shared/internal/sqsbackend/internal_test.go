package sqsbackend

import (
	"strings"
	"testing"
	"time"
)

func TestDecodeNeverQuotesTheBody(t *testing.T) {
	t.Parallel()
	for _, body := range []string{"", "s3cr3t", `{"tenantId":"s3cr3t"`, `{"tenantId":1,"executionId":"s3cr3t"}`,
		`{"tenantId":"s3cr3t"}`, `{"executionId":"s3cr3t"}`, `["s3cr3t"]`, `{"tenantId":"t","executionId":"e"} s3cr3t`} {
		_, err := decode(body)
		if err == nil {
			t.Errorf("decode(%q) accepted it", body)
			continue
		}
		if strings.Contains(err.Error(), "s3") {
			t.Errorf("decode(%q) error quotes the body: %v", body, err)
		}
	}
	item, err := decode(`{"tenantId":"t","executionId":"e","pipelineId":"p","future":1}`)
	if err != nil || item.TenantID != "t" || item.ExecutionID != "e" || item.PipelineID != "p" {
		t.Errorf("decode of a valid item: %+v, %v", item, err)
	}
}

func TestRetryDelayDoublesPerReceive(t *testing.T) {
	t.Parallel()
	for receives, want := range []time.Duration{0: time.Second, 1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 6: 32 * time.Second, 7: time.Minute, 40: time.Minute} {
		if want == 0 {
			continue
		}
		if got := retryDelay(time.Second, receives, time.Minute); got != want {
			t.Errorf("retryDelay(1s, %d, 1m) = %s, want %s", receives, got, want)
		}
	}
}
