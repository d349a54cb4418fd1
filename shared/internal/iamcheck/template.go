// Package iamcheck evaluates the IAM policies of qasync's CloudFormation
// template (the CDK stack of infra/cdk, as synthesized) against the AWS
// calls the functions make on this machine, so that local-cloud fails a
// call the deployed stack would deny.
//
// A Template is parsed from the synthesized JSON. Policies resolves, for
// each AWS::Lambda::Function, its execution role and the statements
// attached to it (AWS::IAM::Policy and AWS::IAM::ManagedPolicy resources
// naming the role, the role's inline Policies), resolving the intrinsic
// functions the template uses (Ref, Fn::GetAtt, Fn::Join, Fn::Sub,
// Fn::Select, Fn::Split and the pseudo parameters) against a Local
// mapping of logical ids to the local tables and queues. Policy.Evaluate
// then decides a Request with IAM's semantics: an explicit Deny wins, an
// Allow is needed, actions and resources match with the * and ?
// wildcards, and the condition operators a qasync template uses are
// checked. Proxy enforces the decisions in front of DynamoDB Local and
// the SQS server.
//
// AWS managed policies (ManagedPolicyArns naming an arn:...:iam::aws:
// policy) are not in the template: they are listed in
// Policy.Unresolved and grant nothing here (the stack attaches only
// AWSLambdaBasicExecutionRole-like logging policies, never data access).
package iamcheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
)

// Template is a parsed CloudFormation template.
type Template struct {
	Resources map[string]Resource `json:"Resources"`
}

// Resource is one resource of a Template.
type Resource struct {
	Type       string         `json:"Type"`
	Properties map[string]any `json:"Properties"`
}

// ParseTemplate parses a CloudFormation template in JSON.
func ParseTemplate(b []byte) (*Template, error) {
	var t Template
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("iamcheck: template: %w", err)
	}
	if len(t.Resources) == 0 {
		return nil, errors.New("iamcheck: template has no Resources")
	}
	return &t, nil
}

// LoadTemplate reads and parses a template file, such as
// infra/cdk/cdk.out/<stack>.template.json written by make synth.
func LoadTemplate(path string) (*Template, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("iamcheck: %w", err)
	}
	return ParseTemplate(b)
}

// Functions returns the logical ids of the template's Lambda functions,
// sorted.
func (t *Template) Functions() []string {
	var ids []string
	for id, r := range t.Resources {
		if r.Type == "AWS::Lambda::Function" {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// Without returns a copy of the template where the statements allowing
// action on the resource whose logical id is resourceID (any attribute of
// it: its Arn, its index and stream ARNs) no longer name action, in every
// policy attached to the role of function fnID; a statement left without
// actions is removed. It stands for a stack that lost one grant: the tests
// use it to show that a missing grant fails the calls that need it. It
// reports how many grants it removed.
func (t *Template) Without(fnID, action, resourceID string) (*Template, int) {
	b, _ := json.Marshal(t)
	var c Template
	_ = json.Unmarshal(b, &c)
	role, _ := c.roleOf(fnID)
	removed := 0
	for _, doc := range c.policyDocs(role) {
		stmts := List(doc.doc["Statement"])
		var keep []any
		for _, s := range stmts {
			st, _ := s.(map[string]any)
			if st == nil || st["Effect"] != "Allow" || !mentions(st["Resource"], resourceID) {
				keep = append(keep, s)
				continue
			}
			var acts []any
			for _, a := range List(st["Action"]) {
				if a == action {
					removed++
					continue
				}
				acts = append(acts, a)
			}
			if len(acts) == 0 {
				continue
			}
			st["Action"] = acts
			keep = append(keep, st)
		}
		doc.doc["Statement"] = keep
	}
	return &c, removed
}

// mentions reports whether a raw (unresolved) value refers to the
// resource id through Ref or Fn::GetAtt anywhere inside it.
func mentions(v any, id string) bool {
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			if mentions(e, id) {
				return true
			}
		}
	case map[string]any:
		if r, ok := x["Ref"].(string); ok && r == id {
			return true
		}
		if ga, ok := x["Fn::GetAtt"]; ok {
			if l := List(ga); len(l) > 0 && l[0] == id {
				return true
			}
			if s, ok := ga.(string); ok && strings.HasPrefix(s, id+".") {
				return true
			}
		}
		for _, e := range x {
			if mentions(e, id) {
				return true
			}
		}
	}
	return false
}

// roleOf returns the logical id of a function's execution role (its Role
// property, Fn::GetAtt <role>.Arn).
func (t *Template) roleOf(fnID string) (string, error) {
	r, ok := t.Resources[fnID]
	if !ok || r.Type != "AWS::Lambda::Function" {
		return "", fmt.Errorf("iamcheck: no function %q in the template", fnID)
	}
	role := r.Properties["Role"]
	if m, ok := role.(map[string]any); ok {
		if ga, ok := m["Fn::GetAtt"]; ok {
			if l := List(ga); len(l) == 2 {
				if id, ok := l[0].(string); ok {
					return id, nil
				}
			}
			if s, ok := ga.(string); ok {
				id, _, _ := strings.Cut(s, ".")
				return id, nil
			}
		}
		if id, ok := m["Ref"].(string); ok {
			return id, nil
		}
	}
	return "", fmt.Errorf("iamcheck: function %s: role %v is not a role of the template", fnID, role)
}

// policyDoc is a policy document found attached to a role, with where it
// came from.
type policyDoc struct {
	source string // "<logical id>" or "<role id>.Policies[<name>]"
	doc    map[string]any
}

// policyDocs returns the documents attached to a role: AWS::IAM::Policy
// and AWS::IAM::ManagedPolicy resources whose Roles name it, the managed
// policies of the template its ManagedPolicyArns name, and its inline
// Policies, in a stable order.
func (t *Template) policyDocs(role string) []policyDoc {
	var out []policyDoc
	ids := make([]string, 0, len(t.Resources))
	for id := range t.Resources {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	rr := t.Resources[role]
	managed := map[string]bool{}
	for _, a := range List(rr.Properties["ManagedPolicyArns"]) {
		if m, ok := a.(map[string]any); ok {
			if id, ok := m["Ref"].(string); ok {
				managed[id] = true
			}
		}
	}
	for _, id := range ids {
		r := t.Resources[id]
		if r.Type != "AWS::IAM::Policy" && r.Type != "AWS::IAM::ManagedPolicy" {
			continue
		}
		attached := managed[id]
		for _, ref := range List(r.Properties["Roles"]) {
			if m, ok := ref.(map[string]any); ok && m["Ref"] == role {
				attached = true
			}
		}
		if doc, ok := r.Properties["PolicyDocument"].(map[string]any); ok && attached {
			out = append(out, policyDoc{source: id, doc: doc})
		}
	}
	for _, p := range List(rr.Properties["Policies"]) {
		pm, _ := p.(map[string]any)
		if doc, ok := pm["PolicyDocument"].(map[string]any); ok {
			out = append(out, policyDoc{source: fmt.Sprintf("%s.Policies[%v]", role, pm["PolicyName"]), doc: doc})
		}
	}
	return out
}

// Policies resolves the statements attached to every function's execution
// role against local, keyed by the function's logical id.
func (t *Template) Policies(local Local) (map[string]*Policy, error) {
	local = local.withDefaults()
	out := map[string]*Policy{}
	for _, fn := range t.Functions() {
		role, err := t.roleOf(fn)
		if err != nil {
			return nil, err
		}
		p := &Policy{Function: fn, Role: role, local: local}
		for _, a := range List(t.Resources[role].Properties["ManagedPolicyArns"]) {
			if m, ok := a.(map[string]any); ok {
				if id, ok := m["Ref"].(string); ok && t.Resources[id].Type == "AWS::IAM::ManagedPolicy" {
					continue // in the template: policyDocs reads it
				}
			}
			s, err := t.resolveString(a, local)
			if err != nil {
				return nil, fmt.Errorf("iamcheck: role %s: %w", role, err)
			}
			p.Unresolved = append(p.Unresolved, s)
		}
		for _, d := range t.policyDocs(role) {
			if err := t.addStatements(p, d, local); err != nil {
				return nil, err
			}
		}
		out[fn] = p
	}
	return out, nil
}

// ManagedPolicy resolves one policy of the template, an
// AWS::IAM::ManagedPolicy (or AWS::IAM::Policy) by logical id, against
// local, on its own: what a principal it is attached to is granted by it.
// It stands for the stack's policies meant for callers outside the
// template (such as the HTTP API's ClientInvokePolicy), which no function
// role carries. Ref of the AWS::ApiGatewayV2::Api resolves to
// local.APIID.
func (t *Template) ManagedPolicy(id string, local Local) (*Policy, error) {
	local = local.withDefaults()
	r, ok := t.Resources[id]
	if !ok || (r.Type != "AWS::IAM::ManagedPolicy" && r.Type != "AWS::IAM::Policy") {
		return nil, fmt.Errorf("iamcheck: no managed policy %q in the template", id)
	}
	doc, ok := r.Properties["PolicyDocument"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("iamcheck: policy %s has no PolicyDocument", id)
	}
	p := &Policy{Name: id, local: local}
	if err := t.addStatements(p, policyDoc{source: id, doc: doc}, local); err != nil {
		return nil, err
	}
	return p, nil
}

// addStatements resolves the statements of one policy document into p,
// each with its Source.
func (t *Template) addStatements(p *Policy, d policyDoc, local Local) error {
	for i, s := range List(d.doc["Statement"]) {
		st, err := t.statement(s, local)
		if err != nil {
			return fmt.Errorf("iamcheck: %s statement %d: %w", d.source, i, err)
		}
		st.Source = fmt.Sprintf("%s statement %d", d.source, i)
		if st.Sid != "" {
			st.Source += " (" + st.Sid + ")"
		}
		p.Statements = append(p.Statements, st)
	}
	return nil
}

// statement resolves one raw statement.
func (t *Template) statement(raw any, local Local) (Statement, error) {
	m, ok := raw.(map[string]any)
	if !ok {
		return Statement{}, fmt.Errorf("not an object: %v", raw)
	}
	st := Statement{Effect: fmt.Sprint(m["Effect"])}
	if sid, ok := m["Sid"].(string); ok {
		st.Sid = sid
	}
	if st.Effect != "Allow" && st.Effect != "Deny" {
		return st, fmt.Errorf("effect %q", st.Effect)
	}
	var err error
	for _, f := range []struct {
		key string
		dst *[]string
	}{{"Action", &st.Action}, {"NotAction", &st.NotAction}, {"Resource", &st.Resource}, {"NotResource", &st.NotResource}} {
		for _, v := range List(m[f.key]) {
			s, rerr := t.resolveString(v, local)
			if rerr != nil {
				return st, rerr
			}
			*f.dst = append(*f.dst, s)
		}
	}
	if c, ok := m["Condition"].(map[string]any); ok {
		st.Condition = map[string]map[string][]string{}
		for op, kv := range c {
			km, ok := kv.(map[string]any)
			if !ok {
				return st, fmt.Errorf("condition %s: not an object", op)
			}
			st.Condition[op] = map[string][]string{}
			for k, v := range km {
				for _, e := range List(v) {
					s, rerr := t.resolveString(e, local)
					if rerr != nil {
						return st, rerr
					}
					st.Condition[op][k] = append(st.Condition[op][k], s)
				}
			}
		}
	}
	if len(st.Action) == 0 && len(st.NotAction) == 0 {
		err = errors.New("no Action")
	}
	return st, err
}

// List returns a template value as a list: itself if it is one, a
// one-element list otherwise, nil for nil (CloudFormation takes a single
// value where a list is expected, as in an Action or a Resource).
func List(v any) []any {
	switch x := v.(type) {
	case nil:
		return nil
	case []any:
		return x
	}
	return []any{v}
}
