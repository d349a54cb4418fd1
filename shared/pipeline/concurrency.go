package pipeline

import (
	"fmt"
	"unicode/utf8"

	"github.com/qasync/qasync/shared/payload"
)

// Bounds of a concurrency key.
const (
	// MaxConcurrencyLimit is the largest Concurrency.Limit: a key's
	// holders are one record (on DynamoDB one item, written at every
	// acquire and release), which the bound keeps to a few kilobytes.
	MaxConcurrencyLimit = 100
	// MaxConcurrencyKeyBytes is the longest key value an input may give;
	// a longer one refuses the submit (invalid input).
	MaxConcurrencyKeyBytes = 256
)

// Concurrency limits how many executions of a pipeline run at once per
// key taken from their input (a customer, an account): at most Limit
// executions of one key hold a slot, from their first step's claim until
// they end (sleeps, awaits, retries and map waits keep the slot); the
// others wait, with status WAITING_KEY, and start in rank order (submission
// order aged by priority: Priority) as
// slots free up. The key is computed once, at submit, and stored with the
// execution: a later definition that computes it otherwise does not move
// executions already submitted. The limit is the one of the definition an
// execution is bound to. An input whose key is "" is not limited.
//
// Build one with ConcurrencyKey.
type Concurrency struct {
	// Name names the key ("customerId"): shown in status documents and in
	// the pipeline's description.
	Name string
	// Limit is how many executions of one key may hold a slot at once,
	// 1 to MaxConcurrencyLimit.
	Limit int
	// Key returns the key of an input ("" for none). An error refuses the
	// submit as invalid input; its message must not quote the input.
	Key func(in payload.Payload) (string, error)
}

// ConcurrencyKey returns the Concurrency of a pipeline whose first step
// takes an I (decoded from JSON, as NewStep decodes it): key returns the
// key of an input, such as its customer id.
//
//	pipeline.Pipeline{ID: "orders", Steps: steps,
//		Concurrency: pipeline.ConcurrencyKey("customerId", 2, func(o Order) string { return o.CustomerID })}
func ConcurrencyKey[I any](name string, limit int, key func(in I) string) *Concurrency {
	return &Concurrency{Name: name, Limit: limit, Key: func(raw payload.Payload) (string, error) {
		var in I
		if p, ok := any(&in).(*payload.Payload); ok {
			*p = raw
		} else if err := raw.DecodeJSON(&in); err != nil {
			return "", fmt.Errorf("concurrency key %s: decode input: %w", name, err)
		}
		return key(in), nil
	}}
}

// KeyOf returns the concurrency key of an input: "" when the pipeline has
// no Concurrency or the input gives none; an error (invalid input) when
// Key fails or the key is longer than MaxConcurrencyKeyBytes or not UTF-8.
func (p *Pipeline) KeyOf(in payload.Payload) (string, error) {
	if p.Concurrency == nil {
		return "", nil
	}
	k, err := p.Concurrency.Key(in)
	if err != nil {
		return "", err
	}
	if len(k) > MaxConcurrencyKeyBytes || !utf8.ValidString(k) {
		return "", fmt.Errorf("concurrency key %s: the key is %d bytes or not UTF-8 (at most %d bytes of UTF-8)",
			p.Concurrency.Name, len(k), MaxConcurrencyKeyBytes)
	}
	return k, nil
}

func (c *Concurrency) validate() error {
	switch {
	case c.Name == "":
		return fmt.Errorf("pipeline: concurrency: no key name")
	case c.Key == nil:
		return fmt.Errorf("pipeline: concurrency %s: no key function", c.Name)
	case c.Limit < 1 || c.Limit > MaxConcurrencyLimit:
		return fmt.Errorf("pipeline: concurrency %s: limit %d outside 1..%d", c.Name, c.Limit, MaxConcurrencyLimit)
	}
	return nil
}
