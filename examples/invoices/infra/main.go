// Command infra is the CDK app of the invoices service: it deploys the
// service with qasync's stack construct (package
// github.com/qasync/qasync/infra/cdk/stack), its five functions from the
// service's own bundles in ../dist (<fn>/bootstrap and <fn>.zip, built
// for linux/arm64 from ../functions/<fn>). The settings come from CDK
// context as for qasync's own app, with service "invoices" as the
// default: the stack is invoices-<stage>, its tables and queues
// invoices-<stage>-*.
//
//	CDK_OUTDIR=cdk.out go run .              # synthesize without the CDK CLI or AWS credentials
//	cdk synth -c stage=dev                   # through the CLI (cdk.json: app "go run .")
//	cdk deploy -c stage=prod
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"

	"github.com/qasync/qasync/infra/cdk/stack"
)

// Service is the service name: the stack and its resources are named
// after it (context "service" overrides it).
const Service = "invoices"

func main() {
	err := run()
	jsii.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "invoices cdk:", err)
		os.Exit(1)
	}
}

func run() error {
	dir, err := os.Getwd()
	if err != nil {
		return err
	}
	app := newApp(nil)
	if _, err := newStack(app, dir); err != nil {
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

// newApp returns the CDK app with the service's context defaults; props
// may set more (the tests set the output directory).
func newApp(props *awscdk.AppProps) awscdk.App {
	if props == nil {
		props = &awscdk.AppProps{}
	}
	ctx := map[string]any{stack.CtxService: Service}
	if props.Context != nil {
		for k, v := range *props.Context {
			ctx[k] = v
		}
	}
	props.Context = &ctx
	return awscdk.NewApp(props)
}

// newStack adds the service's stack to app: the settings from context,
// the functions from dir/../dist.
func newStack(app awscdk.App, dir string) (awscdk.Stack, error) {
	settings, err := stack.SettingsFromContext(app.Node(), dir)
	if err != nil {
		return nil, err
	}
	return stack.New(app, settings.StackName(), stack.Props{
		StackProps: awscdk.StackProps{Env: stack.EnvironmentFromCLI()},
		Settings:   settings,
		Bundles:    stack.Bundles{Dir: filepath.Join(dir, "..", "dist")},
	})
}
