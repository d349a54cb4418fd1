package iamcheck

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sort"
	"strings"
	"sync"
)

// Denial is a call a Proxy refused.
type Denial struct {
	// Function is the caller (ProxyOptions.Function).
	Function string `json:"function"`
	// Action and Resource are what was asked.
	Action   string `json:"action"`
	Resource string `json:"resource"`
	// Missing is the grant that would allow it, in the template's terms
	// ("Allow dynamodb:UpdateItem on ${ExecutionTable.Arn}").
	Missing string `json:"missing"`
	// Nearest names the statement closest to allowing it, if any.
	Nearest string `json:"nearest,omitempty"`
}

// Error says what was denied and what is missing.
func (d Denial) Error() string {
	s := fmt.Sprintf("iamcheck: %s is not authorized to perform %s on %s: missing %s", d.Function, d.Action, d.Resource, d.Missing)
	if d.Nearest != "" {
		s += " (nearest: " + d.Nearest + ")"
	}
	return s
}

// Call is an allowed call a Proxy saw, with the statement that allowed it.
type Call struct {
	Function  string `json:"function"`
	Action    string `json:"action"`
	Resource  string `json:"resource"`
	Statement string `json:"statement"`
	Count     int    `json:"count"`
}

// ProxyOptions configure NewProxy.
type ProxyOptions struct {
	// Function names the caller in denials and logs (such as "worker").
	Function string
	// Policy is the caller's policy. Required.
	Policy *Policy
	// DynamoDB and SQS are the base URLs of the servers the checked
	// requests go to (DynamoDB Local, which also serves its streams, and
	// the SQS server). A request for a service without one is denied.
	DynamoDB string
	SQS      string
	// Events is the base URL EventBridge requests go to (local-cloud's
	// event sink).
	Events string
	// Listen is the listen address; default 127.0.0.1:0 (a free port).
	Listen string
	// Logger receives iam_denied (warn) and iam_allowed (debug) events.
	// Default: discarded.
	Logger *slog.Logger
}

// Proxy is an enforcing reverse proxy on loopback for one function: the
// function's AWS_ENDPOINT_URL_DYNAMODB and AWS_ENDPOINT_URL_SQS point at
// it, so every request it gets is that function's. It maps each request
// to the IAM action and resource ARN AWS would authorize (see
// Requests), evaluates them against the function's policy and forwards
// the request only if every one is allowed; otherwise it answers as AWS
// does, HTTP 400 with an AccessDeniedException, and records the Denial.
// Requests are forwarded unchanged, so their signatures still hold.
type Proxy struct {
	// URL is the proxy's base URL (http://127.0.0.1:<port>).
	URL string

	opts    ProxyOptions
	log     *slog.Logger
	srv     *http.Server
	dynamo  *httputil.ReverseProxy
	sqs     *httputil.ReverseProxy
	events  *httputil.ReverseProxy
	mu      sync.Mutex
	denials []Denial
	calls   map[[3]string]int // action, resource, statement
}

// NewProxy starts a proxy for one function.
func NewProxy(opts ProxyOptions) (*Proxy, error) {
	if opts.Policy == nil {
		return nil, errors.New("iamcheck: ProxyOptions.Policy is required")
	}
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:0"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	p := &Proxy{opts: opts, log: opts.Logger, calls: map[[3]string]int{}}
	var err error
	if p.dynamo, err = reverse(opts.DynamoDB); err != nil {
		return nil, err
	}
	if p.sqs, err = reverse(opts.SQS); err != nil {
		return nil, err
	}
	if p.events, err = reverse(opts.Events); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return nil, fmt.Errorf("iamcheck: %w", err)
	}
	p.URL = "http://" + ln.Addr().String()
	p.srv = &http.Server{Handler: p}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// reverse is a reverse proxy to target, nil without one.
func reverse(target string) (*httputil.ReverseProxy, error) {
	if target == "" {
		return nil, nil
	}
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("iamcheck: bad upstream URL %q", target)
	}
	return &httputil.ReverseProxy{
		// The Host header stays the one the caller signed.
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.Out.Host = pr.In.Host },
		Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true},
	}, nil
}

// Close stops the proxy.
func (p *Proxy) Close() error { return p.srv.Close() }

// Denials returns the calls denied so far, oldest first.
func (p *Proxy) Denials() []Denial {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Denial(nil), p.denials...)
}

// Calls returns the allowed calls so far, sorted by action and resource.
func (p *Proxy) Calls() []Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Call, 0, len(p.calls))
	for k, n := range p.calls {
		out = append(out, Call{Function: p.opts.Function, Action: k[0], Resource: k[1], Statement: k[2], Count: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Action != out[j].Action {
			return out[i].Action < out[j].Action
		}
		return out[i].Resource < out[j].Resource
	})
	return out
}

// ServeHTTP checks and forwards one request.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		http.Error(w, "iamcheck: reading the request", http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	op := Operation(r)
	svc, _, _ := strings.Cut(op, ".")
	up := p.dynamo
	if svc == "HTTP" && formAction(r, body) != "" {
		svc = "query" // the SQS query protocol
	}
	if svc == "SQS" || svc == "query" {
		up = p.sqs
	}
	if svc == "AWSEvents" {
		up = p.events
	}
	reqs, err := Requests(r, decoded(r, body), p.opts.Policy.local)
	if err == nil && up == nil {
		err = fmt.Errorf("no upstream for %s", op)
	}
	if err != nil {
		// Not a call this proxy can authorize: deny it rather than let
		// an unchecked call through.
		d := Denial{Function: p.opts.Function, Action: op, Resource: "?", Missing: err.Error()}
		p.deny(r.Context(), w, svc, d)
		return
	}
	for _, rq := range reqs {
		dec := p.opts.Policy.Evaluate(rq)
		if !dec.Allowed {
			missing, nearest := p.opts.Policy.Missing(rq)
			p.deny(r.Context(), w, svc, Denial{Function: p.opts.Function, Action: rq.Action, Resource: rq.Resource, Missing: missing, Nearest: nearest})
			return
		}
		p.mu.Lock()
		p.calls[[3]string{rq.Action, rq.Resource, dec.Statement.Source}]++
		p.mu.Unlock()
		p.log.LogAttrs(r.Context(), slog.LevelDebug, "iam_allowed", slog.String("event", "iam_allowed"),
			slog.String("function", p.opts.Function), slog.String("action", rq.Action),
			slog.String("resource", rq.Resource), slog.String("statement", dec.Statement.Source))
	}
	up.ServeHTTP(w, r)
}

// deny records a denial, logs it and answers as AWS does.
func (p *Proxy) deny(ctx context.Context, w http.ResponseWriter, svc string, d Denial) {
	p.mu.Lock()
	p.denials = append(p.denials, d)
	p.mu.Unlock()
	p.log.LogAttrs(ctx, slog.LevelWarn, "iam_denied", slog.String("event", "iam_denied"),
		slog.String("function", d.Function), slog.String("action", d.Action), slog.String("resource", d.Resource),
		slog.String("missing", d.Missing), slog.String("nearest", d.Nearest))
	role := p.opts.Policy.Role
	msg := fmt.Sprintf("User: arn:%s:sts::%s:assumed-role/%s/%s is not authorized to perform: %s on resource: %s because no identity-based policy allows the %s action (local-cloud: missing %s)",
		p.opts.Policy.local.Partition, p.opts.Policy.local.AccountID, role, d.Function, d.Action, d.Resource, d.Action, d.Missing)
	if svc == "query" {
		w.Header().Set("Content-Type", "text/xml")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, `<?xml version="1.0"?><ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code><Message>%s</Message></Error><RequestId>00000000-0000-0000-0000-000000000000</RequestId></ErrorResponse>`, xmlEscape(msg))
		return
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	if svc == "SQS" {
		w.Header().Set("x-amzn-query-error", "AccessDenied;Sender")
	}
	w.WriteHeader(http.StatusBadRequest)
	b, _ := json.Marshal(map[string]string{"__type": "com.amazon.coral.service#AccessDeniedException", "message": msg, "Message": msg})
	_, _ = w.Write(b)
}

func xmlEscape(s string) string {
	var b bytes.Buffer
	for _, r := range s {
		switch r {
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '&':
			b.WriteString("&amp;")
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// decoded returns the request body, gunzipped when it is compressed.
func decoded(r *http.Request, body []byte) []byte {
	if r.Header.Get("Content-Encoding") != "gzip" {
		return body
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		return body
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		return body
	}
	return b
}

// formAction is the Action of an SQS query-protocol request, "" if it
// is not one.
func formAction(r *http.Request, body []byte) string {
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		return ""
	}
	v, err := url.ParseQuery(string(body))
	if err != nil {
		return ""
	}
	return v.Get("Action")
}

// sqsBatchAction is the action IAM checks for SQS's batch operations.
var sqsBatchAction = map[string]string{
	"SendMessageBatch": "SendMessage", "DeleteMessageBatch": "DeleteMessage",
	"ChangeMessageVisibilityBatch": "ChangeMessageVisibility",
}

// Requests maps an AWS request to the authorizations AWS makes for it:
//
//   - DynamoDB: dynamodb:<Operation> on the TableName's ARN, on
//     <table>/index/<IndexName> for a Query or Scan of an index; for
//     BatchGetItem and BatchWriteItem on every table of RequestItems; for
//     TransactWriteItems the item's own action (PutItem, UpdateItem,
//     DeleteItem, ConditionCheckItem) on each item's table, for
//     TransactGetItems GetItem; "*" for ListTables.
//   - DynamoDB Streams: dynamodb:<Operation> on the StreamArn (its table
//     mapped to the local region and account), on <table>/stream/* for
//     ListStreams of a table.
//   - SQS (JSON or query protocol): sqs:<Operation> on the QueueUrl's
//     queue ARN (the batch operations as their single-message actions;
//     GetQueueUrl on the QueueName's ARN, "*" for ListQueues).
func Requests(r *http.Request, body []byte, l Local) ([]Request, error) {
	l = l.withDefaults()
	op := Operation(r)
	svc, name, _ := strings.Cut(op, ".")
	var fields map[string]json.RawMessage
	if svc == "HTTP" {
		if a := formAction(r, body); a != "" {
			v, _ := url.ParseQuery(string(body))
			svc, name = "SQS", a
			fields = map[string]json.RawMessage{}
			for _, k := range []string{"QueueUrl", "QueueName"} {
				if s := v.Get(k); s != "" {
					fields[k], _ = json.Marshal(s)
				}
			}
		}
	} else if len(body) > 0 {
		if err := json.Unmarshal(body, &fields); err != nil {
			return nil, fmt.Errorf("iamcheck: %s: body is not JSON", op)
		}
	}
	str := func(k string) string {
		var s string
		_ = json.Unmarshal(fields[k], &s)
		return s
	}
	table := func(n string) string {
		if strings.HasPrefix(n, "arn:") {
			return n
		}
		return l.TableARN(n)
	}
	switch svc {
	case "DynamoDB":
		action := "dynamodb:" + name
		switch name {
		case "BatchGetItem", "BatchWriteItem":
			var items map[string]json.RawMessage
			_ = json.Unmarshal(fields["RequestItems"], &items)
			var out []Request
			for _, n := range sortedKeys(items) {
				out = append(out, Request{Action: action, Resource: table(n)})
			}
			if len(out) == 0 {
				return nil, fmt.Errorf("iamcheck: %s without RequestItems", op)
			}
			return out, nil
		case "TransactWriteItems", "TransactGetItems":
			var items []map[string]struct{ TableName string }
			_ = json.Unmarshal(fields["TransactItems"], &items)
			kinds := map[string]string{"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem", "ConditionCheck": "ConditionCheckItem", "Get": "GetItem"}
			var out []Request
			for _, it := range items {
				for kind, v := range it {
					out = append(out, Request{Action: "dynamodb:" + kinds[kind], Resource: table(v.TableName)})
				}
			}
			if len(out) == 0 {
				return nil, fmt.Errorf("iamcheck: %s without TransactItems", op)
			}
			return out, nil
		case "ListTables", "DescribeLimits", "DescribeEndpoints":
			return []Request{{Action: action, Resource: "*"}}, nil
		}
		n := str("TableName")
		if n == "" {
			n = str("ResourceArn") // tagging, TTL description by ARN
		}
		if n == "" {
			return nil, fmt.Errorf("iamcheck: %s without TableName", op)
		}
		res := table(n)
		if ix := str("IndexName"); ix != "" && (name == "Query" || name == "Scan") {
			res += "/index/" + ix
		}
		return []Request{{Action: action, Resource: res}}, nil
	case "DynamoDBStreams":
		action := "dynamodb:" + name
		if name == "ListStreams" {
			if n := str("TableName"); n != "" {
				return []Request{{Action: action, Resource: table(n) + "/stream/*"}}, nil
			}
			return []Request{{Action: action, Resource: "*"}}, nil
		}
		arn := str("StreamArn")
		if arn == "" { // GetRecords: the iterator carries the stream's ARN
			it := str("ShardIterator")
			if i := strings.Index(it, "arn:"); i >= 0 {
				arn = it[i:]
				if j := strings.IndexAny(arn, "|# "); j >= 0 {
					arn = arn[:j]
				}
			}
		}
		if arn == "" {
			return nil, fmt.Errorf("iamcheck: %s without a stream ARN", op)
		}
		return []Request{{Action: action, Resource: l.StreamARN(arn)}}, nil
	case "SQS":
		if b, ok := sqsBatchAction[name]; ok {
			name = b
		}
		action := "sqs:" + name
		if name == "ListQueues" {
			return []Request{{Action: action, Resource: "*"}}, nil
		}
		q := str("QueueUrl")
		if q == "" {
			q = str("QueueName")
		}
		if q == "" {
			return nil, fmt.Errorf("iamcheck: %s without QueueUrl", op)
		}
		return []Request{{Action: action, Resource: l.QueueARN(q)}}, nil
	case "AWSEvents":
		if name != "PutEvents" {
			return nil, fmt.Errorf("iamcheck: %s: only PutEvents of EventBridge is served here", op)
		}
		var entries []struct{ EventBusName, Source, DetailType string }
		_ = json.Unmarshal(fields["Entries"], &entries)
		if len(entries) == 0 {
			return nil, fmt.Errorf("iamcheck: %s without Entries", op)
		}
		out := make([]Request, 0, len(entries))
		for _, e := range entries {
			out = append(out, Request{Action: "events:PutEvents", Resource: l.EventBusARN(e.EventBusName),
				Context: map[string][]string{"events:source": {e.Source}, "events:detail-type": {e.DetailType}}})
		}
		return out, nil
	}
	return nil, fmt.Errorf("iamcheck: %s is not a DynamoDB, SQS or EventBridge request", op)
}

// StreamARN maps a stream ARN of DynamoDB Local (its own region and
// account) onto the local region and account: <table ARN>/stream/<label>,
// the resource the template's grants on a table's StreamArn match. An ARN
// that names no table's stream is returned as it is.
func (l Local) StreamARN(arn string) string {
	i := strings.Index(arn, ":table/")
	if i < 0 {
		return arn
	}
	tbl, label, ok := strings.Cut(arn[i+len(":table/"):], "/stream/")
	if !ok {
		return arn
	}
	return l.TableARN(tbl) + "/stream/" + label
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// Operation names a request to DynamoDB, DynamoDB Streams or SQS
// "<service>.<Operation>" from its X-Amz-Target header
// ("DynamoDB_20120810.GetItem" is "DynamoDB.GetItem",
// "AmazonSQS.SendMessage" "SQS.SendMessage"), or "HTTP.<METHOD>" without
// one. The enforcing proxy and the benchmark's counting proxy
// (benchdurable) both name requests with it.
func Operation(r *http.Request) string {
	svc, op, ok := strings.Cut(r.Header.Get("X-Amz-Target"), ".")
	if !ok {
		return "HTTP." + r.Method
	}
	svc, _, _ = strings.Cut(svc, "_")
	return strings.TrimPrefix(svc, "Amazon") + "." + op
}
