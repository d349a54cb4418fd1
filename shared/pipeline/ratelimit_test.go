package pipeline_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/payload"
	"github.com/qasync/qasync/shared/pipeline"
)

func rlSteps() []pipeline.Step {
	run := func(_ context.Context, _ pipeline.StepInfo, in payload.Payload) (payload.Payload, error) {
		return in, nil
	}
	return []pipeline.Step{{Name: "fetch", Run: run}, {Name: "call", Run: run}}
}

func raw(t *testing.T, s string) payload.Payload {
	p, err := payload.RawJSON([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRateLimitValidate(t *testing.T) {
	for _, tc := range []struct {
		rl   *pipeline.RateLimit
		want string // "" valid
	}{
		{pipeline.NewRateLimit("api", 20, time.Second, 5, "call"), ""},
		{pipeline.NewRateLimit("api", 500, time.Second, 1), ""},
		{pipeline.NewRateLimit("", 20, time.Second, 5), "no name"},
		{pipeline.NewRateLimit("api", 0, time.Second, 5), "rate 0 per 1s"},
		{pipeline.NewRateLimit("api", 1, 0, 5), "rate 1 per 0s"},
		{pipeline.NewRateLimit("api", 501, time.Second, 5), "more than 500 a second"},
		{pipeline.NewRateLimit("api", 20, time.Second, 0), "burst 0 outside 1..1000"},
		{pipeline.NewRateLimit("api", 20, time.Second, 1001), "burst 1001"},
		{pipeline.NewRateLimit("api", 20, time.Second, 5, "nope"), "no step nope"},
	} {
		err := (&pipeline.Pipeline{ID: "p", Steps: rlSteps(), RateLimit: tc.rl}).Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: Validate = %v, want %q", tc.rl, err, tc.want)
		}
	}
}

func TestRateLimitKeyAndSteps(t *testing.T) {
	type order struct {
		Partner string `json:"partner"`
	}
	p := pipeline.Pipeline{ID: "p", Steps: rlSteps(),
		RateLimit: pipeline.RateLimitKey("api", 20, time.Second, 5, func(o order) string { return o.Partner }, "call")}
	k, err := p.RateKeyOf(raw(t, `{"partner":"acme"}`))
	if err != nil || k != "acme" {
		t.Fatalf("RateKeyOf = %q, %v", k, err)
	}
	if _, err := p.RateKeyOf(raw(t, `{"partner":1}`)); err == nil {
		t.Fatal("an undecodable input gave a key")
	}
	if _, err := p.RateKeyOf(raw(t, `{"partner":"`+strings.Repeat("x", 300)+`"}`)); err == nil {
		t.Fatal("a 300-byte key accepted")
	}
	if p.RateLimit.Limits("fetch") || !p.RateLimit.Limits("call") {
		t.Fatal("Limits: only the named step takes a token")
	}
	if all := pipeline.NewRateLimit("api", 20, time.Second, 5); !all.Limits("fetch") || all.Interval() != 50*time.Millisecond {
		t.Fatalf("a limit without steps: Limits(fetch) %v, interval %s", all.Limits("fetch"), all.Interval())
	}
	if k, err := (&pipeline.Pipeline{RateLimit: pipeline.NewRateLimit("api", 1, time.Second, 1)}).RateKeyOf(raw(t, `{}`)); k != "" || err != nil {
		t.Fatalf("a limit without a key function: %q, %v", k, err)
	}
}
