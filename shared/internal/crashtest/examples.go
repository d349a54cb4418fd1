package crashtest

import "encoding/json"

// The crash tests drive real `qasync serve` processes, and qasync serves
// the example pipelines of this repository (pipelines/diag and
// pipelines/checkout, registered by cmd/qasync). The library never
// imports the examples, not even in tests, so what the tests need of them
// is stated here: their ids, step names and error codes, and mirrors of
// their JSON inputs and results. The names in the comments say where each
// comes from; a change there that is not made here shows up as failing
// crash tests. What a crash-free run of an input yields is never computed
// here: RunChaos asks a reference process (see crashFree).
const (
	// DrillID is diag.ID, the fault drill (served with diag.enabled).
	DrillID = "diag.drill"
	// DrillStepPrepare, DrillStepWork and DrillStepFinish are
	// diag.StepPrepare, diag.StepWork and diag.StepFinish, the steps of
	// the drill's first definition (the second adds diag.StepVerify).
	DrillStepPrepare = "prepare"
	DrillStepWork    = "work"
	DrillStepFinish  = "finish"
	// DrillCodeFailure is diag.CodeDrillFailure, the code of a scripted
	// failure of the work step.
	DrillCodeFailure = "drill_failure"
	// DrillFailModeNonRetryable is diag.FailModeNonRetryable.
	DrillFailModeNonRetryable = "non_retryable"

	// CheckoutID is checkout.ID.
	CheckoutID = "checkout.deliver-order"
	// CheckoutStepCapturePayment is checkout.StepCapturePayment, the
	// command step that charges the order (command id: the order id).
	CheckoutStepCapturePayment = "capture-payment"
	// CheckoutCodeInvalidOrder is checkout.CodeInvalidOrder, the
	// non-retryable code of an order that fails validation.
	CheckoutCodeInvalidOrder = "invalid_order"
	// CheckoutStatusDeliveryScheduled is checkout.StatusDeliveryScheduled.
	CheckoutStatusDeliveryScheduled = "DELIVERY_SCHEDULED"
)

// Drill mirrors diag.Drill, the drill's input.
type Drill struct {
	SleepMs       int             `json:"sleepMs,omitempty"`
	FailAttempts  int             `json:"failAttempts,omitempty"`
	FailMode      string          `json:"failMode,omitempty"`
	ResultBytes   int             `json:"resultBytes,omitempty"`
	Echo          json.RawMessage `json:"echo,omitempty"`
	CrashAttempts int             `json:"crashAttempts,omitempty"`
}

// DrillResult mirrors diag.Result, the drill's result: the echo, the
// attempt of work that succeeded, ResultBytes of data, and the steps of
// the definition the execution ran under.
type DrillResult struct {
	Echo        json.RawMessage `json:"echo,omitempty"`
	WorkAttempt int             `json:"workAttempt"`
	Data        string          `json:"data"`
	Steps       []string        `json:"steps"`
}

// Order mirrors checkout.Order, checkout's input.
type Order struct {
	OrderID     string `json:"orderId"`
	Items       []Item `json:"items"`
	AmountCents int64  `json:"amountCents"`
}

// Item mirrors checkout.Item, one order line.
type Item struct {
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
}

// CheckoutResult mirrors checkout.Result, checkout's result (the ids
// derive from the order id alone).
type CheckoutResult struct {
	OrderID       string `json:"orderId"`
	Status        string `json:"status"`
	ReservationID string `json:"reservationId"`
	PaymentID     string `json:"paymentId"`
	DeliveryID    string `json:"deliveryId"`
}
