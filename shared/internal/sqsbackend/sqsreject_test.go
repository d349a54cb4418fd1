package sqsbackend_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/qasync/qasync/shared/backendtest"
	"github.com/qasync/qasync/shared/internal/awstest"
	"github.com/qasync/qasync/shared/internal/sqsbackend"
	"github.com/qasync/qasync/shared/reject"
	"github.com/qasync/qasync/shared/schema"
)

// newRejects is the conformance factory: a reject publisher on a fresh
// queue and a read-back that also checks each message's attributes.
func newRejects(t *testing.T) (reject.Publisher, backendtest.ReadBack[reject.Envelope]) {
	c, _ := awstest.Clients(t)
	name := awstest.Name(t, "rej")
	url := awstest.Queues(t, c, schema.Queue{Name: name, VisibilityTimeout: 30 * time.Second, Retention: time.Hour})[name]
	var mu sync.Mutex
	var all []reject.Envelope
	return sqsbackend.NewRejects(c.SQS, url), func(ctx context.Context, want int) ([]reject.Envelope, error) {
		mu.Lock()
		defer mu.Unlock()
		msgs, err := awstest.Receive(ctx, c.SQS, url, want-len(all), 10*time.Second)
		for _, m := range msgs {
			var env reject.Envelope
			if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &env); err != nil {
				return nil, err
			}
			for name, v := range map[string]string{sqsbackend.AttrTenant: env.TenantID, sqsbackend.AttrScope: string(env.Scope), sqsbackend.AttrPipeline: env.PipelineID} {
				if a := m.MessageAttributes[name]; aws.ToString(a.StringValue) != v {
					t.Errorf("%s: attribute %s = %q, want %q", env.ExecutionID, name, aws.ToString(a.StringValue), v)
				}
			}
			all = append(all, env)
		}
		return append([]reject.Envelope(nil), all...), err
	}
}
