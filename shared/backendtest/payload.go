package backendtest

// The chunk store suite (Provider.Payloads): parts written once and read
// back as copies, replays accepted, conflicts refused, expiry; then
// payload.Write and payload.Read over the store: inline and chunked
// payloads, replays, descriptors, and corruption detected without quoting
// payload bytes.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/qasync/qasync/shared/payload"
)

// payloadBudget is the inline payloadBudget the suite writes with.
const payloadBudget = payload.DefaultInlineBudget

// payloadMarker starts every generated payload; error texts must never contain it.
const payloadMarker = "PAYLOAD-BYTES-MUST-NOT-LEAK"

// runPayloads runs the chunk store suite. newStore is called once per case
// and must return an empty store whose clock reads wall time, since expiry
// is tested with wall-clock instants. Cases run in parallel.
func runPayloads(t *testing.T, newStore func(t *testing.T) payload.Store) {
	t.Run("PartRoundTrip", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		a := payload.Part{PayloadID: "p1", Name: "chunk#00000", Data: payloadData(1000), ExpiresAt: time.Now().Add(time.Hour)}
		b := payload.Part{PayloadID: "p1", Name: "chunk#00001", Data: payloadData(10)}
		c := payload.Part{PayloadID: "p2", Name: "chunk#00000", Data: payloadData(20)}
		for _, p := range []payload.Part{a, b, c} {
			putPart(t, s, p)
		}
		for _, want := range []payload.Part{a, b, c} {
			got := getPart(t, s, want.PayloadID, want.Name)
			if got.PayloadID != want.PayloadID || got.Name != want.Name || !bytes.Equal(got.Data, want.Data) {
				t.Errorf("GetPart(%s, %s) = %s/%s with %d bytes, want %d bytes", want.PayloadID, want.Name, got.PayloadID, got.Name, len(got.Data), len(want.Data))
			}
		}
	})

	t.Run("PartBytesAreCopied", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		in := payloadData(100)
		putPart(t, s, payload.Part{PayloadID: "p", Name: "chunk#00000", Data: in})
		in[0] ^= 0xff
		out := getPart(t, s, "p", "chunk#00000").Data
		if out[0] == in[0] {
			t.Fatal("store kept a reference to the caller's bytes")
		}
		out[1] ^= 0xff
		if again := getPart(t, s, "p", "chunk#00000").Data; again[1] == out[1] {
			t.Fatal("store handed out a reference to its own bytes")
		}
	})

	t.Run("GetPartMissing", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		putPart(t, s, payload.Part{PayloadID: "p", Name: "chunk#00000", Data: payloadData(1)})
		for _, k := range [][2]string{{"nope", "chunk#00000"}, {"p", "chunk#00001"}, {"p", "manifest"}} {
			if _, err := s.GetPart(t.Context(), k[0], k[1]); !errors.Is(err, payload.ErrNotFound) {
				t.Errorf("GetPart(%s, %s) error = %v, want ErrNotFound", k[0], k[1], err)
			}
		}
	})

	t.Run("IdenticalRePut", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		p := payload.Part{PayloadID: "p", Name: "chunk#00000", Data: payloadData(500), ExpiresAt: time.Now().Add(time.Hour)}
		putPart(t, s, p)
		for _, exp := range []time.Time{p.ExpiresAt, p.ExpiresAt.Add(time.Hour), {}} {
			p.ExpiresAt = exp
			putPart(t, s, p)
		}
		if got := getPart(t, s, "p", "chunk#00000"); !bytes.Equal(got.Data, p.Data) {
			t.Error("identical re-put changed the stored bytes")
		}
	})

	t.Run("ConflictingRePut", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		orig := payloadData(500)
		putPart(t, s, payload.Part{PayloadID: "p", Name: "chunk#00000", Data: orig})
		flipped := bytes.Clone(orig)
		flipped[250] ^= 1
		for _, d := range [][]byte{flipped, orig[:499], append(bytes.Clone(orig), 0)} {
			err := s.PutPart(t.Context(), payload.Part{PayloadID: "p", Name: "chunk#00000", Data: d})
			if !errors.Is(err, payload.ErrConflict) {
				t.Errorf("PutPart of %d different bytes: error = %v, want ErrConflict", len(d), err)
			}
		}
		if got := getPart(t, s, "p", "chunk#00000"); !bytes.Equal(got.Data, orig) {
			t.Error("conflicting re-put changed the stored bytes")
		}
	})

	t.Run("ExpiredPart", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		putPart(t, s, payload.Part{PayloadID: "p", Name: "chunk#00000", Data: payloadData(10), ExpiresAt: time.Now().Add(-time.Hour)})
		if _, err := s.GetPart(t.Context(), "p", "chunk#00000"); !errors.Is(err, payload.ErrNotFound) {
			t.Errorf("GetPart of an expired part: error = %v, want ErrNotFound", err)
		}
	})

	t.Run("ExtendPartNeverShortens", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		soon := time.Now().Add(time.Hour).Truncate(time.Second)
		putPart(t, s, payload.Part{PayloadID: "p", Name: "chunk#00000", Data: payloadData(10), ExpiresAt: soon})
		later := soon.Add(48 * time.Hour)
		if err := s.ExtendPart(t.Context(), "p", "chunk#00000", later); err != nil {
			t.Fatalf("ExtendPart: %v", err)
		}
		if got := getPart(t, s, "p", "chunk#00000"); got.ExpiresAt.Before(later) {
			t.Errorf("after ExtendPart to %v the part expires %v", later, got.ExpiresAt)
		}
		if err := s.ExtendPart(t.Context(), "p", "chunk#00000", soon); err != nil {
			t.Fatalf("ExtendPart to an earlier time: %v", err)
		}
		if got := getPart(t, s, "p", "chunk#00000"); got.ExpiresAt.Before(later) {
			t.Errorf("ExtendPart to an earlier time shortened the expiry to %v", got.ExpiresAt)
		}
		if err := s.ExtendPart(t.Context(), "p", "chunk#00001", later); !errors.Is(err, payload.ErrNotFound) {
			t.Errorf("ExtendPart of a missing part: error = %v, want ErrNotFound", err)
		}
		putPart(t, s, payload.Part{PayloadID: "gone", Name: "chunk#00000", Data: payloadData(10), ExpiresAt: time.Now().Add(-time.Hour)})
		if err := s.ExtendPart(t.Context(), "gone", "chunk#00000", later); !errors.Is(err, payload.ErrNotFound) {
			t.Errorf("ExtendPart of an expired part: error = %v, want ErrNotFound (it is gone)", err)
		}
	})

	t.Run("DeletePart", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		putPart(t, s, payload.Part{PayloadID: "p", Name: "chunk#00000", Data: payloadData(10)})
		putPart(t, s, payload.Part{PayloadID: "p", Name: "chunk#00001", Data: payloadData(10)})
		if err := s.DeletePart(t.Context(), "p", "chunk#00000"); err != nil {
			t.Fatalf("DeletePart: %v", err)
		}
		if _, err := s.GetPart(t.Context(), "p", "chunk#00000"); !errors.Is(err, payload.ErrNotFound) {
			t.Errorf("GetPart after DeletePart: error = %v, want ErrNotFound", err)
		}
		getPart(t, s, "p", "chunk#00001") // its neighbour stays
		if err := s.DeletePart(t.Context(), "p", "chunk#00000"); err != nil {
			t.Errorf("DeletePart of a missing part: %v, want no error", err)
		}
	})

	t.Run("ExtendAndDeleteAPayload", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		soon := time.Now().Add(time.Hour).Truncate(time.Second)
		for _, size := range []int{payloadBudget + 1, 2*payload.ChunkSize + 1} {
			p := payload.Raw("", payloadData(size))
			ref, err := payload.Write(t.Context(), s, p, fmt.Sprint("slot-", size), payloadBudget, soon)
			if err != nil {
				t.Fatal(err)
			}
			later := soon.Add(72 * time.Hour)
			if err := payload.Extend(t.Context(), s, ref, later); err != nil {
				t.Fatalf("Extend of a %d-byte payload: %v", size, err)
			}
			names := []string{payload.PartWhole}
			if !ref.Whole {
				names = []string{"chunk#00000", "chunk#00001", "chunk#00002", "manifest"}
			}
			for _, n := range names {
				if got := getPart(t, s, ref.ManifestID, n); got.ExpiresAt.Before(later) {
					t.Errorf("after Extend, part %s of a %d-byte payload expires %v, want at least %v", n, size, got.ExpiresAt, later)
				}
			}
			if err := payload.Delete(t.Context(), s, ref); err != nil {
				t.Fatalf("Delete of a %d-byte payload: %v", size, err)
			}
			for _, n := range names {
				if _, err := s.GetPart(t.Context(), ref.ManifestID, n); !errors.Is(err, payload.ErrNotFound) {
					t.Errorf("after Delete, part %s of a %d-byte payload: error = %v, want ErrNotFound", n, size, err)
				}
			}
			if err := payload.Delete(t.Context(), s, ref); err != nil {
				t.Errorf("Delete of a deleted payload: %v, want no error", err)
			}
		}
	})

	t.Run("WriteRead", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			size   int
			chunks int // 0: inline; 1: one whole part, no manifest
		}{
			{0, 0},
			{1, 0},
			{payloadBudget, 0},
			{payloadBudget + 1, 1},
			{payload.ChunkSize - 1, 1},
			{payload.ChunkSize, 1},
			{payload.ChunkSize + 1, 2},
			{10 << 20, 40},
		} {
			t.Run(fmt.Sprint(tc.size), func(t *testing.T) {
				t.Parallel()
				s := newStore(t)
				p := payload.Raw("", payloadData(tc.size))
				r := writePayload(t, s, p, "input", payloadBudget)
				if r.Length != int64(tc.size) || r.SHA256 != payload.Digest(p.Data) {
					t.Errorf("Ref length %d sha256 %s, want %d %s", r.Length, r.SHA256, tc.size, payload.Digest(p.Data))
				}
				if r.IsZero() {
					t.Error("Ref.IsZero() = true")
				}
				if tc.chunks == 0 {
					if r.ManifestID != "" || r.Inline == nil || !bytes.Equal(r.Inline, p.Data) {
						t.Errorf("want an inline Ref, got manifest %q, %d inline bytes (nil: %t)", r.ManifestID, len(r.Inline), r.Inline == nil)
					}
				} else if tc.chunks == 1 {
					if r.ManifestID == "" || r.Inline != nil || !r.Whole {
						t.Fatalf("want a whole-part Ref, got manifest %q whole %v, %d inline bytes", r.ManifestID, r.Whole, len(r.Inline))
					}
					if part := getPart(t, s, r.ManifestID, payload.PartWhole); !bytes.Equal(part.Data, p.Data) {
						t.Errorf("whole part holds %d bytes, want the payload's %d", len(part.Data), len(p.Data))
					}
					if _, err := s.GetPart(t.Context(), r.ManifestID, "manifest"); !errors.Is(err, payload.ErrNotFound) {
						t.Errorf("a whole part has a manifest too: %v", err)
					}
				} else {
					if r.ManifestID == "" || r.Inline != nil || r.Whole {
						t.Fatalf("want a chunked Ref, got manifest %q whole %v, %d inline bytes", r.ManifestID, r.Whole, len(r.Inline))
					}
					if n := countChunks(t, s, r.ManifestID); n != tc.chunks {
						t.Errorf("stored %d chunks, want %d", n, tc.chunks)
					}
					getPart(t, s, r.ManifestID, "manifest")
				}
				checkRead(t, s, r, p)
			})
		}
	})

	t.Run("NeverInline", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		for _, size := range []int{0, 1} {
			p := payload.Raw("", payloadData(size))
			r := writePayload(t, s, p, fmt.Sprint("slot", size), -1)
			if r.ManifestID == "" || r.Inline != nil || !r.Whole {
				t.Fatalf("size %d with a negative payloadBudget: want a stored (whole-part) Ref", size)
			}
			if part := getPart(t, s, r.ManifestID, payload.PartWhole); len(part.Data) != size {
				t.Errorf("size %d: whole part of %d bytes", size, len(part.Data))
			}
			checkRead(t, s, r, p)
		}
	})

	t.Run("Replay", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		for _, size := range []int{10, 3*payload.ChunkSize + 7} {
			p := payload.Raw("", payloadData(size))
			first := writePayload(t, s, p, "result", payloadBudget)
			again, err := payload.Write(t.Context(), s, p, "result", payloadBudget, time.Now().Add(48*time.Hour))
			if err != nil {
				t.Fatalf("replayed Write of %d bytes: %v", size, err)
			}
			if !reflect.DeepEqual(first, again) {
				t.Errorf("replayed Write of %d bytes gave a different Ref", size)
			}
			checkRead(t, s, again, p)
		}
	})

	t.Run("ConcurrentReplay", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		p := payload.Raw("", payloadData(2*payload.ChunkSize+3))
		refs := make([]payload.Ref, 8)
		errs := make([]error, len(refs))
		var wg sync.WaitGroup
		for i := range refs {
			wg.Go(func() { refs[i], errs[i] = payload.Write(t.Context(), s, p, "input", payloadBudget, time.Time{}) })
		}
		wg.Wait()
		for i := range refs {
			if errs[i] != nil {
				t.Fatalf("concurrent Write %d: %v", i, errs[i])
			}
			if !reflect.DeepEqual(refs[i], refs[0]) {
				t.Fatalf("concurrent Write %d gave a different Ref", i)
			}
		}
		checkRead(t, s, refs[0], p)
	})

	t.Run("IDsDifferBySlotAndDescriptor", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		b := payloadData(payload.ChunkSize + 1)
		in := writePayload(t, s, payload.Raw("", b), "input", payloadBudget)
		out := writePayload(t, s, payload.Raw("", b), "result", payloadBudget)
		typed := writePayload(t, s, payload.Raw("image/png", b), "input", payloadBudget)
		if in.ManifestID == out.ManifestID || in.ManifestID == typed.ManifestID {
			t.Errorf("manifest ids input %s, result %s, image/png input %s: want all different", in.ManifestID, out.ManifestID, typed.ManifestID)
		}
		checkRead(t, s, in, payload.Raw("", b))
		checkRead(t, s, out, payload.Raw("", b))
		checkRead(t, s, typed, payload.Raw("image/png", b))
	})

	t.Run("CorruptRef", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		chunked := writePayload(t, s, payload.Raw("", payloadData(2*payload.ChunkSize)), "input", payloadBudget)
		inline := writePayload(t, s, payload.Raw("", payloadData(100)), "input", payloadBudget)
		other := writePayload(t, s, payload.Raw("", payloadData(payload.ChunkSize+5)), "result", payloadBudget)
		for name, edit := range map[string]func(r *payload.Ref){
			"chunked sha256":        func(r *payload.Ref) { r.SHA256 = payload.Digest(nil) },
			"chunked length":        func(r *payload.Ref) { r.Length-- },
			"chunked content type":  func(r *payload.Ref) { r.ContentType = "text/plain" },
			"chunked message":       func(r *payload.Ref) { r.Message = "google.protobuf.Struct" },
			"other payload":         func(r *payload.Ref) { r.ManifestID = other.ManifestID },
			"chunked with inline":   func(r *payload.Ref) { r.Inline = []byte{} },
			"inline flipped byte":   func(r *payload.Ref) { *r = inline; r.Inline = bytes.Clone(r.Inline); r.Inline[50] ^= 1 },
			"inline length":         func(r *payload.Ref) { *r = inline; r.Length++ },
			"inline truncated":      func(r *payload.Ref) { *r = inline; r.Inline = r.Inline[:99] },
			"inline sha256 of none": func(r *payload.Ref) { *r = inline; r.SHA256 = payload.Digest(nil) },
		} {
			r := chunked
			edit(&r)
			checkCorrupt(t, name, s, r, false)
		}
	})

	t.Run("CorruptParts", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		r := writePayload(t, s, payload.Raw("", payloadData(3*payload.ChunkSize-10)), "input", payloadBudget)
		for _, tc := range []struct {
			name    string
			edit    func(name string, b []byte) []byte // nil result: skip the part
			missing bool
		}{
			{"flipped byte", func(n string, b []byte) []byte {
				if n == "chunk#00001" {
					b[1000] ^= 0x80
				}
				return b
			}, false},
			{"truncated last chunk", func(n string, b []byte) []byte {
				if n == "chunk#00002" {
					return b[:len(b)-1]
				}
				return b
			}, false},
			{"extended last chunk", func(n string, b []byte) []byte {
				if n == "chunk#00002" {
					return append(b, 0)
				}
				return b
			}, false},
			{"swapped chunks", func(n string, b []byte) []byte {
				switch n {
				case "chunk#00000":
					return getPart(t, s, r.ManifestID, "chunk#00001").Data
				case "chunk#00001":
					return getPart(t, s, r.ManifestID, "chunk#00000").Data
				}
				return b
			}, false},
			{"garbage manifest", func(n string, b []byte) []byte {
				if n == "manifest" {
					return []byte("{not json")
				}
				return b
			}, false},
			{"missing middle chunk", func(n string, b []byte) []byte {
				if n == "chunk#00001" {
					return nil
				}
				return b
			}, true},
			{"missing last chunk", func(n string, b []byte) []byte {
				if n == "chunk#00002" {
					return nil
				}
				return b
			}, true},
		} {
			forged := r
			forged.ManifestID = "forged-" + strings.ReplaceAll(tc.name, " ", "-")
			for _, name := range []string{"chunk#00000", "chunk#00001", "chunk#00002", "manifest"} {
				if b := tc.edit(name, getPart(t, s, r.ManifestID, name).Data); b != nil {
					putPart(t, s, payload.Part{PayloadID: forged.ManifestID, Name: name, Data: b})
				}
			}
			checkCorrupt(t, tc.name, s, forged, tc.missing)
		}
	})

	t.Run("MissingManifest", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		r := writePayload(t, s, payload.Raw("", payloadData(payload.ChunkSize+1)), "input", payloadBudget)
		r.ManifestID = "no-such-payload"
		if _, err := payload.Read(t.Context(), s, r); !errors.Is(err, payload.ErrNotFound) {
			t.Errorf("Read without a manifest: error = %v, want ErrNotFound", err)
		}
	})

	t.Run("Descriptors", func(t *testing.T) {
		t.Parallel()
		type doc struct {
			Name string   `json:"name"`
			N    int      `json:"n"`
			Tags []string `json:"tags"`
		}
		wantDoc := doc{Name: "qasync", N: 42, Tags: []string{"a", "b"}}
		jsonP, err := payload.JSON(wantDoc)
		if err != nil {
			t.Fatal(err)
		}
		wantMsg, err := structpb.NewStruct(map[string]any{"name": "qasync", "n": 42.0, "tags": []any{"a", "b"}})
		if err != nil {
			t.Fatal(err)
		}
		protoP, err := payload.FromProto(wantMsg)
		if err != nil {
			t.Fatal(err)
		}
		if protoP.Message != "google.protobuf.Struct" || protoP.ContentType != payload.ContentTypeProtobuf {
			t.Fatalf("FromProto descriptor = %q %q", protoP.Message, protoP.ContentType)
		}
		rawP := payload.Raw("image/png", payloadData(300))

		for _, inlineBudget := range []int{payloadBudget, -1} {
			s := newStore(t)
			slot := fmt.Sprint("payloadBudget", inlineBudget)

			got := checkRead(t, s, writePayload(t, s, jsonP, slot, inlineBudget), jsonP)
			var d doc
			if err := got.DecodeJSON(&d); err != nil || !reflect.DeepEqual(d, wantDoc) {
				t.Errorf("JSON round trip = %+v, %v; want %+v", d, err, wantDoc)
			}

			checkRead(t, s, writePayload(t, s, rawP, slot, inlineBudget), rawP)

			r := writePayload(t, s, protoP, slot, inlineBudget)
			got = checkRead(t, s, r, protoP)
			m := &structpb.Struct{}
			if err := got.DecodeProto(m); err != nil || !proto.Equal(m, wantMsg) {
				t.Errorf("protobuf round trip = %v, %v; want %v", m, err, wantMsg)
			}
			if r.ManifestID != "" && !r.Whole {
				var stored map[string]any
				if err := json.Unmarshal(getPart(t, s, r.ManifestID, "manifest").Data, &stored); err != nil {
					t.Fatalf("stored manifest is not JSON: %v", err)
				}
				if stored["_tpf_message"] != "google.protobuf.Struct" || stored["contentType"] != payload.ContentTypeProtobuf || stored["encoding"] != string(payload.EncodingProtobuf) {
					t.Errorf("stored manifest descriptor = %v %v %v", stored["_tpf_message"], stored["contentType"], stored["encoding"])
				}
			}
		}
	})
}

// payloadData returns n deterministic pseudo-random bytes starting with payloadMarker
// (when n allows).
func payloadData(n int) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{'p', 'a', 'y', 'l', 'o', 'a', 'd'}).Read(b)
	copy(b, payloadMarker)
	return b
}

func putPart(t *testing.T, s payload.Store, p payload.Part) {
	t.Helper()
	if err := s.PutPart(t.Context(), p); err != nil {
		t.Fatalf("PutPart(%s, %s): %v", p.PayloadID, p.Name, err)
	}
}

func getPart(t *testing.T, s payload.Store, id, name string) payload.Part {
	t.Helper()
	p, err := s.GetPart(t.Context(), id, name)
	if err != nil {
		t.Fatalf("GetPart(%s, %s): %v", id, name, err)
	}
	return p
}

func writePayload(t *testing.T, s payload.Store, p payload.Payload, slot string, inlineBudget int) payload.Ref {
	t.Helper()
	r, err := payload.Write(t.Context(), s, p, slot, inlineBudget, time.Now().Add(24*time.Hour))
	if err != nil {
		t.Fatalf("Write of %d bytes to %s: %v", len(p.Data), slot, err)
	}
	return r
}

// checkRead reads r and checks it yields want, bytes and descriptor.
func checkRead(t *testing.T, s payload.Store, r payload.Ref, want payload.Payload) payload.Payload {
	t.Helper()
	got, err := payload.Read(t.Context(), s, r)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if got.Encoding != want.Encoding || got.ContentType != want.ContentType || got.Message != want.Message {
		t.Errorf("Read descriptor = %q %q %q, want %q %q %q", got.Encoding, got.ContentType, got.Message, want.Encoding, want.ContentType, want.Message)
	}
	if !bytes.Equal(got.Data, want.Data) {
		t.Errorf("Read returned %d bytes (sha256 %s), want %d (sha256 %s)", len(got.Data), payload.Digest(got.Data), len(want.Data), payload.Digest(want.Data))
	}
	return got
}

// checkCorrupt checks that reading r fails with ErrCorrupt (and ErrNotFound
// when missing) without quoting payload bytes.
func checkCorrupt(t *testing.T, name string, s payload.Store, r payload.Ref, missing bool) {
	t.Helper()
	_, err := payload.Read(t.Context(), s, r)
	switch {
	case !errors.Is(err, payload.ErrCorrupt):
		t.Errorf("%s: Read error = %v, want ErrCorrupt", name, err)
	case missing && !errors.Is(err, payload.ErrNotFound):
		t.Errorf("%s: Read error = %v, want ErrNotFound too", name, err)
	case strings.Contains(err.Error(), payloadMarker):
		t.Errorf("%s: Read error quotes payload bytes: %v", name, err)
	}
}

// countChunks counts the consecutive chunks stored under id.
func countChunks(t *testing.T, s payload.Store, id string) int {
	t.Helper()
	for n := 0; ; n++ {
		_, err := s.GetPart(t.Context(), id, fmt.Sprintf("chunk#%05d", n))
		if errors.Is(err, payload.ErrNotFound) {
			return n
		}
		if err != nil {
			t.Fatalf("GetPart(%s, chunk %d): %v", id, n, err)
		}
	}
}
