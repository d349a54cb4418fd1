package payments_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qasync/qasync/examples/internal/servetest"
	"github.com/qasync/qasync/examples/payments"
	"github.com/qasync/qasync/examples/payments/provider"
	"github.com/qasync/qasync/shared/client"
	"github.com/qasync/qasync/shared/pipeline"
)

// The environment of the end-to-end test (the Makefile sets them).
const (
	// envN is the number of data rows of the file (default 200).
	envN = "QASYNC_PAYMENTS_N"
	// envState picks the providers: "embedded" (default: the embedded
	// store) or "dynamo" (DynamoDB Local and the SQS server of
	// scripts/stack.sh run, fresh tables and queues per run).
	envState = "QASYNC_PAYMENTS_STATE"
	// envInFlight overrides the map's in-flight limit (default 200).
	envInFlight = "QASYNC_PAYMENTS_MAX_IN_FLIGHT"
)

// awaitTimeout is the settlements' await timeout in the test: long enough
// that a delivered settlement (at most callbackDelay late, then retried
// while the child has not parked yet) cannot miss it on a loaded 2-core
// machine; the dropped ones cost it once, in parallel.
const awaitTimeout = 45 * time.Second

// callbackDelay is the provider's largest random delivery delay: the
// settlements arrive out of order.
const callbackDelay = time.Second

// rowKind is what the test made of a row.
type rowKind int

const (
	kindPaid      rowKind = iota // settles
	kindDropped                  // charged; its settlement never comes
	kindMalformed                // rejected by validate
)

// plan is the generated file and what must become of each row.
type plan struct {
	csv       []byte
	ids       []string // payment id per row ("" for a malformed row's)
	kinds     []rowKind
	cents     []int64
	currency  []string
	dup       map[string]bool // settlements delivered twice
	drop      map[string]bool // settlements never delivered
	failFirst map[string]bool // first create charged but answered 503
}

// count returns how many rows are of kind k.
func (p *plan) count(k rowKind) int {
	n := 0
	for _, x := range p.kinds {
		if x == k {
			n++
		}
	}
	return n
}

// newPlan generates a file of n data rows. About 4 % are malformed, in
// eight ways (one of them a payment id an earlier row has), about 1 % of
// the others have their settlement dropped, a third of the others have it
// delivered twice, and every 40th payment's first create loses its answer
// after charging.
func newPlan(n int) *plan {
	p := &plan{dup: map[string]bool{}, drop: map[string]bool{}, failFirst: map[string]bool{}}
	var b strings.Builder
	b.WriteString("payment_id,payee,amount,currency\n")
	currencies := []string{"EUR", "USD", "GBP"}
	malformed := 0
	for i := range n {
		id := fmt.Sprintf("P%06d", i)
		cents := 100 + int64(i*7919)%100_000
		cur := currencies[i%3]
		amount := fmt.Sprintf("%d.%02d", cents/100, cents%100)
		if i%25 == 7 {
			var line string
			switch malformed % 8 {
			case 0:
				line = fmt.Sprintf("%s,Payee %d,12.345,%s", id, i, cur) // three decimals
			case 1:
				line = fmt.Sprintf("%s,Payee %d,%s", id, i, amount) // a field missing
			case 2:
				line = fmt.Sprintf("%s,Payee %d,%s,euro", id, i, amount) // not an ISO code
			case 3:
				line = fmt.Sprintf(",Payee %d,%s,%s", i, amount, cur) // no payment id
			case 4:
				line = fmt.Sprintf("%s,Payee %d,%s,%s", p.ids[i-1], i, amount, cur) // the previous row's id
			case 5:
				line = fmt.Sprintf("%s,Payee %d,-5.00,%s", id, i, cur) // negative
			case 6:
				line = fmt.Sprintf("%s,Pay\"ee %d,%s,%s", id, i, amount, cur) // a bare quote: a CSV syntax error
			case 7:
				line = fmt.Sprintf("%s,Payee %d,%s,%s,extra", id, i, amount, cur) // a field too many
			}
			malformed++
			b.WriteString(line + "\n")
			p.ids, p.kinds, p.cents, p.currency = append(p.ids, ""), append(p.kinds, kindMalformed), append(p.cents, 0), append(p.currency, "")
			continue
		}
		fmt.Fprintf(&b, "%s,Payee %d,%s,%s\n", id, i, amount, cur)
		kind := kindPaid
		switch {
		case i%97 == 13:
			// 97 is prime: two dropped rows are never a multiple of the
			// in-flight limit apart (below 97 times it), so no slot waits
			// for two await timeouts in a row (a child's end releases
			// the child MaxInFlight rows after it).
			kind = kindDropped
			p.drop[id] = true
		case i%3 == 0:
			p.dup[id] = true
		}
		if i%40 == 21 {
			p.failFirst[id] = true
		}
		p.ids, p.kinds, p.cents, p.currency = append(p.ids, id), append(p.kinds, kind), append(p.cents, cents), append(p.currency, cur)
	}
	p.csv = []byte(b.String())
	return p
}

// The payments service's own local main pays a CSV file end to end over
// HTTP, against the fake provider with its faults: every malformed row is
// rejected (to the Item Reject Sink, its child FAILED item_rejected, no
// dead letter, tolerated by the map); every payment whose settlement never
// came failed with AWAIT_TIMEOUT (dead-lettered, tolerated); every other
// payment settled exactly once, charged once, although settlements came
// out of order and some twice, and some creates lost their answer after
// charging; the report, published as an object, has those counts and
// every row's outcome in input order.
func TestLocalMainPaysAFileOfPayments(t *testing.T) {
	n := envInt(t, envN, 200)
	inFlight := envInt(t, envInFlight, 200)
	state := os.Getenv(envState)
	if state == "" {
		state = "embedded"
	}
	if state != "embedded" && state != "dynamo" {
		t.Fatalf("%s=%q: want embedded or dynamo", envState, state)
	}
	if state == "dynamo" && os.Getenv("AWS_ENDPOINT_URL_DYNAMODB") == "" {
		t.Fatalf("%s=dynamo needs the local AWS stack: run the test under scripts/stack.sh run", envState)
	}
	bin := buildLocal(t)
	dir := t.TempDir()
	p := newPlan(n)
	csvPath := filepath.Join(dir, "payments.csv")
	if err := os.WriteFile(csvPath, p.csv, 0o600); err != nil {
		t.Fatal(err)
	}

	prov := provider.NewServer(provider.Options{Faults: provider.Faults{
		MaxDelay:        callbackDelay,
		Duplicate:       func(ref string) bool { return p.dup[ref] },
		Drop:            func(ref string) bool { return p.drop[ref] },
		FailFirstCreate: func(ref string) bool { return p.failFirst[ref] },
		Seed:            uint64(n),
	}})
	provSrv := httptest.NewServer(prov)
	t.Cleanup(provSrv.Close)
	t.Cleanup(prov.Close) // runs first: no delivery outlives the test

	env := []string{
		"PIPELINE_ORCHESTRATOR_AWAIT_RESUME_TOKEN_SECRET=" + nonce(t, 32),
		"PIPELINE_ORCHESTRATOR_SWEEP_INTERVAL=1s", // await timeouts enforced promptly
		"PIPELINE_ORCHESTRATOR_LOG_LEVEL=warn",    // 1,000s of steps: keep the warnings, where the rejects are
		"PIPELINE_ITEM_REJECT_PROVIDER=log",       // the Item Reject Sink as log events, which the test reads
		payments.EnvProviderURL + "=" + provSrv.URL,
		payments.EnvReportTo + "=file://" + filepath.ToSlash(filepath.Join(dir, "reports")) + "/{executionId}.json",
		payments.EnvAwaitTimeout + "=" + awaitTimeout.String(),
		payments.EnvMaxInFlight + "=" + strconv.Itoa(inFlight),
	}
	if state == "dynamo" {
		for _, kv := range provision(t, bin, "qpay-"+nonce(t, 4)) {
			// The reject sink stays the log provider, which the test reads,
			// rather than the SQS queue provision made.
			if !strings.HasPrefix(kv, "PIPELINE_ITEM_REJECT_") {
				env = append(env, kv)
			}
		}
		env = append(env, "PIPELINE_ORCHESTRATOR_SQS_WAIT_SECONDS=1")
	}
	base, logs := startServe(t, bin, dir, env)
	tenant := "t-" + nonce(t, 6)
	c, err := client.New(base, client.WithTenant(tenant))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute+time.Duration(n)*200*time.Millisecond)
	defer cancel()

	body, _ := json.Marshal(payments.FileRequest{File: "file://" + filepath.ToSlash(csvPath)})
	start := time.Now()
	sub, err := c.Submit(ctx, client.SubmitRequest{PipelineID: payments.FileID, IdempotencyKey: "file-1", Body: body})
	if err != nil {
		t.Fatal(err)
	}
	// Poll the file's status; its children counts say how far the map is
	// (they change without a new version of the parent's row).
	var final client.Execution
	for lastLog := time.Now(); ; time.Sleep(time.Second) {
		final, err = c.Status(ctx, sub.ExecutionID)
		if err != nil {
			t.Fatalf("status of %s: %v\n%s", sub.ExecutionID, err, logs)
		}
		if final.Status.Terminal() {
			break
		}
		if final.Children != nil && time.Since(lastLog) >= 30*time.Second {
			lastLog = time.Now()
			t.Logf("payments: %s after %s: %+v", final.Status, time.Since(start).Round(time.Second), *final.Children)
		}
	}
	elapsed := time.Since(start)
	if final.Status != "SUCCEEDED" {
		t.Fatalf("file %s: %s %+v, want SUCCEEDED\n%s", sub.ExecutionID, final.Status, final.Error, logs)
	}

	// The result, and the object the Output published: the same report.
	res, err := c.Result(ctx, sub.ExecutionID)
	if err != nil {
		t.Fatal(err)
	}
	published, err := os.ReadFile(filepath.Join(dir, "reports", sub.ExecutionID+".json"))
	if err != nil {
		t.Fatalf("the published report: %v", err)
	}
	if string(published) != string(res.Data) {
		t.Errorf("the published report (%d bytes) differs from the result (%d bytes)", len(published), len(res.Data))
	}
	var rep payments.Report
	if err := json.Unmarshal(res.Data, &rep); err != nil {
		t.Fatalf("report: %v", err)
	}

	malformed, dropped := p.count(kindMalformed), p.count(kindDropped)
	settled := n - malformed - dropped
	if rep.Total != n || rep.Settled != settled || rep.Rejected != malformed || rep.Failed != dropped || rep.Cancelled != 0 ||
		len(rep.Payments) != n {
		t.Fatalf("report counts: total %d settled %d rejected %d failed %d cancelled %d (%d outcomes), want %d %d %d %d 0",
			rep.Total, rep.Settled, rep.Rejected, rep.Failed, rep.Cancelled, len(rep.Payments), n, settled, malformed, dropped)
	}

	// Every row's outcome, in input order.
	wantCents := map[string]int64{}
	var rejectedIDs, droppedIDs []string
	seen := map[string]bool{}
	for i, o := range rep.Payments {
		if o.Line != i+2 || o.ExecutionID == "" || seen[o.ExecutionID] {
			t.Errorf("row %d: line %d, execution %q: want line %d and an execution of its own", i, o.Line, o.ExecutionID, i+2)
		}
		seen[o.ExecutionID] = true
		switch p.kinds[i] {
		case kindMalformed:
			if o.Outcome != payments.OutcomeRejected || o.ErrorCode != pipeline.CodeItemRejected {
				t.Errorf("line %d (malformed): %s %s %s, want REJECTED item_rejected", o.Line, o.Outcome, o.ErrorCode, o.Error)
			}
			rejectedIDs = append(rejectedIDs, o.ExecutionID)
		case kindDropped:
			if o.Outcome != payments.OutcomeFailed || o.ErrorCode != pipeline.CodeAwaitTimeout || o.PaymentID != p.ids[i] {
				t.Errorf("line %d (settlement dropped): %s %s %s %s, want FAILED AWAIT_TIMEOUT %s", o.Line, o.PaymentID, o.Outcome, o.ErrorCode, o.Error, p.ids[i])
			}
			droppedIDs = append(droppedIDs, o.ExecutionID)
		case kindPaid:
			pp, _ := prov.PaymentOf(p.ids[i])
			if o.Outcome != payments.OutcomeSettled || o.PaymentID != p.ids[i] || o.ProviderPaymentID == "" ||
				o.ProviderPaymentID != pp.ID || o.AmountCents != p.cents[i] || o.Currency != p.currency[i] {
				t.Errorf("line %d: %+v, want SETTLED %s %d %s as provider payment %s", o.Line, o, p.ids[i], p.cents[i], p.currency[i], pp.ID)
			}
			wantCents[p.currency[i]] += p.cents[i]
		}
	}
	if !maps.Equal(rep.SettledCents, wantCents) {
		t.Errorf("settled cents %v, want %v", rep.SettledCents, wantCents)
	}

	// One charge per payment, retries and lost answers notwithstanding;
	// every settlement delivered (twice where duplicated), none given up.
	for i, id := range p.ids {
		if want := map[rowKind]int{kindPaid: 1, kindDropped: 1}[p.kinds[i]]; id != "" && prov.Charges(id) != want {
			t.Errorf("payment %s (line %d): charged %d times, want %d", id, i+2, prov.Charges(id), want)
		}
	}
	st := prov.Stats()
	dups := 0
	for id := range p.dup {
		if !p.drop[id] {
			dups++
		}
	}
	if st.Charges != settled+dropped || st.Creates < settled+dropped+len(p.failFirst) || st.Dropped != dropped ||
		st.Duplicates != dups || st.Accepted != settled+dups || st.Abandoned != 0 {
		t.Errorf("provider: %+v; want %d charges, at least %d creates, %d dropped, %d duplicated, %d accepted, none abandoned",
			st, settled+dropped, settled+dropped+len(p.failFirst), dropped, dups, settled+dups)
	}
	accepted := prov.Settlements()
	order := make([]string, len(accepted))
	for i, a := range accepted {
		order[i] = a.Reference
	}
	if len(order) != settled {
		t.Fatalf("%d settlements accepted, want %d", len(order), settled)
	}
	if inv := inversions(order); inv == 0 && settled > 1 {
		t.Errorf("the settlements arrived in input order: the out-of-order fault did not happen")
	}

	// The rejected rows went to the Item Reject Sink (here its log
	// provider) and ended FAILED item_rejected without a dead letter; the
	// payments whose settlement never came were dead-lettered with
	// AWAIT_TIMEOUT.
	if got := logs.rejectedExecutions(); !slices.Equal(got, sorted(rejectedIDs)) {
		t.Errorf("item_rejected envelopes of executions %v, want %v", got, sorted(rejectedIDs))
	}
	for _, id := range rejectedIDs {
		e, err := c.Status(ctx, id)
		if err != nil || e.Status != "FAILED" || e.Error == nil || e.Error.Code != pipeline.CodeItemRejected ||
			e.Error.TerminalReason != "rejected" || e.StepName != payments.StepValidate {
			t.Errorf("rejected child %s: %+v %v, want FAILED at validate, item_rejected, reason rejected", id, e, err)
		}
	}
	for _, id := range droppedIDs {
		e, err := c.Status(ctx, id)
		if err != nil || e.Status != "DLQ" || e.Error == nil || e.Error.Code != pipeline.CodeAwaitTimeout || e.StepName != payments.StepAwait {
			t.Errorf("child %s whose settlement never came: %+v %v, want DLQ at await with AWAIT_TIMEOUT", id, e, err)
		}
	}
	// The dead letters are recorded asynchronously (on DynamoDB through
	// the DLQ queue and its consumer): wait for them.
	var dead []string
	for deadline := time.Now().Add(time.Minute); ; {
		dead = dead[:0]
		for d, err := range c.DeadLettersAll(ctx, client.DeadLetterQuery{PipelineID: payments.ItemID, Limit: 500}) {
			if err != nil {
				t.Fatalf("dead letters: %v", err)
			}
			dead = append(dead, d.ExecutionID)
		}
		if slices.Equal(sorted(dead), sorted(droppedIDs)) || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	if !slices.Equal(sorted(dead), sorted(droppedIDs)) {
		t.Errorf("dead letters of payments.item: %v, want exactly %v", sorted(dead), sorted(droppedIDs))
	}

	// The rate: settlements per second until 90 % of them were in. The
	// last ones include the children released after a dropped one timed
	// out (a child's end releases the child MaxInFlight rows after it),
	// so they measure the await timeout, not the runtime.
	if settled > 0 {
		k := (settled*9 + 9) / 10
		t90, last := accepted[k-1].At.Sub(start), accepted[settled-1].At.Sub(start)
		t.Logf("payments: N=%d state=%s in-flight=%d: %d settled, %d rejected, %d failed (AWAIT_TIMEOUT after %s); "+
			"90 %% of the settlements in %.1f s (%.0f payments/s), the last after %.1f s; the file SUCCEEDED after %.1f s; "+
			"provider: %d creates, %d charges, %d settlements delivered (%d duplicates)",
			n, state, inFlight, rep.Settled, rep.Rejected, rep.Failed, awaitTimeout,
			t90.Seconds(), float64(k)/t90.Seconds(), last.Seconds(), elapsed.Seconds(), st.Creates, st.Charges, st.Accepted, st.Duplicates)
	}
}

// inversions counts the adjacent pairs of settled payment ids out of
// input order (ids sort as the rows do).
func inversions(ids []string) int {
	n := 0
	for i := 1; i < len(ids); i++ {
		if ids[i] < ids[i-1] {
			n++
		}
	}
	return n
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// nonce returns 2*n random hex digits.
func nonce(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// buildLocal builds the service's local main.
func buildLocal(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "payments-local")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/local").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/local: %v\n%s", err, out)
	}
	return bin
}

// provision creates fresh tables and queues named prefix-* on the local
// stack with the local main's provision command and returns the settings
// that point serve at them.
func provision(t *testing.T, bin, prefix string) []string {
	t.Helper()
	cmd := exec.Command(bin, "provision", prefix)
	cmd.Env = ownEnv()
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("provision %s: %v\n%s", prefix, err, stderr)
	}
	var env []string
	for line := range strings.Lines(string(out)) {
		if kv, ok := strings.CutPrefix(strings.TrimSpace(line), "export "); ok {
			env = append(env, kv)
		}
	}
	if len(env) == 0 {
		t.Fatalf("provision %s printed no settings:\n%s", prefix, out)
	}
	return env
}

// ownEnv is this process's environment without any qasync or payments
// setting: the processes the test starts get only the ones it gives them.
func ownEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PIPELINE_") && !strings.HasPrefix(kv, "PAYMENTS_") {
			env = append(env, kv)
		}
	}
	return env
}

// serveLogs keeps what the test needs of serve's output: the executions
// of the item_rejected envelopes (the reject sink's log provider) and the
// last lines, for failure messages. The rest is dropped: a run of 10,000
// payments logs too much to keep.
type serveLogs struct {
	mu       sync.Mutex
	tail     []string
	rejected map[string]bool
}

const tailLines = 200

func (l *serveLogs) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.tail) == tailLines {
		l.tail = l.tail[1:]
	}
	l.tail = append(l.tail, line)
	if !strings.Contains(line, `"event":"item_rejected"`) {
		return
	}
	var ev struct {
		ExecutionID string `json:"execution_id"`
		Pipeline    string `json:"pipeline"`
		Step        string `json:"step"`
		Scope       string `json:"scope"`
	}
	if json.Unmarshal([]byte(line), &ev) == nil && ev.Pipeline == payments.ItemID && ev.Step == payments.StepValidate && ev.Scope == "ITEM" {
		l.rejected[ev.ExecutionID] = true // at least once: a retried step would publish again
	}
}

// rejectedExecutions returns the executions with an item_rejected
// envelope, sorted.
func (l *serveLogs) rejectedExecutions() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return sorted(slices.Collect(maps.Keys(l.rejected)))
}

// String returns the last lines.
func (l *serveLogs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.tail, "\n")
}

// startServe starts `serve` of bin on a port the OS picks, in directory
// dir (the embedded store keeps its data in dir/.qasync), with env added
// to this process's environment without its qasync settings. It returns
// the base URL and the logs. The process is stopped (SIGTERM, then
// SIGKILL) when the test ends, whichever way it ends, and a SIGTERM must
// end it cleanly.
func startServe(t *testing.T, bin, dir string, env []string) (string, *serveLogs) {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0")
	cmd.Dir = dir
	cmd.Env = append(ownEnv(), env...)
	logs := &serveLogs{rejected: map[string]bool{}}
	return servetest.Start(t, cmd, logs.add, logs, 60*time.Second, 40*time.Second), logs
}
