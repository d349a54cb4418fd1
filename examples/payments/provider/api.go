// Package provider is a payment provider for the payments example: the
// documents of its HTTP API, a Client of that API (what the payments
// pipeline calls), and Server, a fake of the provider for local runs and
// tests.
//
// The API:
//
//	POST /v1/payments                  create a payment (header Idempotency-Key required):
//	                                   201 new, 200 the key's payment again, 422 the key with another body
//	GET  /v1/payments?idempotencyKey=K the key's payment, 404 none
//	POST /v1/payments/{id}/callbacks   register where to report the payment's settlement:
//	                                   202 registered, 200 the same registration again
//
// A payment is charged when it is created, once per idempotency key. Its
// settlement is reported later, asynchronously, by a POST of a Settlement
// to the registered callback URL with the registered token as header
// X-Resume-Token: the shape of the qasync await completion route, which is
// what the payments pipeline registers.
package provider

import (
	"errors"
	"fmt"
	"time"
)

// Header names of the API.
const (
	// HeaderIdempotencyKey carries the key of a create: the same key
	// always yields the same payment, charged once.
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderResumeToken carries a callback's token on its delivery.
	HeaderResumeToken = "X-Resume-Token"
)

// Payment statuses.
const (
	// StatusPending: created and charged, the settlement not reported yet.
	StatusPending = "PENDING"
	// StatusSettled: the money reached the payee.
	StatusSettled = "SETTLED"
	// StatusDeclined: the payment was refused after creation.
	StatusDeclined = "DECLINED"
)

// CreateRequest is the body of POST /v1/payments.
type CreateRequest struct {
	// Reference is the merchant's id of the payment (echoed in the
	// settlement).
	Reference   string `json:"reference"`
	Payee       string `json:"payee"`
	AmountCents int64  `json:"amountCents"`
	// Currency is an ISO 4217 code.
	Currency string `json:"currency"`
}

// Payment is the provider's record of a payment.
type Payment struct {
	// ID is the provider's payment id.
	ID          string    `json:"id"`
	Reference   string    `json:"reference"`
	Payee       string    `json:"payee"`
	AmountCents int64     `json:"amountCents"`
	Currency    string    `json:"currency"`
	Status      string    `json:"status"`
	CreatedAt   time.Time `json:"createdAt"`
}

// Callback is the body of POST /v1/payments/{id}/callbacks: where and
// with which token to report the payment's settlement.
type Callback struct {
	// URL receives the settlement (POST, JSON).
	URL string `json:"url"`
	// Token is sent as header X-Resume-Token with the settlement.
	Token string `json:"token"`
}

// Settlement is the document a callback delivers. Every delivery of one
// payment's settlement carries the same bytes (a duplicate delivery is a
// repeat, not a different report).
type Settlement struct {
	// PaymentID is the provider's payment id.
	PaymentID   string    `json:"paymentId"`
	Reference   string    `json:"reference"`
	Status      string    `json:"status"`
	AmountCents int64     `json:"amountCents"`
	Currency    string    `json:"currency"`
	SettledAt   time.Time `json:"settledAt"`
}

// StatusError is an answer of the API other than the expected success.
type StatusError struct {
	// Op names the call ("create", "find", "register callback").
	Op string
	// Code is the HTTP status.
	Code int
	// Message is the start of the answer's body.
	Message string
}

// Error implements error.
func (e *StatusError) Error() string {
	return fmt.Sprintf("provider: %s: HTTP %d: %s", e.Op, e.Code, e.Message)
}

// Temporary reports whether the same request may succeed later: the
// provider was unavailable (5xx) or throttled (429).
func (e *StatusError) Temporary() bool {
	return e.Code >= 500 || e.Code == 429
}

// Temporary reports whether err, an error of a Client call, may pass on
// a later try: a StatusError that says so, or a failure to reach the
// provider at all (no answer).
func Temporary(err error) bool {
	var se *StatusError
	if errors.As(err, &se) {
		return se.Temporary()
	}
	return err != nil
}
