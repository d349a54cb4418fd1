package pipeline_test

import (
	"context"
	"fmt"
	"time"

	"github.com/qasync/qasync/shared/pipeline"
)

// A pipeline of typed steps; each step is one committed transition, its
// output the next step's input.
func ExampleNewRegistry() {
	type Order struct {
		ID    string `json:"id"`
		Cents int64  `json:"cents"`
	}
	validate := pipeline.NewStep("validate", func(_ context.Context, _ pipeline.StepInfo, o Order) (Order, error) {
		if o.Cents <= 0 {
			return o, pipeline.NonRetryable("invalid_order", fmt.Errorf("order %s: amount must be positive", o.ID))
		}
		return o, nil
	})
	reserve := pipeline.NewStep("reserve", func(_ context.Context, info pipeline.StepInfo, o Order) (Order, error) {
		// info.IdempotencyKey is the same on every attempt of this step:
		// pass it to the inventory service so a retry reserves nothing twice.
		return o, nil
	}, pipeline.WithRetry(pipeline.RetryPolicy{MaxRetries: 5, Delay: time.Second, Multiplier: 2, MaxDelay: time.Minute}))

	reg, err := pipeline.NewRegistry(pipeline.Pipeline{ID: "shop.order", Steps: []pipeline.Step{validate, reserve}})
	if err != nil {
		panic(err)
	}
	p, _ := reg.Get("shop.order")
	fmt.Println(p.ID, len(p.Steps), p.VersionID() != "")
	// Output:
	// shop.order 2 true
}

// Changing a pipeline's steps makes a new definition: executions already
// submitted keep running the old one, so register both until they finish.
func ExampleRegistry_Version() {
	step := func(name string) pipeline.Step {
		return pipeline.NewStep(name, func(_ context.Context, _ pipeline.StepInfo, in map[string]any) (map[string]any, error) {
			return in, nil
		})
	}
	v1 := pipeline.Pipeline{ID: "shop.order", Draining: true, Steps: []pipeline.Step{step("validate"), step("reserve")}}
	v2 := pipeline.Pipeline{ID: "shop.order", Version: "v2", Steps: []pipeline.Step{step("validate"), step("price"), step("reserve")}}
	reg, err := pipeline.NewRegistry(v1, v2)
	if err != nil {
		panic(err)
	}
	current, _ := reg.Get("shop.order") // what new submissions are bound to
	_, servesOld := reg.Version("shop.order", v1.VersionID())
	fmt.Println(current.Version, len(current.Steps), servesOld)
	// Output:
	// v2 3 true
}

// MustRegistry suits a main: an invalid pipeline (here, a duplicate step
// name) stops the program before it serves anything.
func ExampleMustRegistry() {
	noop := pipeline.NewStep("noop", func(_ context.Context, _ pipeline.StepInfo, in map[string]any) (map[string]any, error) {
		return in, nil
	})
	reg := pipeline.MustRegistry(pipeline.Pipeline{ID: "demo", Steps: []pipeline.Step{noop}})
	fmt.Println(reg.IDs())

	defer func() { fmt.Println("refused:", recover() != nil) }()
	pipeline.MustRegistry(pipeline.Pipeline{ID: "demo", Steps: []pipeline.Step{noop, noop}})
	// Output:
	// [demo]
	// refused: true
}

// Durable sleeps between steps: the execution waits three days, then
// until the invoice's due date, holding no worker meanwhile; each step
// after a sleep gets the sleep's input.
func ExampleSleep() {
	type Invoice struct {
		ID  string `json:"id"`
		Due int64  `json:"due"` // unix seconds
	}
	step := func(name string) pipeline.Step {
		return pipeline.NewStep(name, func(_ context.Context, _ pipeline.StepInfo, inv Invoice) (Invoice, error) { return inv, nil })
	}
	reg, err := pipeline.NewRegistry(pipeline.Pipeline{ID: "billing.invoice", Steps: []pipeline.Step{
		step("send"),
		pipeline.Sleep("grace", 3*24*time.Hour),
		step("remind"),
		pipeline.SleepUntil("until-due", func(inv Invoice) time.Time { return time.Unix(inv.Due, 0) }),
		step("escalate"),
	}})
	if err != nil {
		panic(err)
	}
	p, _ := reg.Get("billing.invoice")
	for _, s := range p.Steps {
		fmt.Println(s.Name, s.IsSleep())
	}
	// Output:
	// send false
	// grace true
	// remind false
	// until-due true
	// escalate false
}
