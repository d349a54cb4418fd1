package iamcheck

import (
	"fmt"
	"strings"
)

// Statement is one resolved policy statement.
type Statement struct {
	Sid         string
	Effect      string // Allow or Deny
	Action      []string
	NotAction   []string
	Resource    []string
	NotResource []string
	// Condition is operator -> key -> values.
	Condition map[string]map[string][]string
	// Source names where the statement is in the template:
	// "<policy logical id> statement <i> (<Sid>)".
	Source string
}

// Policy is everything a function's execution role is granted
// (Template.Policies), or what one managed policy of the template grants
// (Template.ManagedPolicy).
type Policy struct {
	// Function and Role are logical ids of the template, for a
	// function's role.
	Function string
	Role     string
	// Name is the managed policy's logical id, for ManagedPolicy.
	Name string
	// Statements are the resolved statements of every policy attached.
	Statements []Statement
	// Unresolved lists the ManagedPolicyArns that are not in the template
	// (AWS managed policies): they grant nothing here.
	Unresolved []string

	local Local
}

// Local is the mapping the policy was resolved on (with its defaults),
// for building the ARNs of requests to evaluate.
func (p *Policy) Local() Local { return p.local }

// Request is one AWS call to authorize.
type Request struct {
	// Action is "<service>:<Operation>", such as dynamodb:UpdateItem.
	Action string
	// Resource is the ARN the call acts on.
	Resource string
	// Context holds the request's condition keys (such as events:source).
	Context map[string][]string
}

// Decision is the outcome of Policy.Evaluate.
type Decision struct {
	// Allowed is true when a statement allows the request and none denies
	// it.
	Allowed bool
	// Statement is the statement that decided: the allowing one, or the
	// explicit Deny; nil for an implicit deny (no statement allows).
	Statement *Statement
}

// Evaluate decides a request with IAM's semantics for one identity-based
// policy set: an explicit Deny wins, otherwise an Allow is needed.
func (p *Policy) Evaluate(r Request) Decision {
	var allow *Statement
	for i := range p.Statements {
		s := &p.Statements[i]
		if !s.appliesTo(r) {
			continue
		}
		if s.Effect == "Deny" {
			return Decision{Statement: s}
		}
		if allow == nil {
			allow = s
		}
	}
	return Decision{Allowed: allow != nil, Statement: allow}
}

// appliesTo reports whether the statement covers the request: action,
// resource and every condition.
func (s *Statement) appliesTo(r Request) bool {
	return s.matchesAction(r.Action) && s.matchesResource(r.Resource) && s.conditionsHold(r.Context)
}

func (s *Statement) matchesAction(action string) bool {
	if s.NotAction != nil {
		return !anyMatch(s.NotAction, action, true)
	}
	return anyMatch(s.Action, action, true)
}

func (s *Statement) matchesResource(arn string) bool {
	if s.NotResource != nil {
		return !anyMatch(s.NotResource, arn, false)
	}
	return anyMatch(s.Resource, arn, false)
}

func anyMatch(patterns []string, s string, fold bool) bool {
	for _, p := range patterns {
		if fold {
			if wildcard(strings.ToLower(p), strings.ToLower(s)) {
				return true
			}
		} else if wildcard(p, s) {
			return true
		}
	}
	return false
}

// wildcard matches s against an IAM pattern: * is any run of characters
// (slashes and colons included), ? one character.
func wildcard(p, s string) bool {
	// Iterative matcher with backtracking to the last star.
	pi, si, star, mark := 0, 0, -1, 0
	for si < len(s) {
		switch {
		case pi < len(p) && (p[pi] == '?' || p[pi] == s[si]):
			pi++
			si++
		case pi < len(p) && p[pi] == '*':
			star, mark = pi, si
			pi++
		case star >= 0:
			pi = star + 1
			mark++
			si = mark
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// conditionsHold evaluates the statement's conditions: every operator and
// every key must hold (AND), any of a key's values may match (OR). The
// string and ARN operators are supported, with IfExists; a key missing
// from the request fails the condition (holds with IfExists, and for the
// negated operators). An unknown operator never holds, so it can only
// withhold an Allow.
func (s *Statement) conditionsHold(ctx map[string][]string) bool {
	for op, keys := range s.Condition {
		base, ifExists := strings.CutSuffix(op, "IfExists")
		for key, want := range keys {
			got, present := lookup(ctx, key)
			if !present {
				if ifExists || strings.Contains(base, "Not") {
					continue
				}
				return false
			}
			if !holds(base, want, got) {
				return false
			}
		}
	}
	return true
}

// lookup finds a condition key, case-insensitively as IAM does.
func lookup(ctx map[string][]string, key string) ([]string, bool) {
	for k, v := range ctx {
		if strings.EqualFold(k, key) {
			return v, true
		}
	}
	return nil, false
}

func holds(op string, want, got []string) bool {
	some := func(match func(w, g string) bool) bool {
		for _, g := range got {
			for _, w := range want {
				if match(w, g) {
					return true
				}
			}
		}
		return false
	}
	switch op {
	case "StringEquals", "ArnEquals":
		return some(func(w, g string) bool { return w == g })
	case "StringNotEquals", "ArnNotEquals":
		return !some(func(w, g string) bool { return w == g })
	case "StringEqualsIgnoreCase":
		return some(strings.EqualFold)
	case "StringNotEqualsIgnoreCase":
		return !some(strings.EqualFold)
	case "StringLike", "ArnLike":
		return some(wildcard)
	case "StringNotLike", "ArnNotLike":
		return !some(wildcard)
	case "Bool":
		return some(strings.EqualFold)
	}
	return false
}

// Missing describes the grant a denied request lacks, in the template's
// terms when the resource is one of Local's ("Allow dynamodb:UpdateItem on
// Fn::GetAtt ExecutionTable.Arn"), and names the nearest statement of the
// policy: one allowing the action on other resources, else one allowing
// other actions on the resource, else none.
func (p *Policy) Missing(r Request) (missing, nearest string) {
	res := r.Resource
	if id, attr := p.local.logicalID(r.Resource); id != "" {
		if a, rest, ok := strings.Cut(attr, "/"); ok {
			res = fmt.Sprintf("${%s.%s}/%s", id, a, rest)
		} else {
			res = fmt.Sprintf("${%s.%s}", id, attr)
		}
	}
	missing = fmt.Sprintf("Allow %s on %s", r.Action, res)
	if d := p.Evaluate(r); d.Statement != nil && d.Statement.Effect == "Deny" {
		missing = fmt.Sprintf("no Deny of %s on %s (%s denies it)", r.Action, res, d.Statement.Source)
	}
	var byResource string
	for i := range p.Statements {
		s := &p.Statements[i]
		if s.Effect != "Allow" {
			continue
		}
		if s.matchesAction(r.Action) {
			return missing, fmt.Sprintf("%s allows %s on %s only", s.Source, r.Action, strings.Join(s.Resource, ", "))
		}
		if byResource == "" && s.matchesResource(r.Resource) {
			byResource = fmt.Sprintf("%s allows %s on it", s.Source, strings.Join(s.Action, ", "))
		}
	}
	return missing, byResource
}
