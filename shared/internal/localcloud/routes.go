package localcloud

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Route is one route of the emulated HTTP API.
type Route struct {
	// Key is "METHOD /path/{param}" (API Gateway HTTP API route key
	// syntax: {name} path variables and a final greedy {name+}; METHOD
	// may be ANY) or "$default".
	Key string `json:"key"`
	// Authorization is AuthNone (the default when empty) or AuthIAM.
	Authorization string `json:"authorization"`
	// Function is the integration's function (Submit ...).
	Function string `json:"function"`
}

// Route keys and authorization types of an HTTP API route.
const (
	// DefaultRouteKey catches the requests no other route matches.
	DefaultRouteKey = "$default"
	// AuthNone lets any request through.
	AuthNone = "NONE"
	// AuthIAM needs a SigV4-signed request from a caller allowed
	// execute-api:Invoke on the route (see Caller).
	AuthIAM = "AWS_IAM"
)

// routeMethods are the methods a route key may name.
var routeMethods = []string{"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "ANY"}

var (
	routeVar     = regexp.MustCompile(`^\{([A-Za-z0-9._-]+)(\+?)\}$`)
	routeLiteral = regexp.MustCompile(`^[^{}/]+$`)
)

// route is a validated Route.
type route struct {
	Route
	method string   // "" for $default
	segs   []string // literal segments; "" where a variable is
	vars   []string // variable name per segment, "" for a literal
	greedy bool     // the last segment is a greedy variable
}

// routeTable selects the route of a request as API Gateway does.
type routeTable struct {
	routes []*route
	def    *route
}

// defaultRoutes is the front without Options.Routes: one $default
// route to the submit function, without authorization.
var defaultRoutes = []Route{{Key: DefaultRouteKey, Authorization: AuthNone, Function: Submit}}

// newRouteTable validates routes; enabled tells whether a function runs.
func newRouteTable(routes []Route, enabled func(fn string) bool) (*routeTable, error) {
	t := &routeTable{}
	shapes := map[string]string{}
	for _, r := range routes {
		rt, err := parseRoute(r)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(Functions, r.Function) {
			return nil, fmt.Errorf("localcloud: route %q: unknown function %q (want one of %v)", r.Key, r.Function, Functions)
		}
		if !enabled(r.Function) {
			return nil, fmt.Errorf("localcloud: route %q: function %s is disabled", r.Key, r.Function)
		}
		if rt.method == "" {
			if t.def != nil {
				return nil, fmt.Errorf("localcloud: route %q: duplicate route", r.Key)
			}
			t.def = rt
			continue
		}
		// Two routes differing only in their variables' names are the
		// same route (API Gateway refuses the second).
		shape := rt.method + " " + rt.shape()
		if prior, ok := shapes[shape]; ok {
			return nil, fmt.Errorf("localcloud: route %q: conflicts with route %q", r.Key, prior)
		}
		shapes[shape] = r.Key
		t.routes = append(t.routes, rt)
	}
	return t, nil
}

// parseRoute validates one route.
func parseRoute(r Route) (*route, error) {
	switch r.Authorization {
	case "":
		r.Authorization = AuthNone
	case AuthNone, AuthIAM:
	default:
		return nil, fmt.Errorf("localcloud: route %q: authorization %q (want %s or %s)", r.Key, r.Authorization, AuthNone, AuthIAM)
	}
	if r.Key == DefaultRouteKey {
		return &route{Route: r}, nil
	}
	method, path, ok := strings.Cut(r.Key, " ")
	if !ok || !slices.Contains(routeMethods, method) {
		return nil, fmt.Errorf("localcloud: route %q: want \"METHOD /path\" with METHOD one of %v, or %q", r.Key, routeMethods, DefaultRouteKey)
	}
	if !strings.HasPrefix(path, "/") {
		return nil, fmt.Errorf("localcloud: route %q: the path must start with /", r.Key)
	}
	rt := &route{Route: r, method: method}
	if path == "/" {
		return rt, nil
	}
	if strings.HasSuffix(path, "/") {
		return nil, fmt.Errorf("localcloud: route %q: the path may not end with /", r.Key)
	}
	seen := map[string]bool{}
	parts := strings.Split(path[1:], "/")
	for i, p := range parts {
		if m := routeVar.FindStringSubmatch(p); m != nil {
			if seen[m[1]] {
				return nil, fmt.Errorf("localcloud: route %q: path variable %q appears twice", r.Key, m[1])
			}
			seen[m[1]] = true
			if m[2] == "+" {
				if i != len(parts)-1 {
					return nil, fmt.Errorf("localcloud: route %q: the greedy path variable {%s+} must end the path", r.Key, m[1])
				}
				rt.greedy = true
			}
			rt.segs = append(rt.segs, "")
			rt.vars = append(rt.vars, m[1])
			continue
		}
		if !routeLiteral.MatchString(p) {
			return nil, fmt.Errorf("localcloud: route %q: bad path segment %q (a literal, {name} or a final {name+})", r.Key, p)
		}
		rt.segs = append(rt.segs, p)
		rt.vars = append(rt.vars, "")
	}
	return rt, nil
}

// shape is the route's path with its variables unnamed.
func (r *route) shape() string {
	var b strings.Builder
	for i, s := range r.segs {
		b.WriteByte('/')
		switch {
		case r.vars[i] == "":
			b.WriteString(s)
		case r.greedy && i == len(r.segs)-1:
			b.WriteString("{+}")
		default:
			b.WriteString("{}")
		}
	}
	return b.String()
}

// match returns the route of a request and its path parameters (decoded),
// nil when none matches. escapedPath is the request's path as sent.
//
// As API Gateway does: the most specific route wins, that is a full match
// (literal segments before path variables, from the left), then a route
// with a greedy path variable (the longest before it), then $default;
// for the same path a route naming the method wins over ANY. Paths are
// case-sensitive; a trailing slash of the request is ignored (/a/ is
// routed as /a); a greedy variable needs at least one segment.
func (t *routeTable) match(method, escapedPath string) (*route, map[string]string) {
	p := strings.TrimPrefix(escapedPath, "/")
	p = strings.TrimSuffix(p, "/")
	var segs []string
	if p != "" {
		segs = strings.Split(p, "/")
	}
	var best *route
	var bestParams map[string]string
	for _, r := range t.routes {
		if r.method != "ANY" && r.method != method {
			continue
		}
		params, ok := r.matchPath(segs)
		if !ok {
			continue
		}
		if best == nil || r.moreSpecific(best) {
			best, bestParams = r, params
		}
	}
	if best != nil {
		return best, bestParams
	}
	return t.def, nil
}

// matchPath matches the request's (escaped) path segments.
func (r *route) matchPath(segs []string) (map[string]string, bool) {
	n := len(r.segs)
	if r.greedy {
		if len(segs) < n {
			return nil, false
		}
	} else if len(segs) != n {
		return nil, false
	}
	var params map[string]string
	set := func(name, raw string) bool {
		v, err := url.PathUnescape(raw)
		if err != nil {
			return false
		}
		if params == nil {
			params = map[string]string{}
		}
		params[name] = v
		return true
	}
	for i := range n {
		switch {
		case r.greedy && i == n-1:
			rest := strings.Join(segs[i:], "/")
			if rest == "" || !set(r.vars[i], rest) {
				return nil, false
			}
		case r.vars[i] != "":
			if segs[i] == "" || !set(r.vars[i], segs[i]) {
				return nil, false
			}
		default:
			// Compare the literal with the decoded segment, as the route
			// key is written decoded.
			v, err := url.PathUnescape(segs[i])
			if err != nil || v != r.segs[i] {
				return nil, false
			}
		}
	}
	return params, true
}

// moreSpecific reports whether r wins over o when both match a request.
func (r *route) moreSpecific(o *route) bool {
	if r.greedy != o.greedy {
		return !r.greedy
	}
	if r.greedy && len(r.segs) != len(o.segs) {
		return len(r.segs) > len(o.segs)
	}
	for i := range min(len(r.segs), len(o.segs)) {
		rl, ol := r.vars[i] == "", o.vars[i] == ""
		if rl != ol {
			return rl
		}
	}
	return r.method != "ANY" && o.method == "ANY"
}
