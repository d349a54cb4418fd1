package testkeys_test

import (
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/internal/testkeys"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// TestLoad: the keys default to off (diag.drill-versions to "1"), read
// every variable, and refuse each invalid value naming its key.
func TestLoad(t *testing.T) {
	k, err := testkeys.Load(env(nil))
	if err != nil || k.Faults.Any() || k.Diag != (testkeys.Diag{DrillVersions: "1"}) {
		t.Fatalf("defaults %+v, %v", k, err)
	}
	k, err = testkeys.Load(env(map[string]string{
		"PIPELINE_ORCHESTRATOR_FAULTS_DYNAMO_ERROR_RATE":       "0.1",
		"PIPELINE_ORCHESTRATOR_FAULTS_DISPATCH_DUPLICATE_RATE": "0.2",
		"PIPELINE_ORCHESTRATOR_FAULTS_DISPATCH_DROP_RATE":      "0.3",
		"PIPELINE_ORCHESTRATOR_FAULTS_COMMIT_ERROR_RATE":       "0.4",
		"PIPELINE_ORCHESTRATOR_FAULTS_DLQ_ERROR_RATE":          "1",
		"PIPELINE_ORCHESTRATOR_FAULTS_DLQ_OUTAGE_UNTIL_MS":     "1700000000000",
		"PIPELINE_ORCHESTRATOR_FAULTS_CLOCK_OFFSET_MS":         "-1500",
		"PIPELINE_ORCHESTRATOR_DIAG_ENABLED":                   "true",
		"PIPELINE_ORCHESTRATOR_DIAG_DRILL_VERSIONS":            "1,2",
		"PIPELINE_ORCHESTRATOR_DIAG_ALLOW_CRASH":               "true",
		"PIPELINE_ORCHESTRATOR_DIAG_PAYMENT_LEDGER":            "/tmp/ledger",
		"PIPELINE_ORCHESTRATOR_DIAG_PAYMENT_PAUSE":             "250ms",
	}))
	want := testkeys.Keys{
		Faults: testkeys.Faults{DynamoErrorRate: 0.1, DispatchDuplicateRate: 0.2, DispatchDropRate: 0.3, CommitErrorRate: 0.4,
			DLQErrorRate: 1, DLQOutageUntil: 1700000000000, ClockOffset: -1500 * time.Millisecond},
		Diag: testkeys.Diag{Enabled: true, DrillVersions: "1,2", AllowCrash: true, PaymentLedger: "/tmp/ledger", PaymentPause: 250 * time.Millisecond},
	}
	if err != nil || k != want {
		t.Fatalf("loaded %+v, %v; want %+v", k, err, want)
	}
	bad := map[string]string{
		"PIPELINE_ORCHESTRATOR_FAULTS_DYNAMO_ERROR_RATE":   "0.6",
		"PIPELINE_ORCHESTRATOR_FAULTS_DLQ_OUTAGE_UNTIL_MS": "-1",
		"PIPELINE_ORCHESTRATOR_FAULTS_CLOCK_OFFSET_MS":     "60001",
		"PIPELINE_ORCHESTRATOR_DIAG_ENABLED":               "yes please",
		"PIPELINE_ORCHESTRATOR_DIAG_DRILL_VERSIONS":        "3",
		"PIPELINE_ORCHESTRATOR_DIAG_PAYMENT_PAUSE":         "11m",
	}
	_, err = testkeys.Load(env(bad))
	for _, key := range []string{"faults.dynamo-error-rate", "faults.dlq-outage-until-ms", "faults.clock-offset-ms", "diag.enabled", "diag.drill-versions", "diag.payment-pause"} {
		if err == nil || !strings.Contains(err.Error(), "pipeline.orchestrator."+key+":") {
			t.Errorf("error does not name %s: %v", key, err)
		}
	}
}

// TestEnvNames: every variable Load reads is listed (and only those), so
// that qasync serve does not call a test-only key unknown.
func TestEnvNames(t *testing.T) {
	read := map[string]bool{}
	_, _ = testkeys.Load(func(name string) (string, bool) { read[name] = true; return "", false })
	names := testkeys.EnvNames()
	if len(names) != len(read) || len(names) != 12 {
		t.Fatalf("EnvNames() = %v, Load reads %v", names, read)
	}
	for _, n := range names {
		if !read[n] || !strings.HasPrefix(n, "PIPELINE_ORCHESTRATOR_") {
			t.Errorf("EnvNames lists %s", n)
		}
	}
}
