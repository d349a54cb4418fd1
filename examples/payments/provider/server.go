package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"
)

// Faults are the misbehaviours of Server's callbacks that a real
// provider's webhooks show. The zero value delivers every settlement
// once, at once.
type Faults struct {
	// MaxDelay delays each delivery by a random time in [0, MaxDelay), so
	// that settlements arrive in another order than their payments were
	// made.
	MaxDelay time.Duration
	// Duplicate selects the references (payment ids of the merchant)
	// whose settlement is delivered twice: two independent deliveries of
	// the same document, each with its own delay.
	Duplicate func(reference string) bool
	// Drop selects the references whose settlement is never delivered.
	Drop func(reference string) bool
	// FailFirstCreate selects the references whose first create is
	// charged but answered 503, as when the answer is lost on its way:
	// the caller's retry under the same idempotency key must get the same
	// payment, not a second charge.
	FailFirstCreate func(reference string) bool
	// Seed seeds the random delays.
	Seed uint64
}

// Options configure a Server.
type Options struct {
	Faults
	// DeliveryTimeout bounds how long one delivery keeps trying (while
	// the callback answers 409, 429 or 5xx, or not at all). Default 5m.
	DeliveryTimeout time.Duration
	// Concurrency bounds the deliveries in flight at once (the waits of
	// their delays do not count). Default 32.
	Concurrency int
	// HTTP sends the deliveries. Default: a client with a 10 s timeout.
	HTTP *http.Client
	// Now defaults to time.Now.
	Now func() time.Time
	// Logger receives a warning per delivery given up. Default: none.
	Logger *slog.Logger
}

// Stats count what a Server did.
type Stats struct {
	// Creates counts create requests, replays and refusals included.
	Creates int
	// Charges counts payments charged: one per idempotency key.
	Charges int
	// Registrations counts callback registrations that were new (a
	// repeat of the current one is not counted).
	Registrations int
	// Scheduled counts deliveries scheduled (a duplicated settlement
	// counts twice); Duplicates the second ones among them.
	Scheduled, Duplicates int
	// Dropped counts settlements never delivered (Faults.Drop).
	Dropped int
	// Attempts counts delivery POSTs, retries included.
	Attempts int
	// Accepted counts deliveries the callback answered 200.
	Accepted int
	// Abandoned counts deliveries given up: refused for good (4xx other
	// than 409 and 429), past DeliveryTimeout, or superseded by a newer
	// registration.
	Abandoned int
}

// Accepted is a settlement's first acceptance by its callback.
type Accepted struct {
	Reference string
	At        time.Time
}

// Server is a fake payment provider (an http.Handler) with configurable
// callback faults. It keeps everything in memory. Close stops its
// pending deliveries.
type Server struct {
	opts Options
	mux  *http.ServeMux
	sem  chan struct{}

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	rnd      *rand.Rand
	byKey    map[string]*payment
	byID     map[string]*payment
	byRef    map[string]*payment // reference -> its first payment
	charges  map[string]int      // reference -> payments charged
	accepted []Accepted          // in the order the settlements were first accepted
	stats    Stats
}

// payment is a created payment and its callback state.
type payment struct {
	Payment
	req        CreateRequest
	failedOnce bool
	// callback is the current registration (zero before the first).
	callback Callback
	// settlement is the document every delivery sends, fixed at the
	// first registration.
	settlement []byte
	// settled marks a settlement accepted at least once.
	settled bool
}

// NewServer returns a Server with opts.
func NewServer(opts Options) *Server {
	if opts.DeliveryTimeout <= 0 {
		opts.DeliveryTimeout = 5 * time.Minute
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 32
	}
	if opts.HTTP == nil {
		opts.HTTP = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			MaxIdleConns: opts.Concurrency, MaxIdleConnsPerHost: opts.Concurrency, IdleConnTimeout: time.Minute}}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{opts: opts, mux: http.NewServeMux(), sem: make(chan struct{}, opts.Concurrency),
		rnd:   rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15)),
		byKey: map[string]*payment{}, byID: map[string]*payment{}, byRef: map[string]*payment{}, charges: map[string]int{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.mux.HandleFunc("POST /v1/payments", s.create)
	s.mux.HandleFunc("GET /v1/payments", s.find)
	s.mux.HandleFunc("POST /v1/payments/{id}/callbacks", s.register)
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Close stops the pending deliveries and waits for them to end.
func (s *Server) Close() {
	s.cancel()
	s.wg.Wait()
}

// Wait waits until no delivery is pending (or ctx ends).
func (s *Server) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stats returns the counts so far.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Charges returns how many payments were charged for reference.
func (s *Server) Charges(reference string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.charges[reference]
}

// PaymentOf returns the payment created for reference (the first, if
// several keys created one).
func (s *Server) PaymentOf(reference string) (Payment, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.byRef[reference]
	if !ok {
		return Payment{}, false
	}
	return p.Payment, true
}

// Settlements returns the settlements accepted so far, in the order of
// their first acceptance (a duplicate's second is not listed).
func (s *Server) Settlements() []Accepted {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Accepted(nil), s.accepted...)
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get(HeaderIdempotencyKey)
	var req CreateRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&req); err != nil {
		http.Error(w, "body: "+err.Error(), http.StatusBadRequest)
		return
	}
	switch {
	case key == "" || len(key) > 255:
		http.Error(w, "header Idempotency-Key: 1 to 255 characters required", http.StatusBadRequest)
		return
	case req.Reference == "" || req.AmountCents <= 0 || len(req.Currency) != 3:
		http.Error(w, "reference, a positive amountCents and a currency are required", http.StatusUnprocessableEntity)
		return
	}
	s.mu.Lock()
	s.stats.Creates++
	p, seen := s.byKey[key]
	switch {
	case seen && p.req != req:
		s.mu.Unlock()
		http.Error(w, "idempotency key reused with another payment", http.StatusUnprocessableEntity)
		return
	case !seen:
		p = &payment{req: req, Payment: Payment{ID: fmt.Sprintf("pp_%08d", len(s.byID)+1), Reference: req.Reference,
			Payee: req.Payee, AmountCents: req.AmountCents, Currency: req.Currency, Status: StatusPending,
			CreatedAt: s.opts.Now().UTC().Truncate(time.Millisecond)}}
		s.byKey[key], s.byID[p.ID] = p, p
		if _, ok := s.byRef[req.Reference]; !ok {
			s.byRef[req.Reference] = p
		}
		s.charges[req.Reference]++
		s.stats.Charges++
	}
	lose := !p.failedOnce && s.opts.FailFirstCreate != nil && s.opts.FailFirstCreate(req.Reference)
	if lose {
		p.failedOnce = true
	}
	out := p.Payment
	s.mu.Unlock()
	if lose {
		http.Error(w, "the answer was lost (fault FailFirstCreate)", http.StatusServiceUnavailable)
		return
	}
	code := http.StatusCreated
	if seen {
		code = http.StatusOK
	}
	writeJSON(w, code, out)
}

func (s *Server) find(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	p, ok := s.byKey[r.URL.Query().Get("idempotencyKey")]
	var out Payment
	if ok {
		out = p.Payment
	}
	s.mu.Unlock()
	if !ok {
		http.Error(w, "no payment for this idempotency key", http.StatusNotFound)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) register(w http.ResponseWriter, r *http.Request) {
	var cb Callback
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&cb); err != nil || cb.URL == "" || cb.Token == "" {
		http.Error(w, "body: url and token are required", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.byID[r.PathValue("id")]
	switch {
	case !ok:
		http.Error(w, "unknown payment", http.StatusNotFound)
		return
	case p.callback == cb:
		w.WriteHeader(http.StatusOK) // the same registration again (a takeover's notify)
		return
	}
	p.callback = cb
	s.stats.Registrations++
	if p.settlement == nil {
		p.Status = StatusSettled
		p.settlement, _ = json.Marshal(Settlement{PaymentID: p.ID, Reference: p.Reference, Status: StatusSettled,
			AmountCents: p.AmountCents, Currency: p.Currency, SettledAt: s.opts.Now().UTC().Truncate(time.Millisecond)})
	}
	copies := 1
	switch {
	case s.opts.Drop != nil && s.opts.Drop(p.Reference):
		s.stats.Dropped++
		copies = 0
	case s.opts.Duplicate != nil && s.opts.Duplicate(p.Reference):
		s.stats.Duplicates++
		copies = 2
	}
	for range copies {
		s.stats.Scheduled++
		var delay time.Duration
		if s.opts.MaxDelay > 0 {
			delay = time.Duration(s.rnd.Int64N(int64(s.opts.MaxDelay)))
		}
		s.wg.Add(1)
		go s.deliver(p, cb, p.settlement, delay)
	}
	w.WriteHeader(http.StatusAccepted)
}

// deliver posts doc to cb after delay, and again while the callback
// answers that it cannot take it yet (409: the execution has not parked
// at its await yet; 429, 5xx, no answer), backing off, until it is
// accepted, refused for good, superseded by another registration, or
// DeliveryTimeout has passed.
func (s *Server) deliver(p *payment, cb Callback, doc []byte, delay time.Duration) {
	defer s.wg.Done()
	if !sleep(s.ctx, delay) {
		return
	}
	deadline := s.opts.Now().Add(s.opts.DeliveryTimeout)
	backoff := 100 * time.Millisecond
	for {
		s.mu.Lock()
		current := p.callback == cb
		if current {
			s.stats.Attempts++
		} else {
			s.stats.Abandoned++
		}
		s.mu.Unlock()
		if !current {
			return
		}
		code, err := s.post(cb, doc)
		switch {
		case code == http.StatusOK:
			s.mu.Lock()
			s.stats.Accepted++
			if !p.settled {
				p.settled = true
				s.accepted = append(s.accepted, Accepted{Reference: p.Reference, At: s.opts.Now()})
			}
			s.mu.Unlock()
			return
		case err == nil && code != http.StatusConflict && code != http.StatusTooManyRequests && code < 500,
			s.opts.Now().After(deadline):
			s.mu.Lock()
			s.stats.Abandoned++
			s.mu.Unlock()
			s.opts.Logger.Warn("callback_abandoned", slog.String("event", "callback_abandoned"),
				slog.String("payment_id", p.ID), slog.Int("status", code), slog.Any("error", err))
			return
		}
		if !sleep(s.ctx, backoff) {
			return
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// post sends one delivery, at most Concurrency at once.
func (s *Server) post(cb Callback, doc []byte) (int, error) {
	select {
	case s.sem <- struct{}{}:
		defer func() { <-s.sem }()
	case <-s.ctx.Done():
		return 0, s.ctx.Err()
	}
	req, err := http.NewRequestWithContext(s.ctx, http.MethodPost, cb.URL, bytes.NewReader(doc))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderResumeToken, cb.Token)
	resp, err := s.opts.HTTP.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// sleep waits d; it reports false when ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}
