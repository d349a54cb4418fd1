package localcloud

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/qasync/qasync/shared/internal/iamcheck"
)

// IAMOptions make the cloud enforce a CloudFormation template's IAM
// policies: each function's AWS calls go through an iamcheck.Proxy of its
// own (its AWS_ENDPOINT_URL_DYNAMODB, AWS_ENDPOINT_URL_DYNAMODB_STREAMS
// and AWS_ENDPOINT_URL_SQS point there), which forwards a call only if
// the function's execution role in the template allows it and answers
// AccessDeniedException otherwise; and each SQS event source mapping
// needs sqs:ReceiveMessage, sqs:DeleteMessage and sqs:GetQueueAttributes
// on its queue in its function's role, and each stream mapping
// dynamodb:DescribeStream, dynamodb:GetRecords and
// dynamodb:GetShardIterator on its stream, dynamodb:ListStreams on its
// table's streams and sqs:SendMessage on its on-failure queue, as Lambda
// requires when a mapping is created (Start fails without them).
type IAMOptions struct {
	// Template is the synthesized stack (make synth's
	// infra/cdk/cdk.out/<stack>.template.json). Required.
	Template *iamcheck.Template
	// Local maps the template's tables and queues to the local ones (see
	// iamcheck.LocalNames). Its Region and AccountID default to the
	// Options'.
	Local iamcheck.Local
	// DynamoDB and SQS are the servers the proxies forward to. Default:
	// AWS_ENDPOINT_URL_DYNAMODB and AWS_ENDPOINT_URL_SQS of Options.Env.
	DynamoDB string
	SQS      string
	// FunctionIDs maps a function (Submit ...) to its logical id in the
	// template. Default: DefaultFunctionIDs.
	FunctionIDs map[string]string
}

// DefaultFunctionIDs are the logical ids of qasync's functions in the
// stack of infra/cdk (its SubmitFunctionID ... DLQFunctionID).
var DefaultFunctionIDs = map[string]string{
	Submit: "SubmitFunction", Worker: "WorkerFunction", Sweeper: "SweeperFunction", DLQ: "DlqFunction",
	History: "HistoryFunction",
}

// startIAM resolves the template's policies and starts a proxy for every
// enabled function, pointing its endpoints there. It runs before the
// functions start.
func (c *Cloud) startIAM() error {
	o := c.opts.IAM
	if o.Template == nil {
		return errors.New("localcloud: IAMOptions.Template is required")
	}
	if o.DynamoDB == "" {
		o.DynamoDB = envValue(c.opts.Env, "AWS_ENDPOINT_URL_DYNAMODB")
	}
	if o.SQS == "" {
		o.SQS = envValue(c.opts.Env, "AWS_ENDPOINT_URL_SQS")
	}
	if o.DynamoDB == "" || o.SQS == "" {
		return errors.New("localcloud: IAM enforcement needs the DynamoDB and SQS endpoints (AWS_ENDPOINT_URL_DYNAMODB and AWS_ENDPOINT_URL_SQS in Env)")
	}
	ids := o.FunctionIDs
	if ids == nil {
		ids = DefaultFunctionIDs
	}
	local := o.Local
	if local.Region == "" {
		local.Region = c.opts.Region
	}
	if local.AccountID == "" {
		local.AccountID = c.opts.AccountID
	}
	policies, err := o.Template.Policies(local)
	if err != nil {
		return fmt.Errorf("localcloud: %w", err)
	}
	c.policies = map[string]*iamcheck.Policy{}
	c.proxies = map[string]*iamcheck.Proxy{}
	for _, name := range c.order {
		p := policies[ids[name]]
		if p == nil {
			return fmt.Errorf("localcloud: function %s: no function %q in the template (it has %v)", name, ids[name], o.Template.Functions())
		}
		px, err := iamcheck.NewProxy(iamcheck.ProxyOptions{Function: name, Policy: p, DynamoDB: o.DynamoDB, SQS: o.SQS,
			Events: c.sink.URL + "/" + name, Logger: c.log})
		if err != nil {
			return fmt.Errorf("localcloud: %w", err)
		}
		c.policies[name], c.proxies[name] = p, px
		f := c.fns[name]
		f.opts.Env = append(slices.Clip(f.opts.Env), "AWS_ENDPOINT_URL_DYNAMODB="+px.URL, "AWS_ENDPOINT_URL_DYNAMODB_STREAMS="+px.URL,
			"AWS_ENDPOINT_URL_SQS="+px.URL, "AWS_ENDPOINT_URL_EVENTBRIDGE="+px.URL)
	}
	return nil
}

// checkMappings refuses an event source mapping whose function's role
// cannot consume its queue.
func (c *Cloud) checkMappings(ms []mapping) error {
	if c.policies == nil {
		return nil
	}
	var errs []error
	for _, m := range ms {
		arn := c.policies[m.fn].Local().QueueARN(m.queueURL)
		for _, action := range []string{"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"} {
			if err := c.mappingGrant(m.fn, m.queueURL, iamcheck.Request{Action: action, Resource: arn}); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// checkStreamMappings refuses a stream event source mapping whose
// function's role cannot read its stream (dynamodb:DescribeStream,
// GetRecords and GetShardIterator on the stream, ListStreams on the
// table's streams) or send to its on-failure queue (sqs:SendMessage), as
// Lambda requires of the role when the mapping is created.
func (c *Cloud) checkStreamMappings(ms []*streamMapping) error {
	if c.policies == nil {
		return nil
	}
	var errs []error
	for _, m := range ms {
		l := c.policies[m.Function].Local()
		// The template grants the stream's reads on its StreamArn, which
		// resolves to <table ARN>/stream/*: the local form of the stream
		// ARN DynamoDB Local gave matches it.
		stream := l.StreamARN(m.streamARN)
		reqs := []iamcheck.Request{
			{Action: "dynamodb:DescribeStream", Resource: stream},
			{Action: "dynamodb:GetRecords", Resource: stream},
			{Action: "dynamodb:GetShardIterator", Resource: stream},
			{Action: "dynamodb:ListStreams", Resource: l.TableARN(m.Table) + "/stream/*"},
		}
		if m.OnFailureQueueURL != "" {
			reqs = append(reqs, iamcheck.Request{Action: "sqs:SendMessage", Resource: l.QueueARN(m.OnFailureQueueURL)})
		}
		for _, r := range reqs {
			if err := c.mappingGrant(m.Function, m.Table+" stream", r); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// mappingGrant checks that fn's role allows r for its event source
// mapping of source, recording the denial otherwise.
func (c *Cloud) mappingGrant(fn, source string, r iamcheck.Request) error {
	p := c.policies[fn]
	if p.Evaluate(r).Allowed {
		return nil
	}
	missing, nearest := p.Missing(r)
	d := iamcheck.Denial{Function: fn, Action: r.Action, Resource: r.Resource, Missing: missing, Nearest: nearest}
	c.mu.Lock()
	c.mappingDenials = append(c.mappingDenials, d)
	c.mu.Unlock()
	return fmt.Errorf("localcloud: event source mapping %s <- %s: %w", fn, source, d)
}

// Denials returns the AWS calls the IAM enforcement refused (see
// Options.IAM), by function and in order, with the event source
// mappings' refusals first; none without enforcement.
func (c *Cloud) Denials() []iamcheck.Denial {
	c.mu.Lock()
	out := append([]iamcheck.Denial(nil), c.mappingDenials...)
	c.mu.Unlock()
	for _, name := range c.order {
		if px := c.proxies[name]; px != nil {
			out = append(out, px.Denials()...)
		}
	}
	return out
}

// IAMCalls returns the AWS calls the IAM enforcement allowed, with the
// statement that allowed each, by function; none without enforcement.
func (c *Cloud) IAMCalls() []iamcheck.Call {
	var out []iamcheck.Call
	for _, name := range c.order {
		if px := c.proxies[name]; px != nil {
			out = append(out, px.Calls()...)
		}
	}
	return out
}

// FormatCalls renders calls one a line: "function action resource
// (count) <- statement", sorted.
func FormatCalls(calls []iamcheck.Call) string {
	lines := make([]string, 0, len(calls))
	for _, c := range calls {
		lines = append(lines, fmt.Sprintf("%s %s %s (%d) <- %s", c.Function, c.Action, c.Resource, c.Count, c.Statement))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// closeIAM stops the proxies.
func (c *Cloud) closeIAM() {
	for _, px := range c.proxies {
		_ = px.Close()
	}
}
