package lambdafn_test

import (
	"github.com/qasync/qasync/shared/lambdafn"
	"github.com/qasync/qasync/shared/lambdafn/worker"
	"github.com/qasync/qasync/shared/pipeline"
)

// The worker function of a service: its whole main. The other four are
// the same with submit.Function, sweeper.Function, dlq.Function and
// history.Function (each from its package under lambdafn); the CDK
// construct deploys the five bundles and sets their configuration.
func ExampleMain() {
	reg, err := pipeline.NewRegistry( /* the service's pipelines */ )
	if err != nil {
		panic(err)
	}
	if false { // in functions/worker/main.go: func main() { lambdafn.Main(worker.Function, reg) }
		lambdafn.Main(worker.Function, reg)
	}
}
