package payload_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/qasync/qasync/shared/clock"
	"github.com/qasync/qasync/shared/internal/memory"
	"github.com/qasync/qasync/shared/payload"
)

func TestDigest(t *testing.T) {
	const empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	if got := payload.Digest(nil); got != empty {
		t.Errorf("Digest(nil) = %s, want %s", got, empty)
	}
}

func TestConstructors(t *testing.T) {
	if p := payload.Raw("", []byte("x")); p.Encoding != payload.EncodingRaw || p.ContentType != payload.ContentTypeOctet {
		t.Errorf("Raw default descriptor = %q %q", p.Encoding, p.ContentType)
	}
	in := []byte(`{"a":1}`)
	p, err := payload.RawJSON(in)
	if err != nil || p.Encoding != payload.EncodingJSON || p.ContentType != payload.ContentTypeJSON {
		t.Fatalf("RawJSON = %+v, %v", p, err)
	}
	in[0] = '['
	if p.Data[0] != '{' {
		t.Error("RawJSON kept the caller's bytes")
	}
	if _, err := payload.RawJSON([]byte(`{"a":`)); err == nil {
		t.Error("RawJSON accepted invalid JSON")
	}
	if _, err := payload.FromProto(nil); err == nil {
		t.Error("FromProto(nil) succeeded")
	}
}

func TestDecodeRefusals(t *testing.T) {
	p, err := payload.FromProto(wrapperspb.String("hello"))
	if err != nil {
		t.Fatal(err)
	}
	err = p.DecodeProto(&structpb.Struct{})
	if err == nil || !strings.Contains(err.Error(), "google.protobuf.StringValue") || !strings.Contains(err.Error(), "google.protobuf.Struct") {
		t.Errorf("DecodeProto into the wrong message: error = %v", err)
	}
	var s string
	if err := p.DecodeJSON(&s); err == nil {
		t.Error("DecodeJSON of a protobuf payload succeeded")
	}
	j, _ := payload.JSON("x")
	if err := j.DecodeProto(&wrapperspb.StringValue{}); err == nil {
		t.Error("DecodeProto of a JSON payload succeeded")
	}
}

// TestJSONErrorsWithholdValues checks that JSON errors describe the problem
// without quoting the value, yet keep the cause for errors.As.
func TestJSONErrorsWithholdValues(t *testing.T) {
	const secret = "7131999"
	p, _ := payload.RawJSON([]byte(`{"n":` + secret + `}`))
	var v struct{ N string }
	err := p.DecodeJSON(&v)
	if err == nil || strings.Contains(err.Error(), secret) {
		t.Errorf("DecodeJSON type mismatch: error = %v", err)
	}
	var typeErr *json.UnmarshalTypeError
	if !errors.As(err, &typeErr) {
		t.Errorf("DecodeJSON error %v does not wrap *json.UnmarshalTypeError", err)
	}
	if _, err := payload.JSON(math.Inf(1)); err == nil || strings.Contains(err.Error(), "Inf") {
		t.Errorf("JSON(+Inf): error = %v", err)
	}
}

func TestWriteRefusals(t *testing.T) {
	ctx := context.Background()
	s := memory.NewPayloadStore(clock.System{})
	ok := payload.Raw("", []byte("x"))
	for name, tc := range map[string]struct {
		p      payload.Payload
		budget int
	}{
		"budget above max":  {ok, payload.MaxInlineBudget + 1},
		"unknown encoding":  {payload.Payload{Encoding: "xml", Data: []byte("x")}, 10},
		"proto without msg": {payload.Payload{Encoding: payload.EncodingProtobuf, Data: []byte("x")}, 10},
	} {
		if _, err := payload.Write(ctx, s, tc.p, "input", tc.budget, time.Time{}); err == nil {
			t.Errorf("%s: Write succeeded", name)
		}
	}
	if _, err := payload.Read(ctx, s, payload.Ref{}); err == nil {
		t.Error("Read of a zero Ref succeeded")
	}
}
