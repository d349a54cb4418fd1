package stack

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/cxapi"
	"github.com/aws/jsii-runtime-go"
)

// cdk-nag's AwsSolutions pack finds no unsuppressed error (or warning) in
// any variant.
func TestNagAwsSolutions(t *testing.T) {
	for _, variant := range []string{"dev", "prod", "full", "prod-tenants"} {
		v := synth(t, variant)
		ann := assertions.Annotations_FromStack(v.stack)
		rule := assertions.Match_StringLikeRegexp(jsii.String("AwsSolutions-.*"))
		for level, found := range map[string]*[]*cxapi.SynthesisMessage{
			"error":   ann.FindError(jsii.String("*"), rule),
			"warning": ann.FindWarning(jsii.String("*"), rule),
		} {
			for _, m := range *found {
				t.Errorf("%s: cdk-nag %s at %s: %v", variant, level, *m.Id, m.Entry.Data)
			}
		}
	}
}

// suppression is one cdk-nag suppression found in a template.
type suppression struct {
	resource, rule, reason string
	appliesTo              int
}

// suppressionsOf reads every cdk-nag suppression from the template's
// resource metadata.
func suppressionsOf(v *synthesized) []suppression {
	var out []suppression
	for id, r := range v.res {
		md, _ := r["Metadata"].(map[string]any)
		nag, _ := md["cdk_nag"].(map[string]any)
		for _, x := range list(nag["rules_to_suppress"]) {
			m := x.(map[string]any)
			reason, _ := m["reason"].(string)
			out = append(out, suppression{resource: id, rule: fmt.Sprint(m["id"]), reason: reason, appliesTo: len(list(m["applies_to"]))})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].resource+out[i].rule < out[j].resource+out[j].rule })
	return out
}

// Every suppression is expected, scoped, and gives a real reason.
func TestNagSuppressionsHaveReasons(t *testing.T) {
	dev := []string{"AwaitCompleteRoute AwsSolutions-APIG4", "AwaitResumeTokenSecret AwsSolutions-SMG4", "ClientInvokePolicy AwsSolutions-IAM5", "DlqQueue AwsSolutions-SQS3",
		"HistoryFailureQueue AwsSolutions-SQS3", "HistoryFunctionPolicy AwsSolutions-IAM5", "ItemRejectQueue AwsSolutions-SQS3", "OperatorRedrivePolicy AwsSolutions-IAM5"}
	// The await front's REST API: its method has no authorizer (the
	// resume token) and no Cognito authorizer, its stage no execution
	// logging; the web ACL needs none.
	front := []string{"AwaitApiStage AwsSolutions-APIG6", "AwaitCompleteMethod AwsSolutions-APIG4", "AwaitCompleteMethod AwsSolutions-COG4"}
	for variant, want := range map[string][]string{
		"dev":          dev,
		"prod":         concat(dev, front),
		"prod-tenants": concat(dev, []string{"TenantInvokePolicyAcme AwsSolutions-IAM5", "TenantInvokePolicyBigCo AwsSolutions-IAM5"}),
		"full": concat(front, []string{"AwaitCompleteRoute AwsSolutions-APIG4", "AwaitResumeTokenSecret AwsSolutions-SMG4", "ClientInvokePolicy AwsSolutions-IAM5", "DlqFunctionPolicy AwsSolutions-IAM5", "DlqQueue AwsSolutions-SQS3",
			"HistoryFailureQueue AwsSolutions-SQS3", "HistoryFunctionPolicy AwsSolutions-IAM5", "HistoryFunctionPolicy AwsSolutions-IAM5", "ItemRejectQueue AwsSolutions-SQS3",
			"OperatorRedrivePolicy AwsSolutions-IAM5", "OutputBucket AwsSolutions-S1", "SubmitFunctionPolicy AwsSolutions-IAM5",
			"SweeperFunctionPolicy AwsSolutions-IAM5", "WorkerFunctionPolicy AwsSolutions-IAM5", "WorkerFunctionPolicy AwsSolutions-IAM5"}),
	} {
		var got []string
		for _, s := range suppressionsOf(synth(t, variant)) {
			got = append(got, s.resource+" "+s.rule)
			if len(s.reason) < 80 || !strings.Contains(s.reason, " ") {
				t.Errorf("%s %s %s: reason %q is too short to explain anything", variant, s.resource, s.rule, s.reason)
			}
			if s.rule == "AwsSolutions-IAM5" && s.appliesTo == 0 {
				t.Errorf("%s %s: an IAM5 suppression must name the findings it applies to", variant, s.resource)
			}
			if variant == "full" {
				t.Logf("suppression %s on %s (%d findings): %s", s.rule, s.resource, max(s.appliesTo, 1), s.reason)
			}
		}
		sort.Strings(got)
		sort.Strings(want)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: suppressions %v, want %v", variant, got, want)
		}
	}
}
