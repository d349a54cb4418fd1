package iamcheck

import (
	"fmt"
	"net/url"
	"path"
	"regexp"
	"strings"

	"github.com/qasync/qasync/shared/schema"
)

// Defaults of Local.
const (
	DefaultRegion    = "us-east-1"
	DefaultAccountID = "000000000000"
	DefaultPartition = "aws"
	// DefaultAPIID is the local HTTP API's id (localcloud's default
	// Options.APIID).
	DefaultAPIID = "local"
)

// Local maps a template onto the resources of this machine: the pseudo
// parameters, and the template's tables and queues (by logical id) to the
// names and URLs local-cloud uses. A resource it does not map resolves to
// a placeholder ARN naming its logical id (arn:aws:<service>:...:<id>),
// which no local call targets.
type Local struct {
	Region    string
	AccountID string
	Partition string
	// Tables maps a table's logical id to its local table name.
	Tables map[string]string
	// Queues maps a queue's logical id to its local queue URL.
	Queues map[string]string
	// APIID is what Ref of the template's AWS::ApiGatewayV2::Api
	// resolves to: the id of the HTTP API in execute-api ARNs, as the
	// local HTTP front (localcloud's Options.APIID) names it. Default
	// DefaultAPIID.
	APIID string
}

// The logical ids of the stack's tables and queues (infra/cdk/stack's
// ExecutionTableID ... RejectQueueID; that module cannot be imported here,
// and the golden template test keeps both in step).
var (
	tableIDs = func(n schema.Names) map[string]string {
		return map[string]string{"ExecutionTable": n.ExecutionTable, "PayloadTable": n.PayloadTable,
			"DeadLetterTable": n.DeadLetterTable, "EffectTable": n.EffectTable, "HistoryTable": n.HistoryTable}
	}
	queueIDs = func(n schema.Names) map[string]string {
		return map[string]string{"WorkQueue": n.WorkQueue, "UrgentQueue": n.UrgentQueue, "PoisonQueue": n.PoisonQueue, "DlqQueue": n.DLQQueue,
			"ItemRejectQueue": n.RejectQueue, "HistoryFailureQueue": n.HistoryFailureQueue}
	}
)

// LocalNames maps the stack's tables and queues to the local ones named
// by names (as qasync provision local and the tests create them); urls
// maps a queue name to its URL (a queue missing there is left out). An
// empty region or account is left empty, for the caller (or Policies'
// defaults) to fill.
func LocalNames(names schema.Names, urls map[string]string, region, accountID string) Local {
	l := Local{Region: region, AccountID: accountID, Tables: tableIDs(names), Queues: map[string]string{}}
	for id, name := range queueIDs(names) {
		if u, ok := urls[name]; ok {
			l.Queues[id] = u
		}
	}
	return l
}

func (l Local) withDefaults() Local {
	if l.Region == "" {
		l.Region = DefaultRegion
	}
	if l.AccountID == "" {
		l.AccountID = DefaultAccountID
	}
	if l.Partition == "" {
		l.Partition = DefaultPartition
	}
	if l.APIID == "" {
		l.APIID = DefaultAPIID
	}
	return l
}

// TableARN is the ARN of a local table.
func (l Local) TableARN(name string) string {
	return fmt.Sprintf("arn:%s:dynamodb:%s:%s:table/%s", l.Partition, l.Region, l.AccountID, name)
}

// QueueARN is the ARN of a local queue, from its URL (the last path
// element is the queue's name) or its name.
func (l Local) QueueARN(queueURL string) string {
	name := queueURL
	if u, err := url.Parse(queueURL); err == nil && u.Path != "" {
		name = path.Base(u.Path)
	}
	return fmt.Sprintf("arn:%s:sqs:%s:%s:%s", l.Partition, l.Region, l.AccountID, name)
}

// logicalID returns the logical id of the template resource whose local
// ARN (or one of its sub-resources: index, stream) is arn, for naming a
// missing grant in the template's terms.
func (l Local) logicalID(arn string) (string, string) {
	for id, name := range l.Tables {
		base := l.TableARN(name)
		if arn == base {
			return id, "Arn"
		}
		if rest, ok := strings.CutPrefix(arn, base+"/"); ok {
			if s, _, _ := strings.Cut(rest, "/"); s == "stream" {
				return id, "StreamArn"
			}
			return id, "Arn/" + rest
		}
	}
	for id, u := range l.Queues {
		if arn == l.QueueARN(u) {
			return id, "Arn"
		}
	}
	return "", ""
}

// ref resolves {"Ref": id}.
func (t *Template) ref(id string, l Local) (string, error) {
	switch id {
	case "AWS::Region":
		return l.Region, nil
	case "AWS::AccountId":
		return l.AccountID, nil
	case "AWS::Partition":
		return l.Partition, nil
	case "AWS::URLSuffix":
		return "amazonaws.com", nil
	case "AWS::StackName", "AWS::StackId":
		return "local", nil
	case "AWS::NoValue":
		return "", nil
	}
	if n, ok := l.Tables[id]; ok {
		return n, nil
	}
	if u, ok := l.Queues[id]; ok {
		return u, nil
	}
	r, ok := t.Resources[id]
	if !ok {
		return "", fmt.Errorf("Ref to %q: no such resource or pseudo parameter", id)
	}
	if r.Type == "AWS::Events::EventBus" {
		return t.busName(id, l), nil
	}
	if r.Type == "AWS::ApiGatewayV2::Api" && l.APIID != "" {
		return l.APIID, nil
	}
	return t.placeholder(id, r.Type, l), nil
}

// getAtt resolves {"Fn::GetAtt": [id, attr]}.
func (t *Template) getAtt(id, attr string, l Local) (string, error) {
	if n, ok := l.Tables[id]; ok {
		switch attr {
		case "Arn":
			return l.TableARN(n), nil
		case "StreamArn":
			// A stream's ARN ends in its creation label: any label of
			// the table's stream.
			return l.TableARN(n) + "/stream/*", nil
		}
	}
	if u, ok := l.Queues[id]; ok {
		switch attr {
		case "Arn":
			return l.QueueARN(u), nil
		case "QueueUrl":
			return u, nil
		case "QueueName":
			return path.Base(u), nil
		}
	}
	r, ok := t.Resources[id]
	if !ok {
		return "", fmt.Errorf("Fn::GetAtt %s.%s: no such resource", id, attr)
	}
	if r.Type == "AWS::Events::EventBus" {
		switch attr {
		case "Arn":
			return l.EventBusARN(t.busName(id, l)), nil
		case "Name":
			return t.busName(id, l), nil
		}
	}
	return t.placeholder(id, r.Type, l) + "/" + attr, nil
}

// busName is the name of an event bus of the template: its Name, else
// its logical id. Every bus is local: local-cloud's event sink takes
// them all.
func (t *Template) busName(id string, l Local) string {
	if n, ok := t.Resources[id].Properties["Name"]; ok {
		if s, err := t.resolveString(n, l); err == nil && s != "" {
			return s
		}
	}
	return id
}

// EventBusARN is the ARN of an event bus, from its name (an ARN is
// returned as it is; "" is the default bus).
func (l Local) EventBusARN(name string) string {
	if strings.HasPrefix(name, "arn:") {
		return name
	}
	if name == "" {
		name = "default"
	}
	l = l.withDefaults()
	return fmt.Sprintf("arn:%s:events:%s:%s:event-bus/%s", l.Partition, l.Region, l.AccountID, name)
}

// placeholder is the ARN-like value of a resource local-cloud does not
// have: arn:<partition>:<service>:<region>:<account>:<logical id>.
func (t *Template) placeholder(id, typ string, l Local) string {
	svc := "local"
	if parts := strings.Split(typ, "::"); len(parts) == 3 {
		svc = strings.ToLower(parts[1])
	}
	return fmt.Sprintf("arn:%s:%s:%s:%s:%s", l.Partition, svc, l.Region, l.AccountID, id)
}

var subVar = regexp.MustCompile(`\$\{([^}!][^}]*)\}`)

// resolve evaluates a template value to a string or a list of strings.
func (t *Template) resolve(v any, l Local) (any, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case bool, float64:
		return fmt.Sprint(x), nil
	case []any:
		out := make([]any, 0, len(x))
		for _, e := range x {
			r, err := t.resolve(e, l)
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
		return out, nil
	case map[string]any:
		if len(x) != 1 {
			return nil, fmt.Errorf("unsupported value %v", x)
		}
		for fn, arg := range x {
			return t.intrinsic(fn, arg, l)
		}
	}
	return nil, fmt.Errorf("unsupported value %v", v)
}

func (t *Template) intrinsic(fn string, arg any, l Local) (any, error) {
	switch fn {
	case "Ref":
		id, _ := arg.(string)
		return t.ref(id, l)
	case "Fn::GetAtt":
		var id, attr string
		switch a := arg.(type) {
		case string:
			id, attr, _ = strings.Cut(a, ".")
		case []any:
			if len(a) == 2 {
				id, _ = a[0].(string)
				attr, _ = a[1].(string)
			}
		}
		if id == "" || attr == "" {
			return nil, fmt.Errorf("Fn::GetAtt %v: want [id, attribute]", arg)
		}
		return t.getAtt(id, attr, l)
	case "Fn::Join":
		a := List(arg)
		if len(a) != 2 {
			return nil, fmt.Errorf("Fn::Join %v: want [separator, list]", arg)
		}
		sep, _ := a[0].(string)
		parts, err := t.resolve(a[1], l)
		if err != nil {
			return nil, err
		}
		var ss []string
		for _, p := range List(parts) {
			s, ok := p.(string)
			if !ok {
				return nil, fmt.Errorf("Fn::Join: part %v is not a string", p)
			}
			ss = append(ss, s)
		}
		return strings.Join(ss, sep), nil
	case "Fn::Sub":
		var tmpl string
		vars := map[string]any{}
		switch a := arg.(type) {
		case string:
			tmpl = a
		case []any:
			if len(a) != 2 {
				return nil, fmt.Errorf("Fn::Sub %v: want string or [string, variables]", arg)
			}
			tmpl, _ = a[0].(string)
			vars, _ = a[1].(map[string]any)
		}
		var err error
		out := subVar.ReplaceAllStringFunc(tmpl, func(m string) string {
			name := m[2 : len(m)-1]
			var r any
			var rerr error
			if v, ok := vars[name]; ok {
				r, rerr = t.resolve(v, l)
			} else if id, attr, ok := strings.Cut(name, "."); ok && !strings.HasPrefix(name, "AWS::") {
				r, rerr = t.getAtt(id, attr, l)
			} else {
				r, rerr = t.ref(name, l)
			}
			s, ok := r.(string)
			if rerr == nil && !ok {
				rerr = fmt.Errorf("Fn::Sub ${%s} is not a string", name)
			}
			if rerr != nil && err == nil {
				err = rerr
			}
			return s
		})
		return strings.ReplaceAll(out, "${!", "${"), err
	case "Fn::Select":
		a := List(arg)
		if len(a) != 2 {
			return nil, fmt.Errorf("Fn::Select %v: want [index, list]", arg)
		}
		idx, err := t.resolve(a[0], l)
		if err != nil {
			return nil, err
		}
		items, err := t.resolve(a[1], l)
		if err != nil {
			return nil, err
		}
		var i int
		if _, err := fmt.Sscan(fmt.Sprint(idx), &i); err != nil {
			return nil, fmt.Errorf("Fn::Select index %v", idx)
		}
		il := List(items)
		if i < 0 || i >= len(il) {
			return nil, fmt.Errorf("Fn::Select index %d out of %d", i, len(il))
		}
		return il[i], nil
	case "Fn::Split":
		a := List(arg)
		if len(a) != 2 {
			return nil, fmt.Errorf("Fn::Split %v: want [separator, string]", arg)
		}
		sep, _ := a[0].(string)
		s, err := t.resolveString(a[1], l)
		if err != nil {
			return nil, err
		}
		var out []any
		for _, p := range strings.Split(s, sep) {
			out = append(out, p)
		}
		return out, nil
	}
	return nil, fmt.Errorf("unsupported intrinsic function %s", fn)
}

// resolveString evaluates a template value that must be a string.
// ResolveString evaluates a template value that must be one string (a
// literal or an intrinsic function) against l: a table's Ref is its
// local name, a queue's its local URL, a resource l does not map a
// placeholder ARN naming its logical id.
func (t *Template) ResolveString(v any, l Local) (string, error) {
	return t.resolveString(v, l.withDefaults())
}

func (t *Template) resolveString(v any, l Local) (string, error) {
	r, err := t.resolve(v, l)
	if err != nil {
		return "", err
	}
	s, ok := r.(string)
	if !ok {
		return "", fmt.Errorf("%v is not a string", v)
	}
	return s, nil
}
