package objects_test

import (
	"testing"

	"github.com/qasync/qasync/shared/internal/objects"
)

func TestRouterRefusesUnknownScheme(t *testing.T) {
	r := objects.Router{File: objects.File{}}
	for _, uri := range []string{"s3://b/k", "http://x/y", "file://relative"} {
		if err := r.Put(t.Context(), uri, []byte("x"), ""); err == nil {
			t.Errorf("Put %s succeeded", uri)
		}
	}
}
