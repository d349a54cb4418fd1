package checkout_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"

	"github.com/qasync/qasync/pipelines/checkout"
	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
	"github.com/qasync/qasync/shared/pipelinetest"
)

func stepInfo(i int, log *slog.Logger) pipeline.StepInfo {
	p := checkout.Pipeline()
	return pipeline.StepInfo{
		ExecutionID: "exec-1", TenantID: "tenant-1", PipelineID: p.ID,
		StepName: p.Steps[i].Name, StepIndex: i, Attempt: 1,
		IdempotencyKey: fmt.Sprintf("tenant-1:exec-1:%d", i), Logger: log,
		Effects: pipelinetest.Effects(), // a fresh effect log: every run is a first run
	}
}

func mustJSON(t *testing.T, v any) payload.Payload {
	t.Helper()
	p, err := payload.JSON(v)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// runAll feeds in through every step, as the runtime does.
func runAll(t *testing.T, ctx context.Context, in payload.Payload, log *slog.Logger) (payload.Payload, error) {
	t.Helper()
	p := checkout.Pipeline()
	for i, s := range p.Steps {
		out, err := s.Run(ctx, stepInfo(i, log), in)
		if err != nil {
			return payload.Payload{}, err
		}
		in = out
	}
	return in, nil
}

func order(id string) checkout.Order {
	return checkout.Order{OrderID: id, AmountCents: 4999, Items: []checkout.Item{{SKU: "sku-1", Qty: 2}, {SKU: "sku-2", Qty: 1}}}
}

func derived(prefix, kind, orderID string) string {
	sum := sha256.Sum256([]byte(kind + ":" + orderID))
	return prefix + hex.EncodeToString(sum[:])[:16]
}

func TestPipelineShape(t *testing.T) {
	t.Parallel()
	p := checkout.Pipeline()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range p.Steps {
		names = append(names, s.Name)
	}
	want := "validate,reserve-inventory,capture-payment,schedule-delivery"
	if p.ID != checkout.ID || strings.Join(names, ",") != want {
		t.Fatalf("pipeline %s steps %v, want %s steps %s", p.ID, names, checkout.ID, want)
	}
}

func TestFullChain(t *testing.T) {
	t.Parallel()
	out, err := runAll(t, t.Context(), mustJSON(t, order("ord-42")), nil)
	if err != nil {
		t.Fatal(err)
	}
	if out.Encoding != payload.EncodingJSON {
		t.Fatalf("encoding %q", out.Encoding)
	}
	var got map[string]string
	if err := json.Unmarshal(out.Data, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"orderId":       "ord-42",
		"status":        "DELIVERY_SCHEDULED",
		"reservationId": derived("res-", "reservation", "ord-42"),
		"paymentId":     derived("pay-", "payment", "ord-42"),
		"deliveryId":    derived("dlv-", "delivery", "ord-42"),
	}
	if len(got) != len(want) {
		t.Fatalf("result %s, want keys of %v", out.Data, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
}

func TestDeterministicIDs(t *testing.T) {
	t.Parallel()
	result := func(id string, attempt int) checkout.Result {
		t.Helper()
		in := mustJSON(t, order(id))
		for i, s := range checkout.Pipeline().Steps {
			info := stepInfo(i, nil)
			info.Attempt = attempt // a replay or retry
			out, err := s.Run(t.Context(), info, in)
			if err != nil {
				t.Fatal(err)
			}
			in = out
		}
		var r checkout.Result
		if err := in.DecodeJSON(&r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	a, replay, b := result("ord-a", 1), result("ord-a", 3), result("ord-b", 1)
	if a != replay {
		t.Fatalf("replay differs: %+v vs %+v", a, replay)
	}
	format := regexp.MustCompile(`^(res|pay|dlv)-[0-9a-f]{16}$`)
	for _, id := range []string{a.ReservationID, a.PaymentID, a.DeliveryID, b.ReservationID, b.PaymentID, b.DeliveryID} {
		if !format.MatchString(id) {
			t.Errorf("id %q is not prefix-16hex", id)
		}
	}
	if a.ReservationID == b.ReservationID || a.PaymentID == b.PaymentID || a.DeliveryID == b.DeliveryID {
		t.Fatalf("different orders share ids: %+v vs %+v", a, b)
	}
}

func TestValidation(t *testing.T) {
	t.Parallel()
	const secret = "top-secret-sku"
	cases := []struct{ name, in, field string }{
		{"missing orderId", `{"items":[{"sku":"a","qty":1}],"amountCents":1}`, "orderId"},
		{"empty orderId", `{"orderId":"","items":[{"sku":"a","qty":1}],"amountCents":1}`, "orderId"},
		{"no items", `{"orderId":"o","amountCents":1}`, "items"},
		{"empty items", `{"orderId":"o","items":[],"amountCents":1}`, "items"},
		{"empty sku", `{"orderId":"o","items":[{"sku":"` + secret + `","qty":1},{"sku":"","qty":1}],"amountCents":1}`, "items[1].sku"},
		{"zero qty", `{"orderId":"o","items":[{"sku":"` + secret + `","qty":0}],"amountCents":1}`, "items[0].qty"},
		{"negative qty", `{"orderId":"o","items":[{"sku":"` + secret + `","qty":-2}],"amountCents":1}`, "items[0].qty"},
		{"zero amount", `{"orderId":"o","items":[{"sku":"` + secret + `","qty":1}],"amountCents":0}`, "amountCents"},
		{"negative amount", `{"orderId":"o","items":[{"sku":"` + secret + `","qty":1}],"amountCents":-5}`, "amountCents"},
		{"null", `null`, "orderId"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in, err := payload.RawJSON([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			_, err = checkout.Pipeline().Steps[0].Run(t.Context(), stepInfo(0, nil), in)
			if err == nil {
				t.Fatal("invalid order accepted")
			}
			code, msg, retryable := pipeline.Classify(err)
			if code != checkout.CodeInvalidOrder || retryable {
				t.Fatalf("code %q retryable %v, want %q non-retryable", code, retryable, checkout.CodeInvalidOrder)
			}
			if !strings.Contains(msg, tc.field) {
				t.Errorf("message %q does not name %s", msg, tc.field)
			}
			if strings.Contains(msg, secret) || strings.Contains(msg, "{") {
				t.Errorf("message %q echoes the payload", msg)
			}
		})
	}
}

func TestUndecodableInput(t *testing.T) {
	t.Parallel()
	in, err := payload.RawJSON([]byte(`{"orderId":5}`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = checkout.Pipeline().Steps[0].Run(t.Context(), stepInfo(0, nil), in)
	if code, _, retryable := pipeline.Classify(err); code != "invalid_input" || retryable {
		t.Fatalf("got code %q retryable %v, want invalid_input non-retryable", code, retryable)
	}
}

func TestMissingPriorIDs(t *testing.T) {
	t.Parallel()
	// capture-payment and schedule-delivery refuse input that skipped a step.
	in := mustJSON(t, map[string]any{"order": order("o")})
	for _, i := range []int{2, 3} {
		_, err := checkout.Pipeline().Steps[i].Run(t.Context(), stepInfo(i, nil), in)
		if code, _, retryable := pipeline.Classify(err); err == nil || code != checkout.CodeInvalidOrder || retryable {
			t.Errorf("step %d: err %v, want non-retryable %s", i, err, checkout.CodeInvalidOrder)
		}
	}
}

func TestCancellation(t *testing.T) {
	t.Parallel()
	cause := errors.New("lease lost")
	ctx, cancel := context.WithCancelCause(t.Context())
	cancel(cause)
	// Each step, given its proper input, returns the context's cause.
	in := mustJSON(t, order("ord-c"))
	for i, s := range checkout.Pipeline().Steps {
		if _, err := s.Run(ctx, stepInfo(i, nil), in); !errors.Is(err, cause) {
			t.Errorf("step %s: err %v, want %v", s.Name, err, cause)
		}
		out, err := s.Run(t.Context(), stepInfo(i, nil), in)
		if err != nil {
			t.Fatal(err)
		}
		in = out
	}
}

func TestLogging(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	// The time attribute is dropped: a timestamp's digits could contain the
	// amount (4999) and fail the payload check below by chance.
	noTime := func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{ReplaceAttr: noTime}))
	o := order("ord-log")
	o.Items[0].SKU = "sku-never-logged"
	if _, err := runAll(t, t.Context(), mustJSON(t, o), log); err != nil {
		t.Fatal(err)
	}
	var lines []string // the steps' own lines, not the command step's command_* events
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if !strings.Contains(l, `"event":"command_`) {
			lines = append(lines, l)
		}
	}
	if len(lines) != len(checkout.Pipeline().Steps) {
		t.Fatalf("%d log lines, want one per step:\n%s", len(lines), buf.String())
	}
	for _, l := range lines {
		if !strings.Contains(l, `"order_id":"ord-log"`) || strings.Contains(l, "sku-never-logged") || strings.Contains(l, ":4999") {
			t.Errorf("log line %s: want order_id and no payload bytes", l)
		}
	}
	if !strings.Contains(lines[2], `"idempotency_key":"tenant-1:exec-1:2"`) {
		t.Errorf("capture-payment log line %s lacks the idempotency key", lines[2])
	}
}
