package pipeline

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/payload"
)

func TestSleepValidation(t *testing.T) {
	plain := NewStep("plain", func(_ context.Context, _ StepInfo, in map[string]any) (map[string]any, error) { return in, nil })
	cases := []struct {
		name  string
		steps []Step
		want  string
	}{
		{"last", []Step{plain, Sleep("nap", time.Hour)}, "cannot be the last step"},
		{"short", []Step{Sleep("nap", 500*time.Millisecond), plain}, "shorter than 1s"},
		{"ok", []Step{Sleep("nap", time.Second), plain}, ""},
	}
	for _, c := range cases {
		err := (&Pipeline{ID: "p", Steps: c.steps}).Validate()
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v; want %q", c.name, err, c.want)
		}
	}
}

func TestSleepUntilDecodesItsInput(t *testing.T) {
	at := time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC)
	s := SleepUntil("until", func(in struct {
		At time.Time `json:"at"`
	}) time.Time {
		return in.At
	})
	in, _ := payload.JSON(map[string]any{"at": at})
	got, err := s.Wake(context.Background(), StepInfo{}, in, time.Now())
	if err != nil || !got.Equal(at) {
		t.Fatalf("Wake: %s, %v; want %s", got, err, at)
	}
	_, err = s.Wake(context.Background(), StepInfo{}, payload.Payload{Data: []byte("{"), ContentType: "application/json"}, time.Now())
	if code, _, retryable := Classify(err); code != "invalid_input" || retryable {
		t.Fatalf("bad input: %v; want non-retryable invalid_input", err)
	}
	if len(s.Accepts) != 1 || s.Accepts[0] != payload.EncodingJSON {
		t.Fatalf("Accepts %v; want JSON", s.Accepts)
	}
}
