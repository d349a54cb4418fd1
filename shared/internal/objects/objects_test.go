package objects_test

import (
	"net/url"
	"path/filepath"
	"testing"

	"github.com/qasync/qasync/shared/backendtest"
	"github.com/qasync/qasync/shared/internal/awstest"
	"github.com/qasync/qasync/shared/internal/objects"
)

// TestConformance runs the object store suite on both stores: File under
// a temporary directory per case, and S3 against the local stack (the SQS
// server serves S3 on its port), a bucket per case.
func TestConformance(t *testing.T) {
	t.Parallel()
	t.Run("File", func(t *testing.T) {
		t.Parallel()
		backendtest.Exercise(t, backendtest.Provider{
			Objects: func(t *testing.T) (backendtest.ObjectStore, string) {
				return objects.File{}, (&url.URL{Scheme: "file", Path: filepath.ToSlash(t.TempDir())}).String()
			},
		})
	})
	t.Run("S3", func(t *testing.T) {
		t.Parallel()
		backendtest.Exercise(t, backendtest.Provider{
			Objects: func(t *testing.T) (backendtest.ObjectStore, string) {
				c, _ := awstest.Clients(t)
				return objects.S3{Client: c.S3}, "s3://" + awstest.Bucket(t, c) + "/prefix"
			},
		})
	})
}
