package localcloud

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/qasync/qasync/shared/internal/iamcheck"
)

// Topology is what a synthesized stack declares about the functions and
// the managed glue around them, resolved against the local tables and
// queues: the harness runs it (Apply) instead of a topology written by
// hand, so a setting changed in the stack's code reaches local-cloud
// through the template alone.
//
// Read from the template: every AWS::Lambda::Function of FunctionIDs
// (its FunctionName, Timeout, MemorySize and Environment); every
// AWS::Lambda::EventSourceMapping on one of those functions (an SQS
// queue: BatchSize, MaximumBatchingWindowInSeconds, the
// ReportBatchItemFailures response type, ScalingConfig.MaximumConcurrency,
// Enabled; a table's stream: the same plus StartingPosition,
// BisectBatchOnFunctionError, MaximumRetryAttempts and the on-failure
// destination); every AWS::Events::Rule with a rate(...) schedule and a
// target among the functions (its retry policy); and every
// AWS::ApiGatewayV2::Route with its AuthorizationType and its
// integration's function.
type Topology struct {
	// Functions are the functions' settings, by harness name (Submit ...).
	Functions map[string]FunctionSpec `json:"functions"`
	// Queues are the SQS event source mappings.
	Queues []QueueMapping `json:"queues"`
	// QueueSettings are the attributes the template gives the queues
	// local maps (ConfigureQueues sets them on the local queues).
	QueueSettings []QueueSettings `json:"queueSettings"`
	// Streams are the DynamoDB stream event source mappings.
	Streams []StreamMapping `json:"streams"`
	// Schedules are the scheduled rules.
	Schedules []Schedule `json:"schedules"`
	// Routes are the HTTP API's routes, sorted by key.
	Routes []Route `json:"routes"`
	// Secrets are the environment variables whose template value names a
	// Secrets Manager secret of the stack: there is no Secrets Manager
	// here, so Apply gives each secret a fresh random value instead (see
	// Apply).
	Secrets []SecretEnv `json:"secrets,omitempty"`
}

// FunctionSpec is one AWS::Lambda::Function of a Topology.
type FunctionSpec struct {
	// ID is its logical id in the template.
	ID string `json:"id"`
	// Name is its FunctionName (AWS_LAMBDA_FUNCTION_NAME).
	Name string `json:"name"`
	// Timeout and MemoryMB are its Timeout and MemorySize (Lambda's
	// defaults, 3 s and 128 MB, when the template leaves them out).
	Timeout  time.Duration `json:"timeout"`
	MemoryMB int           `json:"memoryMB"`
	// Env is its Environment.Variables, resolved: a table's Ref is the
	// local table's name, a queue's the local queue's URL.
	Env map[string]string `json:"env"`
}

// SecretEnv is an environment variable of a function whose value is a
// Secrets Manager secret's ARN (Ref of an AWS::SecretsManager::Secret).
type SecretEnv struct {
	Function string `json:"function"`
	Key      string `json:"key"`
	// Secret is the secret's logical id: functions naming the same
	// secret get the same value.
	Secret string `json:"secret"`
}

// Schedule is a scheduled rule invoking a function (an EventBridge rule
// with a rate expression).
type Schedule struct {
	// ID is the rule's logical id.
	ID       string `json:"id"`
	Function string `json:"function"`
	// Expression is the rule's ScheduleExpression, Every its period.
	Expression string        `json:"expression"`
	Every      time.Duration `json:"every"`
	// RetryAttempts and MaxEventAge are the target's RetryPolicy: a
	// failed invocation is retried up to RetryAttempts times while the
	// event is younger than MaxEventAge (EventBridge's defaults, 185
	// and 24 h, when the template leaves them out).
	RetryAttempts int           `json:"retryAttempts"`
	MaxEventAge   time.Duration `json:"maxEventAge"`
}

// QueueMapping is an SQS event source mapping.
type QueueMapping struct {
	// ID is its logical id in the template ("" when written by hand).
	ID       string `json:"id,omitempty"`
	Function string `json:"function"`
	QueueURL string `json:"queueUrl"`
	// BatchSize is the most messages one invocation gets: 1 to 10, or up
	// to 10,000 with a BatchingWindow (several receives gather them).
	// Default 10.
	BatchSize int `json:"batchSize"`
	// BatchingWindow is MaximumBatchingWindowInSeconds: how long the
	// poller gathers messages before it invokes with fewer than
	// BatchSize.
	BatchingWindow time.Duration `json:"batchingWindow,omitempty"`
	// ReportBatchItemFailures makes the poller honour the function's
	// batchItemFailures; without it, as in Lambda, a successful
	// invocation deletes every message of the batch, whatever the
	// response says.
	ReportBatchItemFailures bool `json:"reportBatchItemFailures"`
	// MaxConcurrency is ScalingConfig.MaximumConcurrency: the most
	// invocations at once from this mapping. Default (0): the function's
	// Concurrency.
	MaxConcurrency int `json:"maxConcurrency,omitempty"`
}

// QueueSettings are an SQS queue's attributes as its AWS::SQS::Queue
// declares them; zero values are left as the queue has them.
type QueueSettings struct {
	ID       string `json:"id"`
	QueueURL string `json:"queueUrl"`
	// VisibilityTimeout and Retention are VisibilityTimeout and
	// MessageRetentionPeriod.
	VisibilityTimeout time.Duration `json:"visibilityTimeout,omitempty"`
	Retention         time.Duration `json:"retention,omitempty"`
	// RedriveTo is the local URL of RedrivePolicy's deadLetterTargetArn,
	// MaxReceiveCount its maxReceiveCount.
	RedriveTo       string `json:"redriveTo,omitempty"`
	MaxReceiveCount int    `json:"maxReceiveCount,omitempty"`
}

// ConfigureQueues gives the local queues the template's attributes
// (SetQueueAttributes), so that, for example, the work queue's visibility
// timeout and its redrive to the poison queue are the deployed stack's.
func ConfigureQueues(ctx context.Context, client *sqs.Client, settings []QueueSettings) error {
	for _, s := range settings {
		attrs := map[string]string{}
		if s.VisibilityTimeout > 0 {
			attrs[string(types.QueueAttributeNameVisibilityTimeout)] = strconv.Itoa(int(s.VisibilityTimeout / time.Second))
		}
		if s.Retention > 0 {
			attrs[string(types.QueueAttributeNameMessageRetentionPeriod)] = strconv.Itoa(int(s.Retention / time.Second))
		}
		if s.RedriveTo != "" {
			arn, err := queueAttribute(ctx, client, s.RedriveTo, types.QueueAttributeNameQueueArn)
			if err != nil {
				return fmt.Errorf("localcloud: queue %s: redrive target %s: %w", s.ID, s.RedriveTo, err)
			}
			policy, _ := json.Marshal(map[string]string{"deadLetterTargetArn": arn, "maxReceiveCount": strconv.Itoa(s.MaxReceiveCount)})
			attrs[string(types.QueueAttributeNameRedrivePolicy)] = string(policy)
		}
		if len(attrs) == 0 {
			continue
		}
		if _, err := client.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(s.QueueURL), Attributes: attrs}); err != nil {
			return fmt.Errorf("localcloud: queue %s (%s): %w", s.ID, s.QueueURL, err)
		}
	}
	return nil
}

// Lambda's defaults for a function the template leaves them out of.
const (
	lambdaDefaultTimeout  = 3 * time.Second
	lambdaDefaultMemoryMB = 128
	eventsDefaultRetries  = 185
	eventsDefaultMaxAge   = 24 * time.Hour
)

// TopologyOf reads the topology of a synthesized stack. local maps the
// template's tables and queues to this machine's (iamcheck.LocalNames);
// ids maps each harness function (Submit ...) to its logical id (nil:
// DefaultFunctionIDs). Whatever the harness cannot run as declared is an
// error naming the resource and the property: a cron schedule, a mapping
// on a queue or table local does not map, a route integrated with a
// function that is not one of ids.
func TopologyOf(t *iamcheck.Template, local iamcheck.Local, ids map[string]string) (*Topology, error) {
	if t == nil {
		return nil, errors.New("localcloud: TopologyOf: nil template")
	}
	if ids == nil {
		ids = DefaultFunctionIDs
	}
	byID := map[string]string{}
	for name, id := range ids {
		byID[id] = name
	}
	tp := &Topology{Functions: map[string]FunctionSpec{}}
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf("localcloud: template: "+format, a...)) }

	logical := make([]string, 0, len(t.Resources))
	for id := range t.Resources {
		logical = append(logical, id)
	}
	sort.Strings(logical)

	for _, name := range Functions {
		id, ok := ids[name]
		if !ok {
			continue
		}
		r, ok := t.Resources[id]
		if !ok || r.Type != "AWS::Lambda::Function" {
			fail("no AWS::Lambda::Function %s (the %s function)", id, name)
			continue
		}
		spec, secrets, err := functionSpec(t, id, r, local)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for i := range secrets {
			secrets[i].Function = name
		}
		tp.Functions[name] = spec
		tp.Secrets = append(tp.Secrets, secrets...)
	}

	for _, id := range logical {
		r := t.Resources[id]
		p := r.Properties
		switch r.Type {
		case "AWS::Lambda::EventSourceMapping":
			fn := byID[refID(p["FunctionName"])]
			if fn == "" {
				fail("%s: FunctionName %v is not one of the functions %v", id, p["FunctionName"], sortedValues(ids))
				continue
			}
			if err := tp.addMapping(t, id, fn, p, local); err != nil {
				errs = append(errs, err)
			}
		case "AWS::Events::Rule":
			if err := tp.addRule(id, p, byID); err != nil {
				errs = append(errs, err)
			}
		case "AWS::SQS::Queue":
			u, ok := local.Queues[id]
			if !ok {
				continue
			}
			s := QueueSettings{ID: id, QueueURL: u}
			if v, ok := number(p["VisibilityTimeout"]); ok {
				s.VisibilityTimeout = time.Duration(v) * time.Second
			}
			if v, ok := number(p["MessageRetentionPeriod"]); ok {
				s.Retention = time.Duration(v) * time.Second
			}
			if rp, ok := p["RedrivePolicy"].(map[string]any); ok {
				target := refID(rp["deadLetterTargetArn"])
				if s.RedriveTo, ok = local.Queues[target]; !ok {
					fail("%s.RedrivePolicy: dead-letter queue %v has no local queue", id, rp["deadLetterTargetArn"])
				}
				s.MaxReceiveCount, _ = number(rp["maxReceiveCount"])
			}
			tp.QueueSettings = append(tp.QueueSettings, s)
		case "AWS::ApiGatewayV2::Route":
			rt, err := routeOf(t, id, p, byID)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			tp.Routes = append(tp.Routes, rt)
		}
	}
	sort.Slice(tp.Routes, func(i, j int) bool { return tp.Routes[i].Key < tp.Routes[j].Key })
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return tp, nil
}

// functionSpec reads one function.
func functionSpec(t *iamcheck.Template, id string, r iamcheck.Resource, local iamcheck.Local) (FunctionSpec, []SecretEnv, error) {
	p := r.Properties
	spec := FunctionSpec{ID: id, Timeout: lambdaDefaultTimeout, MemoryMB: lambdaDefaultMemoryMB, Env: map[string]string{}}
	if v, ok := p["FunctionName"]; ok {
		name, err := t.ResolveString(v, local)
		if err != nil {
			return spec, nil, fmt.Errorf("localcloud: template: %s.FunctionName: %w", id, err)
		}
		spec.Name = name
	} else {
		spec.Name = id
	}
	if v, ok := number(p["Timeout"]); ok {
		spec.Timeout = time.Duration(v) * time.Second
	}
	if v, ok := number(p["MemorySize"]); ok {
		spec.MemoryMB = v
	}
	var secrets []SecretEnv
	vars, _ := p["Environment"].(map[string]any)
	vars, _ = vars["Variables"].(map[string]any)
	for k, v := range vars {
		if ref := refID(v); ref != "" && t.Resources[ref].Type == "AWS::SecretsManager::Secret" {
			secrets = append(secrets, SecretEnv{Key: k, Secret: ref})
			spec.Env[k] = ""
			continue
		}
		s, err := t.ResolveString(v, local)
		if err != nil {
			return spec, nil, fmt.Errorf("localcloud: template: %s.Environment.Variables.%s: %w", id, k, err)
		}
		spec.Env[k] = s
	}
	sort.Slice(secrets, func(i, j int) bool { return secrets[i].Key < secrets[j].Key })
	return spec, secrets, nil
}

// addMapping reads one event source mapping.
func (tp *Topology) addMapping(t *iamcheck.Template, id, fn string, p map[string]any, local iamcheck.Local) error {
	if enabled, ok := p["Enabled"].(bool); ok && !enabled {
		return nil
	}
	src := refID(p["EventSourceArn"])
	attr := getAttAttr(p["EventSourceArn"])
	batch, _ := number(p["BatchSize"])
	window, _ := number(p["MaximumBatchingWindowInSeconds"])
	rbif := slices.ContainsFunc(iamcheck.List(p["FunctionResponseTypes"]), func(v any) bool { return v == "ReportBatchItemFailures" })
	switch {
	case attr == "Arn" && t.Resources[src].Type == "AWS::SQS::Queue":
		u, ok := local.Queues[src]
		if !ok {
			return fmt.Errorf("localcloud: template: %s: queue %s has no local queue", id, src)
		}
		m := QueueMapping{ID: id, Function: fn, QueueURL: u, BatchSize: batch, BatchingWindow: time.Duration(window) * time.Second,
			ReportBatchItemFailures: rbif}
		if sc, ok := p["ScalingConfig"].(map[string]any); ok {
			m.MaxConcurrency, _ = number(sc["MaximumConcurrency"])
		}
		tp.Queues = append(tp.Queues, m)
	case attr == "StreamArn" && t.Resources[src].Type == "AWS::DynamoDB::Table":
		table, ok := local.Tables[src]
		if !ok {
			return fmt.Errorf("localcloud: template: %s: table %s has no local table", id, src)
		}
		m := StreamMapping{Function: fn, Table: table, BatchSize: batch, BatchingWindow: time.Duration(window) * time.Second,
			ReportBatchItemFailures: rbif, MaxRetryAttempts: -1, StartingPosition: "TRIM_HORIZON"}
		if v, ok := p["StartingPosition"].(string); ok {
			m.StartingPosition = v
		}
		m.BisectOnError, _ = p["BisectBatchOnFunctionError"].(bool)
		if v, ok := number(p["MaximumRetryAttempts"]); ok {
			m.MaxRetryAttempts = v
		}
		if dc, ok := p["DestinationConfig"].(map[string]any); ok {
			of, _ := dc["OnFailure"].(map[string]any)
			dest := refID(of["Destination"])
			u, ok := local.Queues[dest]
			if dest != "" && !ok {
				return fmt.Errorf("localcloud: template: %s: on-failure destination %s has no local queue", id, dest)
			}
			m.OnFailureQueueURL = u
		}
		if v, ok := number(p["ParallelizationFactor"]); ok && v != 1 {
			return fmt.Errorf("localcloud: template: %s: ParallelizationFactor %d: only 1 (one batch per shard at a time) is emulated", id, v)
		}
		tp.Streams = append(tp.Streams, m)
	default:
		return fmt.Errorf("localcloud: template: %s: EventSourceArn %v is neither an SQS queue's Arn nor a DynamoDB table's StreamArn", id, p["EventSourceArn"])
	}
	return nil
}

// rateExpr is a schedule expression rate(value unit).
var rateExpr = regexp.MustCompile(`^rate\((\d+) (minute|minutes|hour|hours|day|days)\)$`)

// addRule reads one EventBridge rule: a scheduled one invoking functions
// of the topology. Rules matching event patterns are not the harness's.
func (tp *Topology) addRule(id string, p map[string]any, byID map[string]string) error {
	expr, _ := p["ScheduleExpression"].(string)
	if expr == "" || p["State"] == "DISABLED" {
		return nil
	}
	for _, tg := range iamcheck.List(p["Targets"]) {
		target, _ := tg.(map[string]any)
		fn := byID[refID(target["Arn"])]
		if fn == "" {
			continue
		}
		m := rateExpr.FindStringSubmatch(expr)
		if m == nil {
			return fmt.Errorf("localcloud: template: %s.ScheduleExpression %q: only rate(N minutes|hours|days) is emulated", id, expr)
		}
		n, _ := strconv.Atoi(m[1])
		unit := map[string]time.Duration{"minute": time.Minute, "hour": time.Hour, "day": 24 * time.Hour}[strings.TrimSuffix(m[2], "s")]
		s := Schedule{ID: id, Function: fn, Expression: expr, Every: time.Duration(n) * unit,
			RetryAttempts: eventsDefaultRetries, MaxEventAge: eventsDefaultMaxAge}
		if rp, ok := target["RetryPolicy"].(map[string]any); ok {
			if v, ok := number(rp["MaximumRetryAttempts"]); ok {
				s.RetryAttempts = v
			}
			if v, ok := number(rp["MaximumEventAgeInSeconds"]); ok {
				s.MaxEventAge = time.Duration(v) * time.Second
			}
		}
		if s.Every <= 0 {
			return fmt.Errorf("localcloud: template: %s.ScheduleExpression %q: the period must be positive", id, expr)
		}
		tp.Schedules = append(tp.Schedules, s)
	}
	return nil
}

// routeOf reads one HTTP API route and the function its integration
// invokes.
func routeOf(t *iamcheck.Template, id string, p map[string]any, byID map[string]string) (Route, error) {
	key, _ := p["RouteKey"].(string)
	auth, _ := p["AuthorizationType"].(string)
	if auth == "" {
		auth = "NONE"
	}
	if auth != "NONE" && auth != "AWS_IAM" {
		return Route{}, fmt.Errorf("localcloud: template: %s: AuthorizationType %s: only NONE and AWS_IAM are emulated", id, auth)
	}
	// Target is "integrations/<integration id>", usually a Fn::Join.
	integ := ""
	if m, ok := p["Target"].(map[string]any); ok {
		if j := iamcheck.List(m["Fn::Join"]); len(j) == 2 {
			for _, part := range iamcheck.List(j[1]) {
				if ref := refID(part); ref != "" {
					integ = ref
				}
			}
		}
	}
	ir, ok := t.Resources[integ]
	if !ok || ir.Type != "AWS::ApiGatewayV2::Integration" {
		return Route{}, fmt.Errorf("localcloud: template: %s: Target %v is not an integration of the template", id, p["Target"])
	}
	if ir.Properties["IntegrationType"] != "AWS_PROXY" || fmt.Sprint(ir.Properties["PayloadFormatVersion"]) != "2.0" {
		return Route{}, fmt.Errorf("localcloud: template: %s: integration %s: only AWS_PROXY with payload format 2.0 is emulated", id, integ)
	}
	fn := byID[refID(ir.Properties["IntegrationUri"])]
	if fn == "" {
		return Route{}, fmt.Errorf("localcloud: template: %s: integration %s invokes %v, not one of the functions", id, integ, ir.Properties["IntegrationUri"])
	}
	return Route{Key: key, Authorization: auth, Function: fn}, nil
}

// Apply makes o run the topology: each function's name, timeout, memory
// and environment (FunctionOptions.TemplateEnv: before Options.Env and
// FunctionOptions.Env, which a caller uses for local overrides), the
// event source mappings, the schedules and the routes. It replaces what o
// said about them; the functions' Bootstrap and Concurrency stay o's.
// Each secret of Secrets gets 32 random bytes, hex, shared by the
// functions naming it: KEY is emptied and KEY without its _ARN suffix set
// to the value (the convention of qasync's configuration, where
// await.resume-token-secret-arn names the secret whose value
// await.resume-token-secret holds).
func (tp *Topology) Apply(o *Options) error {
	if o.Functions == nil {
		o.Functions = map[string]FunctionOptions{}
	}
	values := map[string]string{}
	for _, s := range tp.Secrets {
		if _, ok := values[s.Secret]; !ok {
			b := make([]byte, 32)
			if _, err := rand.Read(b); err != nil {
				return fmt.Errorf("localcloud: secret %s: %w", s.Secret, err)
			}
			values[s.Secret] = hex.EncodeToString(b)
		}
	}
	for _, name := range Functions {
		spec, ok := tp.Functions[name]
		fo := o.Functions[name]
		if !ok {
			fo.Disabled = true
			o.Functions[name] = fo
			continue
		}
		fo.Name, fo.Timeout, fo.MemoryMB = spec.Name, spec.Timeout, spec.MemoryMB
		keys := make([]string, 0, len(spec.Env))
		for k := range spec.Env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fo.TemplateEnv = fo.TemplateEnv[:0:0]
		for _, k := range keys {
			fo.TemplateEnv = append(fo.TemplateEnv, k+"="+spec.Env[k])
		}
		for _, s := range tp.Secrets {
			if s.Function == name {
				fo.TemplateEnv = append(fo.TemplateEnv, strings.TrimSuffix(s.Key, "_ARN")+"="+values[s.Secret])
			}
		}
		o.Functions[name] = fo
	}
	o.Queues = slices.Clone(tp.Queues)
	o.Streams = slices.Clone(tp.Streams)
	o.Schedules = slices.Clone(tp.Schedules)
	o.Routes = slices.Clone(tp.Routes)
	o.WorkQueueURL, o.DLQQueueURL, o.PoisonQueueURL = "", "", ""
	return nil
}

// refID returns the logical id a value refers to through Ref or
// Fn::GetAtt, or "".
func refID(v any) string {
	m, ok := v.(map[string]any)
	if !ok {
		return ""
	}
	if id, ok := m["Ref"].(string); ok {
		return id
	}
	switch ga := m["Fn::GetAtt"].(type) {
	case []any:
		if len(ga) == 2 {
			id, _ := ga[0].(string)
			return id
		}
	case string:
		id, _, _ := strings.Cut(ga, ".")
		return id
	}
	return ""
}

// getAttAttr returns the attribute of a Fn::GetAtt value, or "".
func getAttAttr(v any) string {
	m, _ := v.(map[string]any)
	switch ga := m["Fn::GetAtt"].(type) {
	case []any:
		if len(ga) == 2 {
			a, _ := ga[1].(string)
			return a
		}
	case string:
		_, a, _ := strings.Cut(ga, ".")
		return a
	}
	return ""
}

// number reads a template number (JSON number or numeric string).
func number(v any) (int, bool) {
	switch x := v.(type) {
	case float64:
		return int(x), true
	case string:
		n, err := strconv.Atoi(x)
		return n, err == nil
	}
	return 0, false
}

func sortedValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// OperatorPolicies are the logical ids of the stack's managed policies
// that grant its routes: the client's (submit, read, list) and the
// operator's (re-drive, cancel, bulk re-drives, inputs).
var OperatorPolicies = []string{"ClientInvokePolicy", "OperatorRedrivePolicy"}

// TemplateOperator is a Caller holding the template's OperatorPolicies,
// as an operator of a deployment would: local-cloud lets the local
// credentials call every route the stack grants, and only those.
func TemplateOperator(t *iamcheck.Template, local iamcheck.Local, accessKeyID, secretAccessKey, arn string) (Caller, error) {
	c := Caller{AccessKeyID: accessKeyID, SecretAccessKey: secretAccessKey, ARN: arn}
	for _, id := range OperatorPolicies {
		p, err := t.ManagedPolicy(id, local)
		if err != nil {
			return c, fmt.Errorf("localcloud: %w", err)
		}
		if c.Policy == nil {
			c.Policy = p
			continue
		}
		c.Policy.Statements = append(c.Policy.Statements, p.Statements...)
	}
	return c, nil
}
