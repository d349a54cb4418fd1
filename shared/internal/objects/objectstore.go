// Package objects publishes objects addressed by URI: the seam of
// Terminal Object Publish (a pipeline's Output, see pipeline.Output). It
// implements pipeline.ObjectStore with a File store (file:///abs/path,
// local runs), an S3 store (s3://bucket/key, AWS and the local stack) and
// a Router choosing one by scheme. File and S3 pass the object store
// suite of package backendtest (Provider.Objects).
//
// Put is idempotent: the same URI with the same bytes leaves the same
// object; a second Put of the same URI replaces the object (a replayed
// last step publishes its own output again before it is committed, so
// the object always holds the committed result's bytes).
package objects

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/qasync/qasync/shared/pipeline"
)

// Store is pipeline.ObjectStore; Get reads an object back (tests,
// operators).
type Store interface {
	pipeline.ObjectStore
	Get(ctx context.Context, uri string) ([]byte, error)
}

// ErrNotFound is returned by Get for a missing object. It matches
// fs.ErrNotExist (errors.Is), as backendtest requires of an object store.
var ErrNotFound = fmt.Errorf("objects: object not found: %w", fs.ErrNotExist)

// File stores objects as files: file:///abs/path.
type File struct{}

var _ Store = File{}

func filePath(uri string) (string, error) {
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "file" || (u.Host != "" && u.Host != "localhost") || !filepath.IsAbs(u.Path) {
		return "", fmt.Errorf("objects: %q is not a file:///absolute/path URI", uri)
	}
	return filepath.Clean(u.Path), nil
}

// Put writes data to the file atomically (a temporary file renamed over
// it); an existing file with the same bytes is left as it is.
func (File) Put(ctx context.Context, uri string, data []byte, _ string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	path, err := filePath(uri)
	if err != nil {
		return err
	}
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("objects: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("objects: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("objects: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("objects: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("objects: %w", err)
	}
	return nil
}

// Get reads the file.
func (File) Get(ctx context.Context, uri string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	path, err := filePath(uri)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNotFound
	}
	return b, err
}

// S3 stores objects in S3: s3://bucket/key, through Client, or when it is
// nil through the client Connect returns (asked for at each call; a
// session builds it on the first).
type S3 struct {
	Client  *s3.Client
	Connect func(context.Context) (*s3.Client, error)
}

// client is the client of a call.
func (s S3) client(ctx context.Context) (*s3.Client, error) {
	if s.Client != nil || s.Connect == nil {
		return s.Client, nil
	}
	c, err := s.Connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("objects: S3 client: %w", err)
	}
	return c, nil
}

var _ Store = S3{}

func s3Location(uri string) (bucket, key string, err error) {
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "s3" || u.Host == "" || strings.TrimPrefix(u.Path, "/") == "" {
		return "", "", fmt.Errorf("objects: %q is not an s3://bucket/key URI", uri)
	}
	return u.Host, strings.TrimPrefix(u.Path, "/"), nil
}

// Put writes the object with one PutObject (a replacement of the same
// key with the same bytes is harmless).
func (s S3) Put(ctx context.Context, uri string, data []byte, contentType string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	bucket, key, err := s3Location(uri)
	if err != nil {
		return err
	}
	in := &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data)))}
	if contentType != "" {
		in.ContentType = aws.String(contentType)
	}
	c, err := s.client(ctx)
	if err != nil {
		return err
	}
	if _, err := c.PutObject(ctx, in); err != nil {
		return fmt.Errorf("objects: put %s: %w", uri, err)
	}
	return nil
}

// Get reads the object.
func (s S3) Get(ctx context.Context, uri string) ([]byte, error) {
	bucket, key, err := s3Location(uri)
	if err != nil {
		return nil, err
	}
	c, err := s.client(ctx)
	if err != nil {
		return nil, err
	}
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		var nk interface{ ErrorCode() string }
		if errors.As(err, &nk) && (nk.ErrorCode() == "NoSuchKey" || nk.ErrorCode() == "NotFound") {
			return nil, ErrNotFound
		}
		return nil, fmt.Errorf("objects: get %s: %w", uri, err)
	}
	defer out.Body.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(out.Body); err != nil {
		return nil, fmt.Errorf("objects: get %s: %w", uri, err)
	}
	return b.Bytes(), nil
}

// Router sends file:// URIs to File and s3:// URIs to S3 (nil: refused).
type Router struct {
	File Store
	S3   Store
}

var _ Store = Router{}

func (r Router) pick(uri string) (Store, error) {
	scheme, _, _ := strings.Cut(uri, "://")
	var s Store
	switch scheme {
	case "file":
		s = r.File
	case "s3":
		s = r.S3
	}
	if s == nil {
		return nil, fmt.Errorf("objects: no store for %q (file:// and s3:// are supported; s3 needs AWS clients)", scheme)
	}
	return s, nil
}

// Put implements pipeline.ObjectStore.
func (r Router) Put(ctx context.Context, uri string, data []byte, contentType string) error {
	s, err := r.pick(uri)
	if err != nil {
		return err
	}
	return s.Put(ctx, uri, data, contentType)
}

// Get reads an object back.
func (r Router) Get(ctx context.Context, uri string) ([]byte, error) {
	s, err := r.pick(uri)
	if err != nil {
		return nil, err
	}
	return s.Get(ctx, uri)
}
