// Package checkout is an example pipeline that takes an order from
// submission to a scheduled delivery: validate, reserve inventory, capture
// payment, schedule delivery.
//
// Every id a step produces derives from the order id alone, so a replayed
// step (after a crash or a retry) yields exactly the same result.
//
// capture-payment is a command step (package command): the charge is a
// managed side effect whose command id is the order id. Its record in the
// effect log makes a re-run (a retry, a lease takeover, a duplicate
// submission of the same order) return the recorded payment instead of
// charging again; a run that died between the charge and recording it is
// reconciled by asking the payment provider (Payments.Find).
package checkout

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"

	"github.com/qasync/qasync/shared/command"
	"github.com/qasync/qasync/shared/pipeline"
)

// ID is the pipeline id.
const ID = "checkout.deliver-order"

// Step names, in order.
const (
	StepValidate         = "validate"
	StepReserveInventory = "reserve-inventory"
	StepCapturePayment   = "capture-payment"
	StepScheduleDelivery = "schedule-delivery"
)

// CodeInvalidOrder is the non-retryable error code of an order that fails
// validation.
const CodeInvalidOrder = "invalid_order"

// StatusDeliveryScheduled is Result.Status once the delivery is scheduled.
const StatusDeliveryScheduled = "DELIVERY_SCHEDULED"

// Item is one order line.
type Item struct {
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
}

// Order is the pipeline's input.
type Order struct {
	OrderID     string `json:"orderId"`
	Items       []Item `json:"items"`
	AmountCents int64  `json:"amountCents"`
}

// Result is the pipeline's final output.
type Result struct {
	OrderID       string `json:"orderId"`
	Status        string `json:"status"`
	ReservationID string `json:"reservationId"`
	PaymentID     string `json:"paymentId"`
	DeliveryID    string `json:"deliveryId"`
}

// progress is what each step hands to the next: the order plus the ids
// gathered so far.
type progress struct {
	Order         Order  `json:"order"`
	ReservationID string `json:"reservationId,omitempty"`
	PaymentID     string `json:"paymentId,omitempty"`
}

// paid is capture-payment's output, recorded in the effect log: ids only,
// so that it stays small whatever the size of the order.
type paid struct {
	OrderID       string `json:"orderId"`
	ReservationID string `json:"reservationId"`
	PaymentID     string `json:"paymentId"`
}

// Pipeline returns the checkout pipeline, charging the provider set by
// UsePayments (by default the in-process FakePayments).
func Pipeline() pipeline.Pipeline { return New(nil) }

// New returns the checkout pipeline charging p (nil: the provider set by
// UsePayments, read at each charge).
func New(p Payments) pipeline.Pipeline {
	provider := func() Payments {
		if p != nil {
			return p
		}
		return currentPayments()
	}
	capture := func(ctx context.Context, info pipeline.StepInfo, in progress) (paid, error) {
		return capturePayment(ctx, info, in, provider())
	}
	reconcile := func(ctx context.Context, info pipeline.StepInfo, in progress) (paid, bool, error) {
		id, found, err := provider().Find(ctx, in.Order.OrderID)
		if err != nil || !found {
			return paid{}, false, err
		}
		logger(info).LogAttrs(ctx, slog.LevelWarn, "payment_reconciled", slog.String("event", "payment_reconciled"),
			slog.String("order_id", in.Order.OrderID), slog.String("payment_id", id))
		return paid{OrderID: in.Order.OrderID, ReservationID: in.ReservationID, PaymentID: id}, true, nil
	}
	return pipeline.Pipeline{ID: ID, Steps: []pipeline.Step{
		pipeline.NewStep(StepValidate, validate),
		pipeline.NewStep(StepReserveInventory, reserveInventory),
		command.Step(StepCapturePayment, command.Spec[progress, paid]{
			ID:        func(in progress) string { return in.Order.OrderID },
			Reconcile: reconcile,
		}, capture),
		pipeline.NewStep(StepScheduleDelivery, scheduleDelivery),
	}}
}

func validate(ctx context.Context, info pipeline.StepInfo, o Order) (progress, error) {
	if err := ctx.Err(); err != nil {
		return progress{}, context.Cause(ctx)
	}
	// Messages name the offending field; they never quote the payload.
	invalid := func(msg string) (progress, error) {
		return progress{}, pipeline.NonRetryable(CodeInvalidOrder, errors.New(msg))
	}
	switch {
	case o.OrderID == "":
		return invalid("orderId is empty")
	case len(o.Items) == 0:
		return invalid("items is empty")
	case o.AmountCents <= 0:
		return invalid("amountCents must be positive")
	}
	for i, it := range o.Items {
		if it.SKU == "" {
			return invalid(fmt.Sprintf("items[%d].sku is empty", i))
		}
		if it.Qty <= 0 {
			return invalid(fmt.Sprintf("items[%d].qty must be positive", i))
		}
	}
	logger(info).LogAttrs(ctx, slog.LevelInfo, "order_validated", slog.String("event", "order_validated"),
		slog.String("order_id", o.OrderID), slog.Int("items", len(o.Items)))
	return progress{Order: o}, nil
}

func reserveInventory(ctx context.Context, info pipeline.StepInfo, p progress) (progress, error) {
	if err := ctx.Err(); err != nil {
		return progress{}, context.Cause(ctx)
	}
	p.ReservationID = derive("res-", "reservation", p.Order.OrderID)
	logger(info).LogAttrs(ctx, slog.LevelInfo, "inventory_reserved", slog.String("event", "inventory_reserved"),
		slog.String("order_id", p.Order.OrderID), slog.String("reservation_id", p.ReservationID))
	return p, nil
}

func capturePayment(ctx context.Context, info pipeline.StepInfo, p progress, payments Payments) (paid, error) {
	if err := ctx.Err(); err != nil {
		return paid{}, context.Cause(ctx)
	}
	if p.ReservationID == "" {
		return paid{}, pipeline.NonRetryable(CodeInvalidOrder, errors.New("no reservationId to pay for"))
	}
	// The command step calls this at most once per order while the effect
	// log keeps its record; the provider still gets a stable idempotency
	// key, its own line of defence.
	id, err := payments.Charge(ctx, p.Order.OrderID, p.Order.AmountCents, info.IdempotencyKey)
	if err != nil {
		return paid{}, err
	}
	logger(info).LogAttrs(ctx, slog.LevelInfo, "payment_captured", slog.String("event", "payment_captured"),
		slog.String("order_id", p.Order.OrderID), slog.String("payment_id", id),
		slog.String("idempotency_key", info.IdempotencyKey))
	return paid{OrderID: p.Order.OrderID, ReservationID: p.ReservationID, PaymentID: id}, nil
}

func scheduleDelivery(ctx context.Context, info pipeline.StepInfo, p paid) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, context.Cause(ctx)
	}
	if p.PaymentID == "" {
		return Result{}, pipeline.NonRetryable(CodeInvalidOrder, errors.New("no paymentId: order is not paid"))
	}
	r := Result{
		OrderID: p.OrderID, Status: StatusDeliveryScheduled,
		ReservationID: p.ReservationID, PaymentID: p.PaymentID,
		DeliveryID: derive("dlv-", "delivery", p.OrderID),
	}
	logger(info).LogAttrs(ctx, slog.LevelInfo, "delivery_scheduled", slog.String("event", "delivery_scheduled"),
		slog.String("order_id", r.OrderID), slog.String("delivery_id", r.DeliveryID))
	return r, nil
}

// derive returns prefix plus the first 16 hex digits of
// sha256(kind + ":" + orderID): the same order always gets the same id.
func derive(prefix, kind, orderID string) string {
	sum := sha256.Sum256([]byte(kind + ":" + orderID))
	return prefix + hex.EncodeToString(sum[:8])
}

// logger returns the step's logger, or one that discards when the caller
// (a test) gave none.
func logger(info pipeline.StepInfo) *slog.Logger {
	if info.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return info.Logger
}
