package server

import (
	"path/filepath"
	"testing"

	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/internal/iamcheck"
)

// qasync local --local-iam-template maps the template's tables and
// queues onto the configured ones, the poison queue included.
func TestLocalIAMMapsTheConfiguredResources(t *testing.T) {
	own, rest, err := splitLocalFlags([]string{"--local-iam-template", "tpl.json", "--state", "dynamo"})
	if err != nil || own["iam-template"] != "tpl.json" || len(rest) != 2 {
		t.Fatalf("splitLocalFlags: %v %v %v", own, rest, err)
	}
	if o, err := localIAM("", config.Config{}, ""); o != nil || err != nil {
		t.Errorf("without a template: %v %v", o, err)
	}
	if _, err := localIAM(filepath.Join(t.TempDir(), "missing.json"), config.Config{}, ""); err == nil {
		t.Error("a missing template was accepted")
	}
	cfg := config.Config{ExecutionTable: "l-exec", PayloadTable: "l-pay", DeadLetterTable: "l-dl", EffectTable: "l-fx", HistoryTable: "l-hist",
		QueueURL: "http://127.0.0.1:1/000000000000/l-work", DLQURL: "http://127.0.0.1:1/000000000000/l-dlq"}
	o, err := localIAM(filepath.Join("..", "internal", "iamcheck", "testdata", "dev.template.json"), cfg, "http://127.0.0.1:1/000000000000/l-poison")
	if err != nil {
		t.Fatal(err)
	}
	ps, err := o.Template.Policies(o.Local)
	if err != nil {
		t.Fatal(err)
	}
	l := ps["DlqFunction"].Local()
	for _, c := range []struct {
		fn, action, resource string
		allowed              bool
	}{
		{"WorkerFunction", "dynamodb:UpdateItem", l.TableARN("l-exec"), true},
		{"WorkerFunction", "dynamodb:PutItem", l.TableARN("l-fx"), true},
		{"WorkerFunction", "dynamodb:PutItem", l.TableARN("l-dl"), false},
		{"DlqFunction", "sqs:ReceiveMessage", l.QueueARN(cfg.DLQURL), true},
		{"DlqFunction", "sqs:ReceiveMessage", l.QueueARN("l-poison"), true},
		{"DlqFunction", "sqs:ReceiveMessage", l.QueueARN(cfg.QueueURL), false},
	} {
		if d := ps[c.fn].Evaluate(iamcheck.Request{Action: c.action, Resource: c.resource}); d.Allowed != c.allowed {
			t.Errorf("%s %s on %s: allowed %v, want %v", c.fn, c.action, c.resource, d.Allowed, c.allowed)
		}
	}
}
