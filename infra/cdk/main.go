// Command cdk is the CDK app of qasync: it reads the stage settings from
// CDK context (`-c stage=prod`, cdk.json, CDK_CONTEXT_JSON), builds the
// stack (package stack), applies cdk-nag's AwsSolutions checks and
// synthesizes into CDK_OUTDIR (cdk.out when run by the CDK CLI).
//
//	CDK_OUTDIR=cdk.out go run .                                   # dev, no CLI, no AWS credentials
//	CDK_OUTDIR=cdk.out CDK_CONTEXT_JSON='{"stage":"prod"}' go run .
//	cdk synth -c stage=prod                                       # through the CLI (cdk.json: app "go run .")
//
// The stack is environment-agnostic unless CDK_DEFAULT_ACCOUNT and
// CDK_DEFAULT_REGION are both set (the CLI sets them from credentials), so
// synthesis needs no credentials.
package main

import (
	"fmt"
	"os"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/cxapi"
	"github.com/aws/jsii-runtime-go"

	"github.com/qasync/qasync/infra/cdk/stack"
)

func main() {
	err := run()
	jsii.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "qasync cdk:", err)
		os.Exit(1)
	}
}

func run() error {
	app := awscdk.NewApp(nil)
	dir, err := os.Getwd()
	if err != nil {
		return err
	}
	settings, err := stack.SettingsFromContext(app.Node(), dir)
	if err != nil {
		return err
	}
	props := stack.Props{Settings: settings}
	account, region := os.Getenv("CDK_DEFAULT_ACCOUNT"), os.Getenv("CDK_DEFAULT_REGION")
	if account != "" && region != "" {
		props.Env = &awscdk.Environment{Account: jsii.String(account), Region: jsii.String(region)}
	}
	if _, err := stack.New(app, settings.StackName(), props); err != nil {
		return err
	}
	stack.AddNagChecks(app, true)
	assembly := app.Synth(nil)
	// The CDK CLI refuses a stack with error annotations (cdk-nag's
	// findings among them); `go run .` on its own must refuse it too.
	errs := 0
	for _, st := range *assembly.Stacks() {
		for _, m := range *st.Messages() {
			if m.Level == cxapi.SynthesisMessageLevel_ERROR {
				errs++
				fmt.Fprintf(os.Stderr, "error: %s: %v\n", *m.Id, m.Entry.Data)
			}
		}
		fmt.Fprintf(os.Stderr, "synthesized %s into %s\n", *st.StackName(), *assembly.Directory())
	}
	if errs > 0 {
		return fmt.Errorf("%d error annotation(s), cdk-nag findings included; see above", errs)
	}
	return nil
}
