package benchdurable_test

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/qasync/qasync/shared/internal/benchdurable"
)

// Flags of the benchmark (go test ... -args -o json -executions 100);
// each defaults to its BENCH_* variable, then to DefaultConfig.
var (
	output     = flag.String("o", envOr("BENCH_OUTPUT", "markdown"), "output: markdown or json (BENCH_OUTPUT)")
	outFile    = flag.String("out", os.Getenv("BENCH_OUT"), "also write the output to this file (BENCH_OUT)")
	executions = flag.Int("executions", 0, "burst size (default BENCH_EXECUTIONS, else 300)")
	rate       = flag.Float64("rate", 0, "steady submits per second (default BENCH_RATE, else 10)")
	duration   = flag.Duration("duration", 0, "steady load length (default BENCH_DURATION, else 30s)")
	submitters = flag.Int("submitters", 0, "concurrent submitters of the burst (default 4)")
)

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// TestBenchDurable is make bench-durable: it runs only with
// BENCH_DURABLE=1 (and the local stack), prints the report on stdout and
// fails only when the run itself breaks, never on a figure.
func TestBenchDurable(t *testing.T) {
	if os.Getenv("BENCH_DURABLE") != "1" {
		t.Skip("the durable benchmark runs with BENCH_DURABLE=1 (make bench-durable)")
	}
	if *output != "markdown" && *output != "json" {
		t.Fatalf("-o %q (BENCH_OUTPUT): want markdown or json", *output)
	}
	cfg, err := benchdurable.ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if *executions > 0 {
		cfg.Executions = *executions
	}
	if *rate > 0 {
		cfg.Rate = *rate
	}
	if *duration > 0 {
		cfg.Duration = *duration
	}
	if *submitters > 0 {
		cfg.Submitters = *submitters
	}
	rep := benchdurable.Run(t, cfg)
	if t.Failed() {
		return
	}
	var out []byte
	if *output == "json" {
		if out, err = rep.JSON(); err != nil {
			t.Fatal(err)
		}
		out = append(out, '\n')
	} else {
		out = []byte(rep.Markdown())
	}
	fmt.Printf("\n%s\n", out)
	if *outFile != "" {
		if err := os.WriteFile(*outFile, out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
