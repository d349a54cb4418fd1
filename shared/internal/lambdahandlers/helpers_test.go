package lambdahandlers_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/qasync/qasync/shared/backend"
	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/config"
	"github.com/qasync/qasync/shared/deadletter"
	"github.com/qasync/qasync/shared/dispatch"
	"github.com/qasync/qasync/shared/internal/apigw"
	"github.com/qasync/qasync/shared/internal/console"
	"github.com/qasync/qasync/shared/internal/engine"
	"github.com/qasync/qasync/shared/internal/logtest"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/internal/wiring"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/store"
)

// The sample events in events/*.json name two pipelines of the examples
// (pipelines/checkout and pipelines/diag), which the library's tests must
// not import. These are test-local stand-ins carrying the same ids, step
// names and input shapes, so that every fixture runs through the real
// handlers as it is.
const (
	// orderPipelineID stands in for checkout.ID.
	orderPipelineID = "checkout.deliver-order"
	// drillPipelineID stands in for diag.ID.
	drillPipelineID = "diag.drill"
	// stepScheduleDelivery is the stand-in order pipeline's last step
	// (checkout.StepScheduleDelivery).
	stepScheduleDelivery = "schedule-delivery"
	// stepWork is the stand-in drill's second step (diag.StepWork), the
	// one the DLQ fixture names.
	stepWork = "work"
	// codeDrillFailure is the stand-in drill's scripted failure code
	// (diag.CodeDrillFailure).
	codeDrillFailure = "drill_failure"
)

// order is the stand-in order pipeline's input (the body of
// events/submit-post.json).
type order struct {
	OrderID string `json:"orderId"`
	Items   []struct {
		SKU string `json:"sku"`
		Qty int    `json:"qty"`
	} `json:"items"`
	AmountCents int64 `json:"amountCents"`
}

// testRegistry holds the stand-ins: orderPipelineID (validate ->
// schedule-delivery) and drillPipelineID (prepare -> work -> finish,
// echoing its input's "echo").
func testRegistry(t *testing.T) *pipeline.Registry {
	t.Helper()
	type drill struct {
		Echo json.RawMessage `json:"echo,omitempty"`
	}
	pass := func(_ context.Context, _ pipeline.StepInfo, d drill) (drill, error) { return d, nil }
	reg, err := pipeline.NewRegistry(
		pipeline.Pipeline{ID: orderPipelineID, Steps: []pipeline.Step{
			pipeline.NewStep("validate", func(_ context.Context, _ pipeline.StepInfo, o order) (order, error) {
				if o.OrderID == "" || o.AmountCents <= 0 {
					return o, pipeline.NonRetryable("invalid_order", errors.New("orderId or amountCents missing"))
				}
				return o, nil
			}),
			pipeline.NewStep(stepScheduleDelivery, func(_ context.Context, _ pipeline.StepInfo, o order) (map[string]string, error) {
				return map[string]string{"orderId": o.OrderID, "status": "DELIVERY_SCHEDULED"}, nil
			}),
		}},
		pipeline.Pipeline{ID: drillPipelineID, Steps: []pipeline.Step{
			pipeline.NewStep("prepare", pass), pipeline.NewStep(stepWork, pass), pipeline.NewStep("finish", pass),
		}},
	)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// fixtureTenant is the tenant of the IAM caller the API fixtures name
// (role order-service of account 123456789012, tenant-source iam), and
// the tenant of every work item fixture.
const fixtureTenant = "123456789012.role.order-service"

// fixture reads events/<name>.
func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "events", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// invoke feeds payload through h as the Lambda runtime would and decodes
// the response into out.
func invoke(t *testing.T, ctx context.Context, h any, payload []byte, out any) {
	t.Helper()
	b, err := lambda.NewHandler(h).Invoke(ctx, payload)
	if err != nil {
		t.Fatalf("invoke: %v", err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("decode response %s: %v", b, err)
	}
}

// memEnv is what lambdafn.Boot builds for a function: the configuration,
// the assembled process, and the logger.
type memEnv struct {
	cfg config.Config
	p   *wiring.Process
	log *slog.Logger
}

// openMem assembles the memory backend (memory state, event dispatcher,
// log DLQ) with the stand-in pipelines as Boot would (wiring.Assemble),
// with tenant source iam, logging to a buffer.
func openMem(t *testing.T, mutate func(*config.Config)) (memEnv, *logtest.Buffer) {
	t.Helper()
	cfg := config.Default()
	cfg.StateProvider, cfg.TenantSource = "memory", "iam"
	if mutate != nil {
		mutate(&cfg)
	}
	logs, log := logtest.New()
	p, err := wiring.Assemble(context.Background(), cfg, testRegistry(t), wiring.Options{
		Backends: map[string]backend.Backend{"memory": memory.Backend()}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	})
	return memEnv{cfg: cfg, p: p, log: log}, logs
}

// submitHandler is the submit function's handler on e: its HTTP handler
// (console.Site, configured from e.cfg) behind the API Gateway adapter,
// as package submit builds it.
func (e memEnv) submitHandler() func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return apigw.Handler(console.Site(e.p.Runtime, e.cfg, e.log))
}

// seed stores a hand-made row: the given status etc., with input as an
// inline JSON payload. The row is due now unless mutate changes it.
func seed(t *testing.T, rt *engine.Runtime, id, pipelineID, input string, mutate func(*store.Execution)) store.Execution {
	t.Helper()
	ctx := context.Background()
	now := time.Now()
	in, err := payload.Write(ctx, rt.Payloads(), payload.Payload{Encoding: payload.EncodingJSON, ContentType: payload.ContentTypeJSON, Data: []byte(input)},
		"input/"+id, payload.DefaultInlineBudget, now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	p, ok := rt.Registry().Get(pipelineID)
	if !ok {
		t.Fatalf("pipeline %s not registered", pipelineID)
	}
	row := store.Execution{
		TenantID: fixtureTenant, ExecutionID: id, PipelineID: pipelineID, Status: store.Queued, Version: 1,
		PipelineVersion: p.VersionID(), StepName: p.Steps[0].Name, Attempt: 1, NextDueAt: now, SweepAt: now.Add(rt.Config().SweepGrace),
		IdempotencyKey: "fixture-" + id, Input: in,
		CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(time.Hour),
	}
	if mutate != nil {
		mutate(&row)
	}
	got, created, err := rt.Store().CreateOrGet(ctx, store.CreateRequest{Execution: row})
	if err != nil || !created {
		t.Fatalf("seed %s: created=%v err=%v", id, created, err)
	}
	return got
}

// get reads a row of the fixture tenant.
func get(t *testing.T, rt *engine.Runtime, id string) store.Execution {
	t.Helper()
	e, err := rt.Store().Get(context.Background(), store.Key{TenantID: fixtureTenant, ExecutionID: id})
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return e
}

// sqsItems decodes the work items of an SQS fixture.
func sqsItems(t *testing.T, b []byte) (events.SQSEvent, []dispatch.WorkItem) {
	t.Helper()
	var ev events.SQSEvent
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatal(err)
	}
	items := make([]dispatch.WorkItem, len(ev.Records))
	for i, r := range ev.Records {
		if err := json.Unmarshal([]byte(r.Body), &items[i]); err != nil {
			t.Fatal(err)
		}
	}
	return ev, items
}

// memRecorder is a deadletter.Recorder in memory; failPut makes Put fail.
type memRecorder struct {
	mu      sync.Mutex
	records map[string]deadletter.Record
	puts    int
	failPut bool
}

func newMemRecorder() *memRecorder { return &memRecorder{records: map[string]deadletter.Record{}} }

func (m *memRecorder) Put(ctx context.Context, r deadletter.Record) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.puts++
	if m.failPut {
		return false, errors.New("recorder unavailable")
	}
	if _, ok := m.records[r.ID]; ok {
		return false, nil
	}
	m.records[r.ID] = r
	return true, nil
}

func (m *memRecorder) Get(ctx context.Context, id string) (deadletter.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.records[id]
	if !ok {
		return r, deadletter.ErrNotFound
	}
	return r, nil
}

func (m *memRecorder) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.records)
}

// hookStore wraps a store: get is called before every Get (it may fail
// or panic), due before every Due.
type hookStore struct {
	store.Store
	mu   sync.Mutex
	gets int
	get  func(key store.Key) error
	due  func() error
}

func (s *hookStore) Get(ctx context.Context, key store.Key) (store.Execution, error) {
	s.mu.Lock()
	s.gets++
	s.mu.Unlock()
	if s.get != nil {
		if err := s.get(key); err != nil {
			return store.Execution{}, err
		}
	}
	return s.Store.Get(ctx, key)
}

func (s *hookStore) Due(ctx context.Context, q store.DueQuery) (store.DuePage, error) {
	if s.due != nil {
		if err := s.due(); err != nil {
			return store.DuePage{}, err
		}
	}
	return s.Store.Due(ctx, q)
}

func (s *hookStore) getCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gets
}

// recordingDispatcher keeps what it is given and delivers nothing.
type recordingDispatcher struct {
	mu   sync.Mutex
	msgs []dispatch.Message
}

func (d *recordingDispatcher) Dispatch(ctx context.Context, msgs ...dispatch.Message) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.msgs = append(d.msgs, msgs...)
	return nil
}

func (d *recordingDispatcher) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.msgs)
}

// unitRuntime is a runtime on memory stores behind a hookStore, with a
// dispatcher that delivers nothing (so only the handler under test runs
// transitions).
func unitRuntime(t *testing.T, cfg engine.Config) (*engine.Runtime, *hookStore, *recordingDispatcher, *logtest.Buffer) {
	t.Helper()
	reg := testRegistry(t)
	logs, log := logtest.New()
	hs := &hookStore{Store: memory.NewStateStore(clock.System{})}
	d := &recordingDispatcher{}
	rt, err := engine.New(cfg, engine.Deps{
		Registry: reg, Store: hs, Payloads: memory.NewPayloadStore(clock.System{}), Dispatcher: d,
		DeadLetter: memory.NewLogDLQ(log), Effects: memory.NewEffects(clock.System{}), Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	return rt, hs, d, logs
}

// logEvents returns the decoded log lines whose "event" is name.
func logEvents(t *testing.T, logs *logtest.Buffer, name string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range logs.Lines() {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %s", line)
		}
		if m["event"] == name {
			out = append(out, m)
		}
	}
	return out
}
