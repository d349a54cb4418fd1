// Package testkeys holds the configuration keys meant for tests, chaos
// runs and dev drills, never for production: faults.* (fault injection in
// a process's own providers) and diag.* (this repository's diag.drill
// fault drill and its checkout pipeline's payment ledger). They are not
// part of the public config.Config: a process reads them from its
// environment with Load, named as every key is
// (PIPELINE_ORCHESTRATOR_FAULTS_DISPATCH_DROP_RATE), and the CDK stack
// sets them in stage dev only. qasync serve and the Lambda functions
// apply the faults (package wiring); the example pipelines read diag.*.
package testkeys

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/qasync/qasync/shared/config"
)

// Keys are the test-only keys of one process.
type Keys struct {
	Faults Faults
	Diag   Diag
}

// Faults inject failures into a process's own providers (chaos runs).
// Every one is 0 (off) by default.
type Faults struct {
	// DynamoErrorRate is key faults.dynamo-error-rate, 0 to 0.5: the share
	// of DynamoDB request attempts failed with an injected throttling or
	// 500 error before they are sent, which the SDK's retryer then
	// handles like real ones.
	DynamoErrorRate float64
	// DispatchDuplicateRate is key faults.dispatch-duplicate-rate, 0 to
	// 0.5: the share of dispatched work items sent twice.
	DispatchDuplicateRate float64
	// DispatchDropRate is key faults.dispatch-drop-rate, 0 to 0.5: the
	// share of dispatched work items silently not sent (as if lost), left
	// to the sweeper.
	DispatchDropRate float64
	// CommitErrorRate is key faults.commit-error-rate, 0 to 0.5: the share
	// of step commits failed with an injected unavailable error, half of
	// them before the write and half after it landed (an unknown outcome).
	CommitErrorRate float64
	// DLQErrorRate is key faults.dlq-error-rate, 0 to 1: the share of
	// dead-letter publishes failed, as in a DLQ outage.
	DLQErrorRate float64
	// DLQOutageUntil is key faults.dlq-outage-until-ms, at least 0 (none):
	// every dead-letter publish fails until this wall-clock time (Unix
	// milliseconds), an outage that processes started at different times
	// share.
	DLQOutageUntil int64
	// ClockOffset is key faults.clock-offset-ms, -60000 to 60000:
	// milliseconds added to this process's clock, to run workers with
	// skewed clocks.
	ClockOffset time.Duration
}

// Any reports whether a fault is set.
func (f Faults) Any() bool { return f != Faults{} }

// Diag are the knobs of this repository's example pipelines.
type Diag struct {
	// Enabled is key diag.enabled, default false: serve the diag.drill
	// fault drill (make run and the CDK dev stage set it).
	Enabled bool
	// DrillVersions is key diag.drill-versions, default "1": which
	// definitions of diag.drill the process serves ("1", "2", "1,2" or
	// "2,1"; the last listed takes new submissions).
	DrillVersions string
	// AllowCrash is key diag.allow-crash, default false: let diag.drill's
	// crashAttempts exit the process to simulate a worker crash.
	AllowCrash bool
	// PaymentLedger is key diag.payment-ledger, default empty: a file where
	// checkout's fake payment provider appends each charge and looks
	// charges up, to count them across processes.
	PaymentLedger string
	// PaymentPause is key diag.payment-pause, 0 to 10m: with
	// diag.payment-ledger, how long capture-payment waits after charging.
	PaymentPause time.Duration
}

// Load reads the keys from the environment through lookup (os.LookupEnv)
// over their defaults. An invalid value is an error naming its key; every
// one is reported.
func Load(lookup func(string) (string, bool)) (Keys, error) {
	k := Keys{Diag: Diag{DrillVersions: "1"}}
	var errs []error
	read := func(short string, parse func(string) error) {
		key := config.FullKey(short)
		if v, ok := lookup(config.EnvName(key)); ok && v != "" {
			if err := parse(strings.TrimSpace(v)); err != nil {
				errs = append(errs, fmt.Errorf("%s: %q: %w", key, v, err))
			}
		}
	}
	rate := func(dst *float64, most float64) func(string) error {
		return func(s string) error {
			f, err := strconv.ParseFloat(s, 64)
			if err != nil || math.IsNaN(f) || f < 0 || f > most {
				return fmt.Errorf("want a number from 0 to %g", most)
			}
			*dst = f
			return nil
		}
	}
	flag := func(dst *bool) func(string) error {
		return func(s string) (err error) {
			if *dst, err = strconv.ParseBool(s); err != nil {
				return errors.New("want true or false")
			}
			return nil
		}
	}
	f, d := &k.Faults, &k.Diag
	read("faults.dynamo-error-rate", rate(&f.DynamoErrorRate, 0.5))
	read("faults.dispatch-duplicate-rate", rate(&f.DispatchDuplicateRate, 0.5))
	read("faults.dispatch-drop-rate", rate(&f.DispatchDropRate, 0.5))
	read("faults.commit-error-rate", rate(&f.CommitErrorRate, 0.5))
	read("faults.dlq-error-rate", rate(&f.DLQErrorRate, 1))
	read("faults.dlq-outage-until-ms", func(s string) (err error) {
		if f.DLQOutageUntil, err = strconv.ParseInt(s, 10, 64); err != nil || f.DLQOutageUntil < 0 {
			return errors.New("want Unix milliseconds, at least 0")
		}
		return nil
	})
	read("faults.clock-offset-ms", func(s string) error {
		ms, err := strconv.ParseInt(s, 10, 64)
		if err != nil || ms < -60000 || ms > 60000 {
			return errors.New("want milliseconds from -60000 to 60000")
		}
		f.ClockOffset = time.Duration(ms) * time.Millisecond
		return nil
	})
	read("diag.enabled", flag(&d.Enabled))
	read("diag.drill-versions", func(s string) error {
		switch s {
		case "1", "2", "1,2", "2,1":
			d.DrillVersions = s
			return nil
		}
		return errors.New("want 1, 2, 1,2 or 2,1")
	})
	read("diag.allow-crash", flag(&d.AllowCrash))
	read("diag.payment-ledger", func(s string) error { d.PaymentLedger = s; return nil })
	read("diag.payment-pause", func(s string) (err error) {
		if d.PaymentPause, err = config.ParseDuration(s); err != nil || d.PaymentPause < 0 || d.PaymentPause > 10*time.Minute {
			return errors.New("want a duration from 0 to 10m")
		}
		return nil
	})
	return k, errors.Join(errs...)
}

// EnvNames lists the environment variables Load reads (every test-only
// key's), so that a process's check of unknown variables
// (config.Config.Check) knows them.
func EnvNames() []string {
	var names []string
	_, _ = Load(func(name string) (string, bool) { names = append(names, name); return "", false })
	return names
}
