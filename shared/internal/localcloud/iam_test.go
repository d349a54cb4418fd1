package localcloud_test

import (
	"os"
	"strings"
	"testing"

	"github.com/qasync/qasync/shared/internal/awstest"
	"github.com/qasync/qasync/shared/internal/iamcheck"
	"github.com/qasync/qasync/shared/internal/localcloud"
	"github.com/qasync/qasync/shared/schema"
)

// An SQS event source mapping needs its function's role to consume the
// queue, as Lambda checks when the mapping is created: without
// sqs:ReceiveMessage on the work queue the cloud does not start, and says
// what is missing.
func TestIAMRefusesMappingWithoutConsumeGrant(t *testing.T) {
	t.Parallel()
	clients, _ := awstest.Clients(t)
	names := awstest.Names(t)
	urls := awstest.Queues(t, clients, schema.Queues(names)...)
	cut, n := devTemplate(t).Without("WorkerFunction", "sqs:ReceiveMessage", "WorkQueue")
	if n != 1 {
		t.Fatalf("removed %d grants, want 1", n)
	}
	opts := echoOptions(t, t.TempDir(), localcloud.Worker)
	opts.SQS = clients.SQS
	opts.WorkQueueURL = urls[names.WorkQueue]
	opts.IAM = &localcloud.IAMOptions{Template: cut, Local: iamcheck.LocalNames(names, urls, "", ""),
		DynamoDB: os.Getenv("AWS_ENDPOINT_URL_DYNAMODB"), SQS: os.Getenv("AWS_ENDPOINT_URL_SQS")}
	c, err := localcloud.Start(t.Context(), opts)
	if err == nil {
		c.Close()
		t.Fatal("started without the worker's sqs:ReceiveMessage on the work queue")
	}
	if !strings.Contains(err.Error(), "missing Allow sqs:ReceiveMessage on ${WorkQueue.Arn}") {
		t.Errorf("error %v, want the missing grant named", err)
	}

	// With the stack's own policies it starts, and the function's AWS
	// endpoints are its proxy's.
	opts.IAM.Template = devTemplate(t)
	c = start(t, opts)
	for _, env := range []string{"AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL_DYNAMODB"} {
		out, err := c.Invoke(t.Context(), localcloud.Worker, []byte(`{"env":"`+env+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(out), `"`+env+`":"http://127.0.0.1:`) || strings.Contains(string(out), os.Getenv(env)) {
			t.Errorf("%s in the function: %s, want its proxy's URL (not %s)", env, out, os.Getenv(env))
		}
	}
}

// Enforcement that cannot be set up refuses to start rather than run the
// functions unchecked.
func TestIAMRefusesIncompleteOptions(t *testing.T) {
	t.Parallel()
	tpl := devTemplate(t)
	for _, c := range []struct {
		iam  localcloud.IAMOptions
		want string
	}{
		{localcloud.IAMOptions{}, "Template is required"},
		{localcloud.IAMOptions{Template: tpl}, "AWS_ENDPOINT_URL_DYNAMODB"},
		{localcloud.IAMOptions{Template: tpl, DynamoDB: "http://127.0.0.1:1", SQS: "http://127.0.0.1:2",
			FunctionIDs: map[string]string{localcloud.Submit: "NoSuchFunction"}}, `no function "NoSuchFunction" in the template`},
	} {
		opts := echoOptions(t, t.TempDir(), localcloud.Submit)
		opts.IAM = &c.iam
		c2, err := localcloud.Start(t.Context(), opts)
		if err == nil {
			c2.Close()
			t.Errorf("%+v: started", c.iam)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "localcloud: ") {
			t.Errorf("%+v: %v, want %q", c.iam, err, c.want)
		}
	}
}
