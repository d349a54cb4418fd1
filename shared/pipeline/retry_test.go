package pipeline

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	p := RetryPolicy{MaxRetries: 5, Delay: time.Second, Multiplier: 2, MaxDelay: 10 * time.Second}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	for i, w := range want {
		if got := p.Backoff(i + 1); got != w {
			t.Errorf("Backoff(%d) = %s, want %s", i+1, got, w)
		}
	}
	if got := p.Backoff(10000); got != p.MaxDelay {
		t.Errorf("Backoff(huge) = %s, want cap %s", got, p.MaxDelay)
	}
}

func TestExhausted(t *testing.T) {
	p := RetryPolicy{MaxRetries: 2, Delay: time.Second, Multiplier: 1, MaxDelay: time.Second}
	for attempt, want := range map[int]bool{1: false, 2: false, 3: true, 4: true} {
		if got := p.Exhausted(attempt); got != want {
			t.Errorf("Exhausted(%d) = %v, want %v", attempt, got, want)
		}
	}
}

func TestValidate(t *testing.T) {
	if err := DefaultRetry.Validate(); err != nil {
		t.Fatalf("default policy invalid: %v", err)
	}
	bad := []RetryPolicy{
		{MaxRetries: -1, Delay: time.Second, Multiplier: 1, MaxDelay: time.Second},
		{Delay: 0, Multiplier: 1, MaxDelay: time.Second},
		{Delay: time.Second, Multiplier: 0.5, MaxDelay: time.Second},
		{Delay: time.Second, Multiplier: 1, MaxDelay: time.Millisecond},
	}
	for _, p := range bad {
		if p.Validate() == nil {
			t.Errorf("Validate(%+v) = nil, want error", p)
		}
	}
}
