package stack

import (
	"fmt"
	"os"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/cxapi"
	"github.com/aws/jsii-runtime-go"
)

// EnvironmentFromCLI is the environment the CDK CLI asks a stack for: the
// account and region of CDK_DEFAULT_ACCOUNT and CDK_DEFAULT_REGION when
// both are set (the CLI sets them from the credentials), else nil (an
// environment-agnostic stack, synthesized without credentials).
func EnvironmentFromCLI() *awscdk.Environment {
	account, region := os.Getenv("CDK_DEFAULT_ACCOUNT"), os.Getenv("CDK_DEFAULT_REGION")
	if account == "" || region == "" {
		return nil
	}
	return &awscdk.Environment{Account: jsii.String(account), Region: jsii.String(region)}
}

// Synth applies cdk-nag's AwsSolutions checks to app (with their reports),
// synthesizes it and returns the cloud assembly. The CDK CLI refuses a
// stack with error annotations, cdk-nag's findings among them; Synth
// refuses it too (`go run .` without the CLI), with an error listing
// each one.
func Synth(app awscdk.App) (cxapi.CloudAssembly, error) {
	AddNagChecks(app, true)
	assembly := app.Synth(nil)
	var errs []string
	for _, st := range *assembly.Stacks() {
		for _, m := range *st.Messages() {
			if m.Level == cxapi.SynthesisMessageLevel_ERROR {
				errs = append(errs, fmt.Sprintf("%s: %v", *m.Id, m.Entry.Data))
			}
		}
	}
	if len(errs) > 0 {
		return assembly, fmt.Errorf("%d error annotation(s), cdk-nag findings included:\n  %s", len(errs), strings.Join(errs, "\n  "))
	}
	return assembly, nil
}
