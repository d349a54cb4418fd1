// Package payments is an example service built on qasync, outside the
// library: a CSV file of payments is paid one payment at a time through a
// payment provider that reports each payment's settlement later, by
// callback. Two pipelines:
//
//	payments.file: parse -> payments (a map: one payments.item per row) -> report   (Output: the report object)
//	payments.item: validate -> submit -> await -> status
//
// payments.file:
//
//   - parse takes {"file": "<uri>"} and reads the CSV through the
//     runtime's object store (StepInfo.Objects: file:///abs/path locally,
//     s3://bucket/key in AWS). The file's header is
//     payment_id,payee,amount,currency; every data row becomes one
//     element, malformed rows included (the child rejects them, so that
//     each row has its outcome in the report). A row that repeats an
//     earlier row's payment id is marked for rejection: one payment id is
//     paid once. parse also stages the rows' payment ids next to the
//     report (see Config.ReportTo), for the report step.
//   - payments is pipeline.Map over payments.item, at most
//     Config.MaxInFlight at once, tolerating Config.ToleratedFailures or
//     Config.ToleratedFailurePercent failed payments, whichever is larger
//     (rejected rows are tolerated apart).
//   - report joins the children's outcomes, in input order, into a
//     Report, which the pipeline's Output publishes (Terminal Object
//     Publish) to Config.ReportTo before the execution succeeds.
//
// payments.item:
//
//   - validate turns a row into a Payment, or rejects a malformed row
//     (reject.Reject: it goes to the Item Reject Sink, and the child ends
//     FAILED with code item_rejected, counted as rejected by the map, no
//     dead letter).
//   - submit is a command step (package command) whose command id is the
//     payment id: it creates the payment at the provider under an
//     idempotency key derived from the tenant and the payment id
//     (IdempotencyKey), so a retry, a takeover or the same file submitted
//     again never pays twice.
//   - await is an await step (package await): it registers the await's
//     completion URL and resume token with the provider as the payment's
//     callback and parks the child (WAITING_EXTERNAL, no worker held).
//     The provider's settlement, posted to that URL, completes it. With
//     no settlement within Config.AwaitTimeout the step fails with
//     AWAIT_TIMEOUT and is not retried (a retry would only wait again):
//     the child dead-letters, a failure the map tolerates within its
//     limit, and the report lists the payment as failed for an operator
//     to look into (it was charged; its outcome is unknown).
//   - status turns the settlement into the payment's final Record.
//
// The provider's API and a fake of it are package provider. The local
// main (cmd/local) serves both pipelines with server.Main.
package payments

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/qasync/qasync/examples/payments/provider"
	"github.com/qasync/qasync/shared/await"
	"github.com/qasync/qasync/shared/command"
	"github.com/qasync/qasync/shared/pipeline"
)

// Pipeline ids: submit a file to POST /v1/pipelines/payments.file/executions.
const (
	FileID = "payments.file"
	ItemID = "payments.item"
)

// Step names of payments.file, in order.
const (
	StepParse    = "parse"
	StepPayments = "payments"
	StepReport   = "report"
)

// Step names of payments.item, in order.
const (
	StepValidate = "validate"
	StepSubmit   = "submit"
	StepAwait    = "await"
	StepStatus   = "status"
)

// Error codes of the service's own failures.
const (
	// CodeInvalidFile: the file cannot be read as a payments file (no
	// such object, wrong header, too many rows). Non-retryable.
	CodeInvalidFile = "invalid_payments_file"
	// CodeInvalidPayment: the code of a row's rejection (the child's
	// own code is item_rejected; the reject envelope keeps this one).
	CodeInvalidPayment = "invalid_payment"
	// CodeProviderRefused: the provider refused the payment for good.
	CodeProviderRefused = "provider_refused"
	// CodeProviderUnavailable: the provider could not be reached or
	// answered 5xx/429. Retryable.
	CodeProviderUnavailable = "provider_unavailable"
	// CodePaymentDeclined: the settlement says the payment was declined.
	CodePaymentDeclined = "payment_declined"
	// CodeInvalidSettlement: the settlement has a status this service
	// does not know. Non-retryable.
	CodeInvalidSettlement = "invalid_settlement"
	// CodeCallbackURLUnknown: the runtime's own URL, which the provider
	// calls back, is not known yet (see Service.Serving).
	CodeCallbackURLUnknown = "callback_url_unknown"
)

// Environment variables read by FromEnv.
const (
	EnvProviderURL       = "PAYMENTS_PROVIDER_URL"
	EnvAPIURL            = "PAYMENTS_API_URL"
	EnvReportTo          = "PAYMENTS_REPORT_TO"
	EnvMaxInFlight       = "PAYMENTS_MAX_IN_FLIGHT"
	EnvToleratedPercent  = "PAYMENTS_TOLERATED_FAILURE_PERCENT"
	EnvToleratedFailures = "PAYMENTS_TOLERATED_FAILURES"
	EnvAwaitTimeout      = "PAYMENTS_AWAIT_TIMEOUT"
)

// Config is the service's configuration.
type Config struct {
	// ProviderURL is the payment provider's API root.
	ProviderURL string
	// APIURL is this service's own API root, which the provider calls
	// back (the await completion route). Empty: the address the local
	// main serves on (Service.Serving); behind API Gateway it must be set.
	APIURL string
	// ReportTo is the report's target URI template (pipeline.Output.To),
	// containing {executionId}: file:///abs/dir/{executionId}.json, or
	// s3://bucket/prefix/{tenant}/{executionId}.json. The staged rows go
	// next to it, {executionId} replaced by <executionId>.rows.
	ReportTo string
	// MaxInFlight bounds the payments in flight at once (1 to
	// pipeline.MaxInFlightLimit).
	MaxInFlight int
	// ToleratedFailures and ToleratedFailurePercent (of the file's rows)
	// bound how many payments may fail (callbacks that never came,
	// provider refusals) with the file still succeeding; the larger
	// applies, and beyond it the file dead-letters (children_failed).
	// Rejected rows do not count.
	ToleratedFailures       int
	ToleratedFailurePercent float64
	// AwaitTimeout bounds the wait for a payment's settlement.
	AwaitTimeout time.Duration
	// HTTP calls the provider. Default: a client with a 10 s timeout.
	HTTP *http.Client
}

// Defaults of Config's fields.
const (
	DefaultProviderURL             = "http://127.0.0.1:8090"
	DefaultMaxInFlight             = 100
	DefaultToleratedFailures       = 10
	DefaultToleratedFailurePercent = 5
	DefaultAwaitTimeout            = time.Hour
)

// FromEnv returns the Config of the environment variables Env*, with the
// defaults for the ones unset; ReportTo defaults to
// file://<working directory>/payments-reports/{executionId}.json.
func FromEnv() (Config, error) {
	c := Config{ProviderURL: os.Getenv(EnvProviderURL), APIURL: os.Getenv(EnvAPIURL), ReportTo: os.Getenv(EnvReportTo),
		MaxInFlight: DefaultMaxInFlight, ToleratedFailures: DefaultToleratedFailures,
		ToleratedFailurePercent: DefaultToleratedFailurePercent, AwaitTimeout: DefaultAwaitTimeout}
	if c.ProviderURL == "" {
		c.ProviderURL = DefaultProviderURL
	}
	if c.ReportTo == "" {
		wd, err := os.Getwd()
		if err != nil {
			return c, fmt.Errorf("payments: %s: working directory: %w", EnvReportTo, err)
		}
		c.ReportTo = (&url.URL{Scheme: "file", Path: filepath.ToSlash(filepath.Join(wd, "payments-reports")) + "/{executionId}.json"}).String()
		// url.URL escapes the braces of the placeholder; keep them.
		c.ReportTo = strings.NewReplacer("%7B", "{", "%7D", "}").Replace(c.ReportTo)
	}
	if v := os.Getenv(EnvMaxInFlight); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return c, fmt.Errorf("payments: %s=%q: %w", EnvMaxInFlight, v, err)
		}
		c.MaxInFlight = n
	}
	if v := os.Getenv(EnvToleratedFailures); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return c, fmt.Errorf("payments: %s=%q: %w", EnvToleratedFailures, v, err)
		}
		c.ToleratedFailures = n
	}
	if v := os.Getenv(EnvToleratedPercent); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return c, fmt.Errorf("payments: %s=%q: %w", EnvToleratedPercent, v, err)
		}
		c.ToleratedFailurePercent = f
	}
	if v := os.Getenv(EnvAwaitTimeout); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return c, fmt.Errorf("payments: %s=%q: %w", EnvAwaitTimeout, v, err)
		}
		c.AwaitTimeout = d
	}
	return c, c.Validate()
}

// Validate reports a configuration the service cannot run with (the
// registry checks the map's limits and the report's URI on its own).
func (c Config) Validate() error {
	if u, err := url.Parse(c.ProviderURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("payments: provider URL %q: want http(s)://host[:port]", c.ProviderURL)
	}
	if c.APIURL != "" {
		if u, err := url.Parse(c.APIURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("payments: API URL %q: want http(s)://host[:port][/base]", c.APIURL)
		}
	}
	if c.AwaitTimeout <= 0 {
		return fmt.Errorf("payments: await timeout %s: must be positive", c.AwaitTimeout)
	}
	return nil
}

// Service is the payments service: its configuration, its provider
// client, and the runtime's own URL for the callbacks.
type Service struct {
	cfg      Config
	provider *provider.Client
	apiURL   atomic.Pointer[string]
}

// New returns the service of cfg.
func New(cfg Config) *Service {
	hc := cfg.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	s := &Service{cfg: cfg, provider: &provider.Client{BaseURL: cfg.ProviderURL, HTTP: hc}}
	if cfg.APIURL != "" {
		u := strings.TrimRight(cfg.APIURL, "/")
		s.apiURL.Store(&u)
	}
	return s
}

// Serving tells the service the address its HTTP API listens on, for
// server.OnStarted: without Config.APIURL, the provider is given
// callback URLs on that address (a wildcard host becomes loopback).
func (s *Service) Serving(addr net.Addr) {
	if s.cfg.APIURL != "" {
		return
	}
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	u := "http://" + net.JoinHostPort(host, port)
	s.apiURL.Store(&u)
}

// Registry returns the registry of the service's two pipelines. The
// definitions depend only on Config's checked values; it panics when
// they are invalid (a test of the registry catches that).
func (s *Service) Registry() *pipeline.Registry {
	return pipeline.MustRegistry(s.File(), s.Item())
}

// Registry returns the registry the service's mains serve, configured
// from the environment (FromEnv). It panics on an invalid environment;
// the local main builds its Service itself to report that cleanly.
func Registry() *pipeline.Registry {
	cfg, err := FromEnv()
	if err != nil {
		panic(err.Error())
	}
	return New(cfg).Registry()
}

// File returns the payments.file pipeline.
func (s *Service) File() pipeline.Pipeline {
	return pipeline.Pipeline{ID: FileID, Steps: []pipeline.Step{
		pipeline.NewStep(StepParse, s.parse),
		pipeline.Map(StepPayments, ItemID, pipeline.MapOptions{
			MaxInFlight: s.cfg.MaxInFlight, ToleratedFailures: s.cfg.ToleratedFailures,
			ToleratedFailurePercent: s.cfg.ToleratedFailurePercent}),
		pipeline.NewStep(StepReport, s.report),
	}, Output: &pipeline.Output{To: s.cfg.ReportTo}}
}

// Item returns the payments.item pipeline.
func (s *Service) Item() pipeline.Pipeline {
	return pipeline.Pipeline{ID: ItemID, Steps: []pipeline.Step{
		pipeline.NewStep(StepValidate, validate),
		command.Step(StepSubmit, command.Spec[Payment, Submitted]{
			ID:        func(p Payment) string { return p.PaymentID },
			Reconcile: s.reconcile,
		}, s.submit),
		// One attempt: AWAIT_TIMEOUT means the settlement never came, and
		// a retry would only wait for it again (with a new token).
		// Transient failures of the registration are retried inside
		// notify, then handed back (which does not use up the attempt).
		await.Step(StepAwait, await.Spec{Timeout: s.cfg.AwaitTimeout}, s.notify,
			pipeline.WithRetry(pipeline.RetryPolicy{MaxRetries: 0, Delay: time.Second, Multiplier: 1, MaxDelay: time.Second})),
		pipeline.NewStep(StepStatus, status),
	}}
}

// IdempotencyKey is the provider idempotency key of tenant's payment
// paymentID: the same for every attempt, takeover and resubmission of
// that payment, and different for every other (tenant, payment id).
func IdempotencyKey(tenant, paymentID string) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%d:%s;%d:%s", len(tenant), tenant, len(paymentID), paymentID))
	return "pay-" + hex.EncodeToString(sum[:16])
}

// submit creates the payment at the provider: the command's side effect.
func (s *Service) submit(ctx context.Context, info pipeline.StepInfo, p Payment) (Submitted, error) {
	pp, err := s.provider.Create(ctx, IdempotencyKey(info.TenantID, p.PaymentID), provider.CreateRequest{
		Reference: p.PaymentID, Payee: p.Payee, AmountCents: p.AmountCents, Currency: p.Currency})
	if err != nil {
		return Submitted{}, providerError(err)
	}
	logger(info).LogAttrs(ctx, slog.LevelInfo, "payment_submitted", slog.String("event", "payment_submitted"),
		slog.String("payment_id", p.PaymentID), slog.String("provider_payment_id", pp.ID))
	return Submitted{Payment: p, ProviderPaymentID: pp.ID}, nil
}

// reconcile asks the provider what became of a submit whose run died
// before recording its outcome: the payment its idempotency key created,
// if any (none: the command dispatches again, under the same key).
func (s *Service) reconcile(ctx context.Context, info pipeline.StepInfo, p Payment) (Submitted, bool, error) {
	pp, found, err := s.provider.Find(ctx, IdempotencyKey(info.TenantID, p.PaymentID))
	if err != nil {
		return Submitted{}, false, providerError(err)
	}
	return Submitted{Payment: p, ProviderPaymentID: pp.ID}, found, nil
}

// notify registers the await's completion URL and resume token as the
// payment's callback at the provider. A takeover registers the same
// callback again, which the provider takes as a repeat.
func (s *Service) notify(ctx context.Context, req await.Request) error {
	var sub Submitted
	if err := req.Input.DecodeJSON(&sub); err != nil {
		return pipeline.NonRetryable("invalid_input", fmt.Errorf("payments: await: decode input: %w", err))
	}
	base := s.apiURL.Load()
	if base == nil {
		return pipeline.HandBack(CodeCallbackURLUnknown,
			fmt.Errorf("payments: the service's own URL is not known yet (set %s)", EnvAPIURL))
	}
	cb := provider.Callback{Token: req.Token, URL: *base + "/v1/executions/" + url.PathEscape(req.Info.ExecutionID) +
		"/awaits/" + url.PathEscape(req.AwaitID) + "/complete"}
	var err error
	for try, wait := 1, 200*time.Millisecond; ; try, wait = try+1, 2*wait {
		err = s.provider.RegisterCallback(ctx, sub.ProviderPaymentID, cb)
		if err == nil || !provider.Temporary(err) || try == 3 {
			break
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(wait):
		}
	}
	switch {
	case err == nil:
	case provider.Temporary(err):
		// Nothing is parked yet: hand the step back rather than spend its
		// one attempt.
		return pipeline.HandBack(CodeProviderUnavailable, err)
	default:
		return pipeline.NonRetryable(CodeProviderRefused, err)
	}
	logger(req.Info).LogAttrs(ctx, slog.LevelInfo, "payment_awaiting_settlement", slog.String("event", "payment_awaiting_settlement"),
		slog.String("payment_id", sub.PaymentID), slog.String("provider_payment_id", sub.ProviderPaymentID),
		slog.String("await_id", req.AwaitID))
	return nil
}

// providerError classifies an error of a provider call as a step error.
func providerError(err error) error {
	if provider.Temporary(err) {
		return pipeline.Retryable(CodeProviderUnavailable, err)
	}
	return pipeline.NonRetryable(CodeProviderRefused, err)
}

// logger is the step's logger, or a discarding one.
func logger(info pipeline.StepInfo) *slog.Logger {
	if info.Logger != nil {
		return info.Logger
	}
	return slog.New(slog.DiscardHandler)
}
