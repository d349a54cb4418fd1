package diag_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/qasync/qasync/pipelines/diag"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
)

const (
	prepare = iota
	work
	finish
)

func info(step, attempt int) pipeline.StepInfo {
	p := diag.Pipeline()
	return pipeline.StepInfo{
		ExecutionID: "exec-1", TenantID: "ops", PipelineID: p.ID,
		StepName: p.Steps[step].Name, StepIndex: step, Attempt: attempt,
		IdempotencyKey: fmt.Sprintf("ops:exec-1:%d", step),
	}
}

func raw(t *testing.T, s string) payload.Payload {
	t.Helper()
	p, err := payload.RawJSON([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func run(ctx context.Context, step, attempt int, in payload.Payload) (payload.Payload, error) {
	return diag.Pipeline().Steps[step].Run(ctx, info(step, attempt), in)
}

// runAll runs prepare, work (at workAttempt) and finish in turn.
func runAll(t *testing.T, in string, workAttempt int) (payload.Payload, error) {
	t.Helper()
	p := raw(t, in)
	for step := range diag.Pipeline().Steps {
		attempt := 1
		if step == work {
			attempt = workAttempt
		}
		out, err := run(t.Context(), step, attempt, p)
		if err != nil {
			return payload.Payload{}, err
		}
		p = out
	}
	return p, nil
}

func TestPipelineShape(t *testing.T) {
	t.Parallel()
	p := diag.Pipeline()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if p.ID != diag.ID || len(p.Steps) != 3 ||
		p.Steps[prepare].Name != "prepare" || p.Steps[work].Name != "work" || p.Steps[finish].Name != "finish" {
		t.Fatalf("unexpected pipeline %s with %d steps", p.ID, len(p.Steps))
	}
}

func TestEmptyDrill(t *testing.T) {
	t.Parallel()
	out, err := runAll(t, `{}`, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(out.Data), `{"workAttempt":1,"data":"","steps":["prepare","work","finish"]}`; got != want {
		t.Fatalf("result %s, want %s", got, want)
	}
}

// TestInvalidDrills: a drill outside the documented bounds (sleep at most
// 60 s, result at most 1 MiB, at most 10 scripted failures, 100 crashes)
// fails validation, non-retryably, naming the field.
func TestInvalidDrills(t *testing.T) {
	t.Parallel()
	cases := map[string]struct{ in, field string }{
		"negative sleep":     {`{"sleepMs":-1}`, "sleepMs"},
		"sleep too long":     {fmt.Sprintf(`{"sleepMs":%d}`, diag.MaxSleepMs+1), "sleepMs"},
		"sleep of 15 min":    {`{"sleepMs":900000}`, "sleepMs"},
		"negative attempts":  {`{"failAttempts":-1}`, "failAttempts"},
		"too many failures":  {fmt.Sprintf(`{"failAttempts":%d}`, diag.MaxFailAttempts+1), "failAttempts"},
		"too many crashes":   {fmt.Sprintf(`{"crashAttempts":%d}`, diag.MaxCrashAttempts+1), "crashAttempts"},
		"16 MiB result":      {fmt.Sprintf(`{"resultBytes":%d}`, 16<<20), "resultBytes"},
		"unknown mode":       {`{"failMode":"sometimes"}`, "failMode"},
		"negative bytes":     {`{"resultBytes":-1}`, "resultBytes"},
		"too many bytes":     {fmt.Sprintf(`{"resultBytes":%d}`, diag.MaxResultBytes+1), "resultBytes"},
		"bad mode with echo": {`{"failMode":"x","echo":{"secret":"hunter2"}}`, "failMode"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := run(t.Context(), prepare, 1, raw(t, tc.in))
			code, msg, retryable := pipeline.Classify(err)
			if err == nil || code != diag.CodeInvalidDrill || retryable {
				t.Fatalf("err %v, want non-retryable %s", err, diag.CodeInvalidDrill)
			}
			if !strings.Contains(msg, tc.field) || strings.Contains(msg, "hunter2") {
				t.Errorf("message %q: want it to name %s and not echo the payload", msg, tc.field)
			}
		})
	}
	t.Run("limits are valid", func(t *testing.T) {
		t.Parallel()
		in := fmt.Sprintf(`{"sleepMs":%d,"failAttempts":%d,"failMode":"non_retryable","resultBytes":%d}`, diag.MaxSleepMs, diag.MaxFailAttempts, diag.MaxResultBytes)
		if _, err := run(t.Context(), prepare, 1, raw(t, in)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("finish rechecks bounds", func(t *testing.T) {
		t.Parallel()
		_, err := run(t.Context(), finish, 1, raw(t, `{"resultBytes":-3,"workAttempt":1}`))
		if code, _, retryable := pipeline.Classify(err); err == nil || code != diag.CodeInvalidDrill || retryable {
			t.Fatalf("err %v, want non-retryable %s", err, diag.CodeInvalidDrill)
		}
	})
}

func TestFailScript(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"", diag.FailModeRetryable, diag.FailModeNonRetryable} {
		t.Run("mode="+mode, func(t *testing.T) {
			t.Parallel()
			in := fmt.Sprintf(`{"failAttempts":3,"failMode":%q}`, mode)
			for attempt := 1; attempt <= 3; attempt++ {
				_, err := runAll(t, in, attempt)
				code, msg, retryable := pipeline.Classify(err)
				if err == nil || code != diag.CodeDrillFailure {
					t.Fatalf("attempt %d: err %v, want %s", attempt, err, diag.CodeDrillFailure)
				}
				if want := mode != diag.FailModeNonRetryable; retryable != want {
					t.Errorf("attempt %d: retryable %v, want %v", attempt, retryable, want)
				}
				if want := fmt.Sprintf("drill failure on attempt %d of 3 scripted", attempt); msg != want {
					t.Errorf("message %q, want %q", msg, want)
				}
			}
			out, err := runAll(t, in, 4)
			if err != nil {
				t.Fatalf("attempt 4: %v", err)
			}
			if got, want := string(out.Data), `{"workAttempt":4,"data":"","steps":["prepare","work","finish"]}`; got != want {
				t.Fatalf("result %s, want %s", got, want)
			}
		})
	}
}

func TestResultBytes(t *testing.T) {
	t.Parallel()
	const pattern = "qasync-drill-0123456789\n"
	for _, n := range []int{0, 1, len(pattern) - 1, len(pattern), len(pattern) + 1, 1000, diag.MaxResultBytes} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			in := fmt.Sprintf(`{"resultBytes":%d}`, n)
			out, err := runAll(t, in, 1)
			if err != nil {
				t.Fatal(err)
			}
			var r diag.Result
			if err := out.DecodeJSON(&r); err != nil {
				t.Fatal(err)
			}
			if len(r.Data) != n {
				t.Fatalf("data is %d bytes, want %d", len(r.Data), n)
			}
			if want := strings.Repeat(pattern, n/len(pattern)+1)[:n]; r.Data != want {
				t.Fatal("data is not the repeated pattern")
			}
			again, err := runAll(t, in, 1)
			if err != nil || !bytes.Equal(again.Data, out.Data) {
				t.Fatalf("second run differs (err %v)", err)
			}
		})
	}
}

func TestEcho(t *testing.T) {
	t.Parallel()
	for _, echo := range []string{
		`{"a":[1,2.50,"x"],"big":123456789012345678901234567890,"n":null}`,
		`"just a string"`,
		`[ 1 , {"b" : true} ]`, // whitespace is compacted away
		`null`,
		`0`,
	} {
		t.Run(echo, func(t *testing.T) {
			t.Parallel()
			out, err := runAll(t, `{"echo":`+echo+`}`, 2)
			if err != nil {
				t.Fatal(err)
			}
			var r struct {
				Echo        json.RawMessage `json:"echo"`
				WorkAttempt int             `json:"workAttempt"`
			}
			if err := out.DecodeJSON(&r); err != nil {
				t.Fatal(err)
			}
			var want bytes.Buffer
			if err := json.Compact(&want, []byte(echo)); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(r.Echo, want.Bytes()) || r.WorkAttempt != 2 {
				t.Fatalf("echo %s workAttempt %d, want %s and 2", r.Echo, r.WorkAttempt, want.Bytes())
			}
		})
	}
}

func TestSleep(t *testing.T) {
	t.Parallel()
	drill := raw(t, fmt.Sprintf(`{"sleepMs":%d}`, diag.MaxSleepMs))

	t.Run("completes", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			if _, err := run(t.Context(), work, 1, drill); err != nil {
				t.Fatal(err)
			}
			if slept := time.Since(start); slept != time.Duration(diag.MaxSleepMs)*time.Millisecond {
				t.Fatalf("slept %v, want %dms", slept, diag.MaxSleepMs)
			}
		})
	})

	t.Run("cancelled", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			cause := errors.New("lease lost")
			ctx, cancel := context.WithCancelCause(t.Context())
			done := make(chan error, 1)
			start := time.Now()
			go func() {
				_, err := run(ctx, work, 1, drill)
				done <- err
			}()
			time.Sleep(30 * time.Second)
			synctest.Wait()
			select {
			case err := <-done:
				t.Fatalf("work returned early: %v", err)
			default:
			}
			cancel(cause)
			if err := <-done; !errors.Is(err, cause) {
				t.Fatalf("err %v, want %v", err, cause)
			}
			if elapsed := time.Since(start); elapsed != 30*time.Second {
				t.Fatalf("returned after %v, want 30s", elapsed)
			}
		})
	})

	t.Run("deadline", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			if _, err := run(ctx, work, 1, drill); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err %v, want deadline exceeded", err)
			}
		})
	})

	t.Run("already cancelled", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			start := time.Now()
			// No sleep at all: cancellation still wins over a scripted outcome.
			for _, in := range []payload.Payload{drill, raw(t, `{}`)} {
				if _, err := run(ctx, work, 1, in); !errors.Is(err, context.Canceled) {
					t.Fatalf("err %v, want context.Canceled", err)
				}
			}
			if time.Since(start) != 0 {
				t.Fatal("a cancelled step slept")
			}
		})
	})
}

// TestCrashAttempts: crashAttempts is refused unless AllowCrash is on;
// with it on, work exits the process with CrashExitCode on the scripted
// attempts only. (Not parallel: AllowCrash is process-wide.)
func TestCrashAttempts(t *testing.T) {
	if os.Getenv("DIAG_CRASH_CHILD") == "1" {
		diag.AllowCrash(true)
		_, _ = run(context.Background(), work, 1, raw(t, `{"crashAttempts":1}`))
		t.Fatal("work returned instead of exiting")
	}
	for _, in := range []string{`{"crashAttempts":1}`, `{"crashAttempts":-1}`} {
		_, err := run(t.Context(), prepare, 1, raw(t, in))
		if code, msg, retryable := pipeline.Classify(err); err == nil || code != diag.CodeInvalidDrill || retryable || !strings.Contains(msg, "crashAttempts") {
			t.Errorf("prepare %s with crashes off: %v, want non-retryable %s naming crashAttempts", in, err, diag.CodeInvalidDrill)
		}
	}
	if _, err := run(t.Context(), work, 1, raw(t, `{"crashAttempts":1}`)); err == nil {
		t.Error("work with crashes off did not refuse crashAttempts")
	}

	diag.AllowCrash(true)
	defer diag.AllowCrash(false)
	if _, err := run(t.Context(), prepare, 1, raw(t, `{"crashAttempts":2}`)); err != nil {
		t.Errorf("prepare with crashes on: %v", err)
	}
	if _, err := run(t.Context(), work, 3, raw(t, `{"crashAttempts":2}`)); err != nil {
		t.Errorf("work past the crash attempts: %v", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashAttempts$")
	cmd.Env = append(os.Environ(), "DIAG_CRASH_CHILD=1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != diag.CrashExitCode {
		t.Errorf("crashing work: %v, want exit status %d\n%s", err, diag.CrashExitCode, out)
	}
}

// TestVersionsTraceTheirSteps: each definition's result names the steps
// it ran, and Versions marks all but the last listed as draining.
func TestVersionsTraceTheirSteps(t *testing.T) {
	t.Parallel()
	both, err := diag.Versions("1,2")
	if err != nil || len(both) != 2 || !both[0].Draining || both[1].Draining || both[1].Version != "v2" {
		t.Fatalf("Versions(1,2) = %+v, %v", both, err)
	}
	if _, err := diag.Versions("3"); err == nil {
		t.Fatal("unknown version accepted")
	}
	in, _ := payload.RawJSON([]byte(`{}`))
	p := diag.PipelineV2()
	for i, s := range p.Steps {
		out, err := s.Run(t.Context(), pipeline.StepInfo{StepName: s.Name, StepIndex: i, Attempt: 1}, in)
		if err != nil {
			t.Fatal(err)
		}
		in = out
	}
	var res diag.Result
	if err := json.Unmarshal(in.Data, &res); err != nil || fmt.Sprint(res.Steps) != "[prepare work verify finish]" {
		t.Fatalf("v2 result %s, %v", in.Data, err)
	}
}
