// Package diag is a fault drill operators run against a deployment:
// prepare -> work -> finish. The input scripts how long work sleeps, how
// many of its attempts fail and how, and how large the result is, so that
// retries, dead-lettering, lease renewal, cancellation and chunked
// payloads can be exercised end to end. For crash tests only, it can also
// exit the whole process on chosen attempts (Drill.CrashAttempts, off
// unless AllowCrash).
//
// Deployments register it only when configuration enables it
// (pipeline.orchestrator.diag.enabled; see pipelines.Options): make run
// and make local-cloud do, production stages do not. Its inputs are
// bounded (MaxSleepMs, MaxResultBytes, MaxFailAttempts, MaxCrashAttempts).
package diag

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/qasync/qasync/shared/pipeline"
)

// ID is the pipeline id.
const ID = "diag.drill"

// Step names, in order (StepVerify only in version 2).
const (
	StepPrepare = "prepare"
	StepWork    = "work"
	StepVerify  = "verify"
	StepFinish  = "finish"
)

// Error codes.
const (
	// CodeInvalidDrill is the non-retryable code of a drill that fails validation.
	CodeInvalidDrill = "invalid_drill"
	// CodeDrillFailure is the code of a scripted failure of work.
	CodeDrillFailure = "drill_failure"
)

// Failure modes of Drill.FailMode; empty means FailModeRetryable.
const (
	// FailModeRetryable fails with a retryable error: the runtime retries.
	FailModeRetryable = "retryable"
	// FailModeNonRetryable fails with a non-retryable error: straight to the DLQ.
	FailModeNonRetryable = "non_retryable"
)

// CrashExitCode is the exit status of a process that work crashed on
// purpose (Drill.CrashAttempts).
const CrashExitCode = 3

// allowCrash gates Drill.CrashAttempts; see AllowCrash.
var allowCrash atomic.Bool

// AllowCrash lets (or, with false, stops) Drill.CrashAttempts exit the
// process. It is off by default and must never be on in production:
// qasync serve turns it on only when its configuration sets
// pipeline.orchestrator.diag.allow-crash=true, for the crash tests. While
// it is off, a drill with crashAttempts fails validation.
func AllowCrash(on bool) { allowCrash.Store(on) }

// Limits of a Drill. They bound what one submit can cost: the drill is
// for local and dev use (served only with diag.enabled), yet a caller
// there should not hold a worker for long or turn a small request into a
// large stored result. A drill beyond them fails validation
// (non-retryable CodeInvalidDrill).
const (
	// MaxSleepMs is the longest sleep of one work attempt: 60 s, enough
	// to outlast a lease and exercise renewal and takeover.
	MaxSleepMs = 60_000
	// MaxResultBytes is the largest Result.Data: 1 MiB, enough to span
	// several payload chunks (payload.ChunkSize).
	MaxResultBytes = 1 << 20
	// MaxFailAttempts is the most scripted failures of work: 10, more
	// than any sane retry policy allows.
	MaxFailAttempts = 10
	// MaxCrashAttempts is the most scripted crashes of work: 100 (crashes
	// are test only, behind AllowCrash; a poison-message test crashes
	// every attempt).
	MaxCrashAttempts = 100
)

// Drill is the pipeline's input. Every field is optional.
type Drill struct {
	// SleepMs is how long work sleeps before deciding to fail (0..MaxSleepMs).
	SleepMs int `json:"sleepMs,omitempty"`
	// FailAttempts is how many attempts of work fail (attempts
	// 1..FailAttempts; 0..MaxFailAttempts).
	FailAttempts int `json:"failAttempts,omitempty"`
	// FailMode is FailModeRetryable (default) or FailModeNonRetryable.
	FailMode string `json:"failMode,omitempty"`
	// ResultBytes is the length of Result.Data (0..MaxResultBytes).
	ResultBytes int `json:"resultBytes,omitempty"`
	// Echo is returned in Result.Echo as the same JSON value (compacted,
	// numbers kept digit for digit).
	Echo json.RawMessage `json:"echo,omitempty"`
	// CrashAttempts makes attempts 1..CrashAttempts of work exit the whole
	// process with CrashExitCode after the sleep (a simulated worker
	// crash: no commit, the lease is left to expire);
	// 0..MaxCrashAttempts. Test only: it needs
	// AllowCrash(true), otherwise the drill fails validation.
	CrashAttempts int `json:"crashAttempts,omitempty"`
}

// Result is the pipeline's final output.
type Result struct {
	// Echo is Drill.Echo; omitted when the drill had none.
	Echo json.RawMessage `json:"echo,omitempty"`
	// WorkAttempt is the attempt of work that succeeded.
	WorkAttempt int `json:"workAttempt"`
	// Data is exactly Drill.ResultBytes bytes of deterministic ASCII text.
	Data string `json:"data"`
	// Steps names the steps whose committed outputs led to this result,
	// in order: the definition the execution ran under.
	Steps []string `json:"steps"`
}

// state is what prepare hands to work and work to finish.
type state struct {
	Drill
	WorkAttempt int      `json:"workAttempt,omitempty"`
	Steps       []string `json:"steps,omitempty"`
}

// Pipeline returns the drill pipeline (version 1: prepare, work, finish).
func Pipeline() pipeline.Pipeline {
	return pipeline.Pipeline{ID: ID, Steps: []pipeline.Step{
		pipeline.NewStep(StepPrepare, prepare),
		pipeline.NewStep(StepWork, work),
		pipeline.NewStep(StepFinish, finish),
	}}
}

// PipelineV2 is the drill's second definition, version "v2": prepare,
// work, verify (which changes nothing but its trace), finish. Rolling
// deploys are rehearsed with it (config key diag.drill-versions).
func PipelineV2() pipeline.Pipeline {
	return pipeline.Pipeline{ID: ID, Version: "v2", Steps: []pipeline.Step{
		pipeline.NewStep(StepPrepare, prepare),
		pipeline.NewStep(StepWork, work),
		pipeline.NewStep(StepVerify, verify),
		pipeline.NewStep(StepFinish, finish),
	}}
}

// Versions returns the drill definitions that versions names ("1", "2",
// "1,2" or "2,1"): the last one listed takes new submissions, the others
// only finish the executions bound to them (Draining).
func Versions(versions string) ([]pipeline.Pipeline, error) {
	var out []pipeline.Pipeline
	parts := strings.Split(versions, ",")
	for i, v := range parts {
		var p pipeline.Pipeline
		switch strings.TrimSpace(v) {
		case "1":
			p = Pipeline()
		case "2":
			p = PipelineV2()
		default:
			return nil, fmt.Errorf("diag: unknown drill version %q (want 1 or 2)", v)
		}
		p.Draining = i < len(parts)-1
		out = append(out, p)
	}
	return out, nil
}

func prepare(ctx context.Context, _ pipeline.StepInfo, d Drill) (state, error) {
	if err := ctx.Err(); err != nil {
		return state{}, context.Cause(ctx)
	}
	if err := d.validate(); err != nil {
		return state{}, err
	}
	return state{Drill: d, Steps: []string{StepPrepare}}, nil
}

func verify(ctx context.Context, _ pipeline.StepInfo, s state) (state, error) {
	if err := ctx.Err(); err != nil {
		return state{}, context.Cause(ctx)
	}
	s.Steps = append(s.Steps, StepVerify)
	return s, nil
}

func work(ctx context.Context, info pipeline.StepInfo, s state) (state, error) {
	if err := sleep(ctx, time.Duration(s.SleepMs)*time.Millisecond); err != nil {
		return state{}, err
	}
	log := info.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if s.CrashAttempts > 0 && info.Attempt <= s.CrashAttempts {
		if !allowCrash.Load() {
			return state{}, pipeline.NonRetryable(CodeInvalidDrill, errCrashNotAllowed)
		}
		log.LogAttrs(ctx, slog.LevelWarn, "drill_crash", slog.String("event", "drill_crash"),
			slog.Int("crash_attempts", s.CrashAttempts), slog.Int("exit_code", CrashExitCode))
		os.Exit(CrashExitCode)
	}
	failing := s.FailAttempts > 0 && info.Attempt <= s.FailAttempts
	log.LogAttrs(ctx, slog.LevelInfo, "drill_work", slog.String("event", "drill_work"),
		slog.Int("sleep_ms", s.SleepMs), slog.Bool("scripted_failure", failing))
	if failing {
		err := fmt.Errorf("drill failure on attempt %d of %d scripted", info.Attempt, s.FailAttempts)
		if s.FailMode == FailModeNonRetryable {
			return state{}, pipeline.NonRetryable(CodeDrillFailure, err)
		}
		return state{}, pipeline.Retryable(CodeDrillFailure, err)
	}
	s.WorkAttempt = info.Attempt
	s.Steps = append(s.Steps, StepWork)
	return s, nil
}

func finish(ctx context.Context, _ pipeline.StepInfo, s state) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, context.Cause(ctx)
	}
	if err := s.validate(); err != nil { // the bounds text relies on
		return Result{}, err
	}
	return Result{Echo: s.Echo, WorkAttempt: s.WorkAttempt, Data: text(s.ResultBytes), Steps: append(s.Steps, StepFinish)}, nil
}

func (d Drill) validate() error {
	var msg string
	switch {
	case d.SleepMs < 0 || d.SleepMs > MaxSleepMs:
		msg = fmt.Sprintf("sleepMs must be 0..%d", MaxSleepMs)
	case d.FailAttempts < 0 || d.FailAttempts > MaxFailAttempts:
		msg = fmt.Sprintf("failAttempts must be 0..%d", MaxFailAttempts)
	case d.FailMode != "" && d.FailMode != FailModeRetryable && d.FailMode != FailModeNonRetryable:
		msg = fmt.Sprintf("failMode must be %q or %q", FailModeRetryable, FailModeNonRetryable)
	case d.ResultBytes < 0 || d.ResultBytes > MaxResultBytes:
		msg = fmt.Sprintf("resultBytes must be 0..%d", MaxResultBytes)
	case d.CrashAttempts < 0 || d.CrashAttempts > MaxCrashAttempts:
		msg = fmt.Sprintf("crashAttempts must be 0..%d", MaxCrashAttempts)
	case d.CrashAttempts > 0 && !allowCrash.Load():
		msg = errCrashNotAllowed.Error()
	default:
		return nil
	}
	return pipeline.NonRetryable(CodeInvalidDrill, errors.New(msg))
}

// errCrashNotAllowed refuses crashAttempts while AllowCrash is off.
var errCrashNotAllowed = errors.New("crashAttempts needs pipeline.orchestrator.diag.allow-crash=true (test only)")

// sleep waits for d or until ctx ends, returning ctx's cause in that case.
func sleep(ctx context.Context, d time.Duration) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// pattern is the text Result.Data repeats.
const pattern = "qasync-drill-0123456789\n"

// text returns exactly n bytes of pattern repeated and truncated.
func text(n int) string {
	if n <= 0 {
		return ""
	}
	return strings.Repeat(pattern, n/len(pattern)+1)[:n]
}
