package benchdurable

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/qasync/qasync/shared/internal/iamcheck"
)

// OpCount is what a Proxy saw of one operation.
type OpCount struct {
	// Requests is the number of requests (each SDK retry is one more).
	Requests int `json:"requests"`
	// Errors is how many of them got no 2xx answer (a failed conditional
	// write is one) or no answer at all.
	Errors int `json:"errors"`
	// Units is the capacity units DynamoDB reported (ConsumedCapacity's
	// CapacityUnits, table and indexes together), TableUnits and
	// IndexUnits its split. Zero unless the proxy asks for them
	// (Options.Capacity); failed requests report none.
	Units      float64 `json:"units,omitempty"`
	TableUnits float64 `json:"table_units,omitempty"`
	IndexUnits float64 `json:"index_units,omitempty"`
	// Nanos is the requests' total time from the proxy's forwarding to
	// the upstream's answer (or failure): Nanos/Requests is the mean
	// latency of the operation at the server, with the proxy's own hop
	// left out.
	Nanos int64 `json:"nanos"`
}

// MeanMs is the operation's mean latency at the server in milliseconds
// (0 without requests).
func (c OpCount) MeanMs() float64 {
	if c.Requests == 0 {
		return 0
	}
	return float64(c.Nanos) / float64(c.Requests) / 1e6
}

// Traced is one request a Proxy saw while tracing (Proxy.StartTrace):
// its operation, when it was forwarded and answered, its status, and
// both bodies (the request as forwarded), for telling which execution
// it served.
type Traced struct {
	Op       string
	Start    time.Time
	End      time.Time
	Status   int
	Request  []byte
	Response []byte
}

// ProxyOptions adjust NewProxy.
type ProxyOptions struct {
	// Capacity adds "ReturnConsumedCapacity":"INDEXES" to the JSON body of
	// every DynamoDB data-plane request that lacks the field
	// (CapacityOps) and sums the ConsumedCapacity of the answers. The body
	// no longer matches its SigV4 signature: only for a server that does
	// not verify signatures (DynamoDB Local; see SignaturesUnverified).
	Capacity bool
}

// CapacityOps are the DynamoDB operations that accept
// ReturnConsumedCapacity.
var CapacityOps = map[string]bool{
	"PutItem": true, "UpdateItem": true, "DeleteItem": true, "BatchWriteItem": true, "TransactWriteItems": true,
	"GetItem": true, "BatchGetItem": true, "TransactGetItems": true, "Query": true, "Scan": true,
}

// Proxy is a counting reverse proxy on loopback in front of one AWS-style
// JSON endpoint (DynamoDB Local, the SQS server). It counts requests by
// operation, named "<service>.<Operation>" from the X-Amz-Target header
// ("DynamoDB.UpdateItem", "SQS.ReceiveMessage"; "HTTP.<METHOD>" for a
// request without one, such as S3's), so the process under test is
// measured from outside, whatever SDK middleware it runs.
type Proxy struct {
	// URL is the proxy's base URL (http://127.0.0.1:<port>).
	URL string

	opts ProxyOptions
	srv  *http.Server
	mu   sync.Mutex
	ops  map[string]*OpCount
	// conns counts the client connections accepted since the last Reset.
	conns int
	// tracing: every request is kept in traced.
	tracing bool
	traced  []Traced
}

// call is what the proxy knows of one forwarded request.
type call struct {
	op    string
	start time.Time
	body  []byte // the forwarded body, kept while tracing
}

type callKey struct{}

// NewProxy starts a proxy to target (a base URL) on a free loopback port.
func NewProxy(target string, opts ProxyOptions) (*Proxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{URL: "http://" + ln.Addr().String(), opts: opts, ops: map[string]*OpCount{}}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			c := &call{op: iamcheck.Operation(pr.In)}
			if p.opts.Capacity {
				askCapacity(pr.Out, c.op)
			}
			if p.isTracing() && pr.Out.Body != nil {
				c.body, _ = io.ReadAll(pr.Out.Body)
				pr.Out.Body.Close()
				pr.Out.Body = io.NopCloser(bytes.NewReader(c.body))
			}
			c.start = time.Now()
			pr.Out = pr.Out.WithContext(context.WithValue(pr.Out.Context(), callKey{}, c))
		},
		// Many serve goroutines share the proxy: keep their connections.
		Transport: &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, DisableCompression: true},
		ModifyResponse: func(resp *http.Response) error {
			c, _ := resp.Request.Context().Value(callKey{}).(*call)
			units := func([]byte) [3]float64 { return [3]float64{} }
			if p.opts.Capacity && resp.StatusCode/100 == 2 && strings.HasPrefix(c.op, "DynamoDB.") {
				units = func(b []byte) [3]float64 { return consumed(b, resp.Header.Get("Content-Encoding")) }
			}
			tracing := p.isTracing()
			var b []byte
			if tracing || p.opts.Capacity && resp.StatusCode/100 == 2 && strings.HasPrefix(c.op, "DynamoDB.") {
				var err error
				b, err = io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					return err
				}
				resp.Body = io.NopCloser(bytes.NewReader(b))
			}
			p.count(c, time.Now(), resp.StatusCode, units(b), b)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			c, _ := r.Context().Value(callKey{}).(*call)
			if c == nil { // failed before Rewrite
				c = &call{op: iamcheck.Operation(r), start: time.Now()}
			}
			p.count(c, time.Now(), 0, [3]float64{}, nil)
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	p.srv = &http.Server{Handler: rp, ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			p.mu.Lock()
			p.conns++
			p.mu.Unlock()
		}
	}}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// askCapacity adds ReturnConsumedCapacity INDEXES to a DynamoDB request
// of CapacityOps whose plain JSON body lacks the field. The field is
// spliced in after the object's opening brace, the rest of the body left
// as it is: the proxy stays a cheap hop (decoding and encoding every
// body cost as much CPU as the serve process's own work per request).
func askCapacity(r *http.Request, op string) {
	name, ok := strings.CutPrefix(op, "DynamoDB.")
	if !ok || !CapacityOps[name] || r.Body == nil || r.Header.Get("Content-Encoding") != "" {
		return
	}
	b, err := io.ReadAll(r.Body)
	r.Body.Close()
	body := b
	if i := bytes.IndexByte(b, '{'); err == nil && i >= 0 && len(bytes.TrimSpace(b[:i])) == 0 &&
		!bytes.Contains(b, []byte(`"ReturnConsumedCapacity"`)) {
		field := `"ReturnConsumedCapacity":"INDEXES"`
		if rest := bytes.TrimSpace(b[i+1:]); len(rest) > 0 && rest[0] != '}' {
			field += ","
		}
		body = make([]byte, 0, len(b)+len(field))
		body = append(append(append(body, b[:i+1]...), field...), b[i+1:]...)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.Header.Del("Content-Length")
}

// consumedCapacity is one ConsumedCapacity of a DynamoDB answer.
type consumedCapacity struct {
	CapacityUnits float64
	Table         *struct{ CapacityUnits float64 }
	// Both kinds of index are counted as index units.
	GlobalSecondaryIndexes map[string]struct{ CapacityUnits float64 }
	LocalSecondaryIndexes  map[string]struct{ CapacityUnits float64 }
}

// consumed sums the ConsumedCapacity of a DynamoDB answer (an object, or
// a list for batches and transactions): total, table and index units.
func consumed(body []byte, encoding string) [3]float64 {
	if encoding == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return [3]float64{}
		}
		if body, err = io.ReadAll(zr); err != nil {
			return [3]float64{}
		}
	}
	var out struct{ ConsumedCapacity json.RawMessage }
	if json.Unmarshal(body, &out) != nil || len(out.ConsumedCapacity) == 0 {
		return [3]float64{}
	}
	var list []consumedCapacity
	if out.ConsumedCapacity[0] == '{' {
		var one consumedCapacity
		if json.Unmarshal(out.ConsumedCapacity, &one) != nil {
			return [3]float64{}
		}
		list = append(list, one)
	} else if json.Unmarshal(out.ConsumedCapacity, &list) != nil {
		return [3]float64{}
	}
	var u [3]float64
	for _, c := range list {
		u[0] += c.CapacityUnits
		if c.Table != nil {
			u[1] += c.Table.CapacityUnits
		}
		for _, ix := range c.GlobalSecondaryIndexes {
			u[2] += ix.CapacityUnits
		}
		for _, ix := range c.LocalSecondaryIndexes {
			u[2] += ix.CapacityUnits
		}
	}
	return u
}

// count records a request answered at end with status (0: no answer).
func (p *Proxy) count(cl *call, end time.Time, status int, units [3]float64, resp []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.ops[cl.op]
	if c == nil {
		c = &OpCount{}
		p.ops[cl.op] = c
	}
	c.Requests++
	if status/100 != 2 {
		c.Errors++
	}
	c.Units += units[0]
	c.TableUnits += units[1]
	c.IndexUnits += units[2]
	c.Nanos += int64(end.Sub(cl.start))
	if p.tracing {
		p.traced = append(p.traced, Traced{Op: cl.op, Start: cl.start, End: end, Status: status, Request: cl.body, Response: resp})
	}
}

// Snapshot returns the counts since the start or the last Reset.
func (p *Proxy) Snapshot() map[string]OpCount {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]OpCount, len(p.ops))
	for k, v := range p.ops {
		out[k] = *v
	}
	return out
}

// Conns is the number of client connections the proxy accepted since
// the start or the last Reset: a client that keeps its connections
// opens few, one that closes them after each request as many as it
// sends.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conns
}

// Reset zeroes the counts.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ops, p.conns = map[string]*OpCount{}, 0
}

// StartTrace starts keeping every request the proxy forwards, bodies
// included, until StopTrace: for one execution's requests, not for a
// load (it keeps everything in memory).
func (p *Proxy) StartTrace() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tracing, p.traced = true, nil
}

// StopTrace stops tracing and returns the requests answered since
// StartTrace, in the order of their answers.
func (p *Proxy) StopTrace() []Traced {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.traced
	p.tracing, p.traced = false, nil
	return out
}

func (p *Proxy) isTracing() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tracing
}

// Close stops the proxy.
func (p *Proxy) Close() error { return p.srv.Close() }

// mergeCounts adds up the counts of several proxies.
func mergeCounts(ms ...map[string]OpCount) map[string]OpCount {
	out := map[string]OpCount{}
	for _, m := range ms {
		for k, v := range m {
			c := out[k]
			c.Requests += v.Requests
			c.Errors += v.Errors
			c.Units += v.Units
			c.TableUnits += v.TableUnits
			c.IndexUnits += v.IndexUnits
			c.Nanos += v.Nanos
			out[k] = c
		}
	}
	return out
}
