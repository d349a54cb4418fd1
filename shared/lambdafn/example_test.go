package lambdafn_test

import (
	"github.com/qasync/qasync/shared/lambdafn"
	"github.com/qasync/qasync/shared/pipeline"
)

// The worker function of a service: its whole main. The other four are
// the same with lambdafn.Submit, lambdafn.Sweeper, lambdafn.DLQ and
// lambdafn.History; the CDK construct deploys the five bundles and sets
// their configuration.
func ExampleMain() {
	reg, err := pipeline.NewRegistry( /* the service's pipelines */ )
	if err != nil {
		panic(err)
	}
	if false { // in functions/worker/main.go: func main() { lambdafn.Main(lambdafn.Worker, reg) }
		lambdafn.Main(lambdafn.Worker, reg)
	}
}
