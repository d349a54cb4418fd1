// Package role is the seam between package lambdafn and the five
// function packages under it (submit, worker, sweeper, dlq, history):
// each registers what its function runs (Register, from its init), and
// lambdafn.Boot looks it up by the function's name. A function's main
// imports its own package, so its binary links that role's parts and no
// other's.
package role

import (
	"fmt"
	"sync"

	"github.com/qasync/qasync/shared/internal/awsclient"
	"github.com/qasync/qasync/shared/internal/wiring"
)

// Role is what one Lambda function runs.
type Role struct {
	// Parts adds the parts the function runs to the assembly's options
	// (an HTTP handler, an object store, the secret resolver), on the
	// process's AWS session. Nil: none.
	Parts func(o *wiring.Options, sess *awsclient.Session)
	// Handler returns the function's handler for lambda.Start on the
	// assembled process.
	Handler func(p *wiring.Process) (any, error)
}

var (
	mu    sync.Mutex
	roles = map[string]Role{}
)

// Register makes name's role available to Boot. It panics on a second
// registration of name.
func Register(name string, r Role) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := roles[name]; dup {
		panic(fmt.Sprintf("role: %s registered twice", name))
	}
	roles[name] = r
}

// Lookup returns name's role, if its package is linked.
func Lookup(name string) (Role, bool) {
	mu.Lock()
	defer mu.Unlock()
	r, ok := roles[name]
	return r, ok
}
