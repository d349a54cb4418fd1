package objects_test

import (
	"net/url"
	"path/filepath"
	"testing"

	"github.com/qasync/qasync/shared/internal/awstest"
	"github.com/qasync/qasync/shared/internal/objects"
	"github.com/qasync/qasync/shared/internal/objects/objectstoretest"
)

func TestFileConformance(t *testing.T) {
	objectstoretest.Run(t, func(t *testing.T) (objects.Store, string) {
		return objects.File{}, (&url.URL{Scheme: "file", Path: filepath.ToSlash(t.TempDir())}).String()
	})
}

// S3 against the local stack (fauxqs serves S3 on the SQS port), a bucket
// per test.
func TestS3Conformance(t *testing.T) {
	t.Parallel()
	objectstoretest.Run(t, func(t *testing.T) (objects.Store, string) {
		c, _ := awstest.Clients(t)
		return objects.S3{Client: c.S3}, "s3://" + awstest.Bucket(t, c) + "/prefix"
	})
}

func TestRouterRefusesUnknownScheme(t *testing.T) {
	r := objects.Router{File: objects.File{}}
	for _, uri := range []string{"s3://b/k", "http://x/y", "file://relative"} {
		if err := r.Put(t.Context(), uri, []byte("x"), ""); err == nil {
			t.Errorf("Put %s succeeded", uri)
		}
	}
}
