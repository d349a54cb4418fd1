// Package checkout is an example pipeline that takes an order from
// submission to a scheduled delivery: validate, reserve inventory, capture
// payment, schedule delivery.
//
// Every id a step produces derives from the order id alone, so a replayed
// step (after a crash or a retry) yields exactly the same result.
package checkout

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"

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

// Pipeline returns the checkout pipeline.
func Pipeline() pipeline.Pipeline {
	return pipeline.Pipeline{ID: ID, Steps: []pipeline.Step{
		pipeline.NewStep(StepValidate, validate),
		pipeline.NewStep(StepReserveInventory, reserveInventory),
		pipeline.NewStep(StepCapturePayment, capturePayment),
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

func capturePayment(ctx context.Context, info pipeline.StepInfo, p progress) (progress, error) {
	if err := ctx.Err(); err != nil {
		return progress{}, context.Cause(ctx)
	}
	if p.ReservationID == "" {
		return progress{}, pipeline.NonRetryable(CodeInvalidOrder, errors.New("no reservationId to pay for"))
	}
	// A real integration charges the customer here and passes
	// info.IdempotencyKey as the provider's idempotency key: it is the same
	// for every attempt of this step, so a retry or a takeover after a
	// crash never charges twice.
	//
	//	charge, err := payments.Capture(ctx, payments.CaptureRequest{
	//		Reference:      p.Order.OrderID,
	//		AmountCents:    p.Order.AmountCents,
	//		IdempotencyKey: info.IdempotencyKey,
	//	})
	p.PaymentID = derive("pay-", "payment", p.Order.OrderID)
	logger(info).LogAttrs(ctx, slog.LevelInfo, "payment_captured", slog.String("event", "payment_captured"),
		slog.String("order_id", p.Order.OrderID), slog.String("payment_id", p.PaymentID),
		slog.String("idempotency_key", info.IdempotencyKey))
	return p, nil
}

func scheduleDelivery(ctx context.Context, info pipeline.StepInfo, p progress) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, context.Cause(ctx)
	}
	if p.PaymentID == "" {
		return Result{}, pipeline.NonRetryable(CodeInvalidOrder, errors.New("no paymentId: order is not paid"))
	}
	r := Result{
		OrderID: p.Order.OrderID, Status: StatusDeliveryScheduled,
		ReservationID: p.ReservationID, PaymentID: p.PaymentID,
		DeliveryID: derive("dlv-", "delivery", p.Order.OrderID),
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
