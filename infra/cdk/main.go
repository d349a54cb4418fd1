// Command cdk is the CDK app of qasync: it reads the stage settings from
// CDK context (`-c stage=prod`, cdk.json, CDK_CONTEXT_JSON), builds the
// stack (package stack) on this repository's dist/, applies cdk-nag's
// AwsSolutions checks and synthesizes into CDK_OUTDIR (cdk.out when run
// by the CDK CLI).
//
//	CDK_OUTDIR=cdk.out go run .                                   # dev, no CLI, no AWS credentials
//	CDK_OUTDIR=cdk.out CDK_CONTEXT_JSON='{"stage":"prod"}' go run .
//	cdk synth -c stage=prod                                       # through the CLI (cdk.json: app "go run .")
//
// The stack is environment-agnostic unless CDK_DEFAULT_ACCOUNT and
// CDK_DEFAULT_REGION are both set (the CLI sets them from credentials), so
// synthesis needs no credentials. A service of its own has an app like
// this one that points stack.Props.Bundles at its bundles (see
// examples/invoices/infra).
package main

import (
	"fmt"
	"os"

	"github.com/aws/aws-cdk-go/awscdk/v2"
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
	props.Env = stack.EnvironmentFromCLI()
	if _, err := stack.New(app, settings.StackName(), props); err != nil {
		return err
	}
	assembly, err := stack.Synth(app)
	if err != nil {
		return err
	}
	for _, st := range *assembly.Stacks() {
		fmt.Fprintf(os.Stderr, "synthesized %s into %s\n", *st.StackName(), *assembly.Directory())
	}
	return nil
}
