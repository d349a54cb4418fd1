// Package authlimit slows down the guessing of the operator token
// (admin.token): a per-client limit on failed authentication attempts,
// shared by the HTTP API's operator routes and the console's sign-in.
//
// The policy is a leaky bucket per client key (ClientKey: the client's
// address), kept as the time its debt is paid off (GCRA): each attempt
// adds Interval of debt, which time pays off, and an attempt that would
// take the debt past Burst intervals is refused (429 with Retry-After)
// without its token even being looked at. With the defaults a client
// gets DefaultBurst (10) failures at once, then one more every
// DefaultInterval (1 s); after Burst quiet intervals it has its whole
// allowance back.
//
// An attempt is reserved before the token is checked (Begin) and given
// back when it did not fail (Limiter.Succeeded), so only failures count
// and concurrent guesses cannot slip past the limit between a check and
// a failure. A success gives back that attempt only: it never resets a
// client's earlier failures, nor any other client's.
//
// Memory is bounded: at most MaxClients clients are tracked (a client
// whose debt is paid is forgotten at once; when the table is full the
// client whose debt last grew longest ago is evicted).
//
// The limit lives in the process: each `qasync serve` process, and each
// Lambda instance of the submit function, keeps its own, so behind API
// Gateway an attacker spread over many instances gets an allowance per
// instance. There the operator routes are IAM-authorized anyway; a
// rate-based AWS WAF rule in front of the gateway is the deployed answer
// to floods.
package authlimit

import (
	"container/list"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

// The defaults of Config.
const (
	// DefaultBurst is how many failed attempts a client may make at
	// once before it is refused.
	DefaultBurst = 10
	// DefaultInterval is how often a refused client may try again: one
	// more failure per interval.
	DefaultInterval = time.Second
	// DefaultMaxClients bounds the clients tracked at once (about 150
	// bytes each).
	DefaultMaxClients = 10000
)

// Config tunes a Limiter. The zero value takes every default.
type Config struct {
	// Burst is the failed attempts a client may make at once (default
	// DefaultBurst).
	Burst int
	// Interval is the time one failed attempt takes to be forgiven
	// (default DefaultInterval).
	Interval time.Duration
	// MaxClients bounds the clients tracked (default DefaultMaxClients).
	MaxClients int
}

// Limiter is the per-client limit on failed attempts. It is safe for
// concurrent use. Its methods take the time: the caller's clock.
type Limiter struct {
	burst    int
	interval time.Duration
	max      int

	mu      sync.Mutex
	clients map[string]*list.Element // of *client
	order   *list.List               // front: the client whose debt last grew
}

// client is one tracked client: when its debt is paid off.
type client struct {
	key  string
	paid time.Time
}

// New returns a Limiter with c's settings (defaults for zero fields).
func New(c Config) *Limiter {
	l := &Limiter{burst: c.Burst, interval: c.Interval, max: c.MaxClients, clients: map[string]*list.Element{}, order: list.New()}
	if l.burst <= 0 {
		l.burst = DefaultBurst
	}
	if l.interval <= 0 {
		l.interval = DefaultInterval
	}
	if l.max <= 0 {
		l.max = DefaultMaxClients
	}
	return l
}

// Begin reserves an attempt of the client key at now. A client over its
// limit gets ok false and how long until it may try again (more than
// zero); its attempt is not reserved. A reserved attempt counts as a
// failure unless Succeeded gives it back.
func (l *Limiter) Begin(key string, now time.Time) (retryAfter time.Duration, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	paid := now
	el := l.clients[key]
	if el != nil {
		if c := el.Value.(*client); c.paid.After(now) {
			paid = c.paid
		}
	}
	// Refused when one more interval of debt would pass burst intervals:
	// the attempt after burst failures made at once waits for one to be
	// forgiven.
	if limit := now.Add(time.Duration(l.burst-1) * l.interval); paid.After(limit) {
		return paid.Sub(limit), false
	}
	paid = paid.Add(l.interval)
	if el != nil {
		el.Value.(*client).paid = paid
		l.order.MoveToFront(el)
		return 0, true
	}
	if l.order.Len() >= l.max {
		oldest := l.order.Back()
		delete(l.clients, oldest.Value.(*client).key)
		l.order.Remove(oldest)
	}
	l.clients[key] = l.order.PushFront(&client{key: key, paid: paid})
	return 0, true
}

// Succeeded gives back the attempt Begin reserved for key: it did not
// fail (the token was right, or none was offered). The client's earlier
// failures stay counted.
func (l *Limiter) Succeeded(key string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	el := l.clients[key]
	if el == nil {
		return // evicted meanwhile: nothing to give back
	}
	c := el.Value.(*client)
	c.paid = c.paid.Add(-l.interval)
	if !c.paid.After(now) {
		delete(l.clients, key)
		l.order.Remove(el)
	}
}

// Len is the number of clients tracked.
func (l *Limiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.order.Len()
}

// ClientKey is the key r's client is limited under: the host of
// r.RemoteAddr (behind API Gateway the source IP the adapter puts
// there), an IPv6 address reduced to its /64 prefix (one host commonly
// holds a whole /64). An address that does not parse is its own key.
func ClientKey(r *http.Request) string {
	host := ClientAddr(r)
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	if ip = ip.Unmap(); ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// ClientAddr is the host of r.RemoteAddr (the whole of it when it has no
// port), as logged.
func ClientAddr(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

// RetryAfter is the Retry-After header value of a wait: whole seconds,
// rounded up, at least 1.
func RetryAfter(d time.Duration) string {
	s := (d + time.Second - 1) / time.Second
	return strconv.FormatInt(max(int64(s), 1), 10)
}

// The log events of the limiter's users (WARN): a failed attempt (a
// token that was offered and is wrong) and a refused one.
const (
	EventFailed    = "operator_auth_failed"
	EventThrottled = "operator_auth_throttled"
)

// Check begins an attempt of r's client at now (Begin). A refused client
// is logged as EventThrottled, with surface (the API or the console) and
// the client's address, and Check returns the Retry-After value and
// false: answer 429 without looking at the token.
func (l *Limiter) Check(ctx context.Context, log *slog.Logger, r *http.Request, surface string, now time.Time) (retryAfter string, ok bool) {
	wait, ok := l.Begin(ClientKey(r), now)
	if ok {
		return "", true
	}
	retryAfter = RetryAfter(wait)
	log.LogAttrs(ctx, slog.LevelWarn, EventThrottled, slog.String("event", EventThrottled), slog.String("surface", surface),
		slog.String("route", r.Pattern), slog.String("client_addr", ClientAddr(r)), slog.String("retry_after_s", retryAfter))
	return retryAfter, false
}

// Done ends the attempt Check began: a failed one is logged as
// EventFailed (surface, route and the client's address, never the
// token) and stays counted; any other is given back (Succeeded).
func (l *Limiter) Done(ctx context.Context, log *slog.Logger, r *http.Request, surface string, now time.Time, failed bool) {
	if !failed {
		l.Succeeded(ClientKey(r), now)
		return
	}
	log.LogAttrs(ctx, slog.LevelWarn, EventFailed, slog.String("event", EventFailed), slog.String("surface", surface),
		slog.String("route", r.Pattern), slog.String("client_addr", ClientAddr(r)))
}
