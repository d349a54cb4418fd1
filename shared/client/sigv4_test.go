package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/qasync/qasync/shared/store"
)

var (
	fixedClock  = time.Date(2026, 11, 29, 8, 44, 49, 0, time.UTC)
	staticCreds = aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", SessionToken: "session-token"}, nil
	})
)

// seen is a request as the server received it.
type seen struct {
	method, host, uri string
	header            http.Header
	body              []byte
}

// capture serves every request with 200 {} and records it; dial sends
// every connection of the returned http.Client to it, whatever the URL's
// host, so that an execute-api URL reaches the test server.
func capture(t *testing.T) (*http.Client, *[]seen) {
	t.Helper()
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, seen{method: r.Method, host: r.Host, uri: r.RequestURI, header: r.Header.Clone(), body: b})
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}}
	return hc, &got
}

// verify recomputes the signature of r with the SDK's signer, the static
// credentials and the request's own X-Amz-Date, and compares it with the
// Authorization header the client sent.
func verify(t *testing.T, r seen, region string) {
	t.Helper()
	auth := r.header.Get("Authorization")
	if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261129/"+region+"/execute-api/aws4_request, ") {
		t.Fatalf("Authorization %q", auth)
	}
	at, err := time.Parse("20060102T150405Z", r.header.Get("X-Amz-Date"))
	if err != nil || !at.Equal(fixedClock) {
		t.Fatalf("X-Amz-Date %q: %v", r.header.Get("X-Amz-Date"), err)
	}
	if r.header.Get("X-Amz-Security-Token") != "session-token" {
		t.Fatalf("X-Amz-Security-Token %q", r.header.Get("X-Amz-Security-Token"))
	}
	req, err := http.NewRequest(r.method, "https://"+r.host+r.uri, bytes.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	// Only the headers the client signed, as API Gateway checks them (the
	// transport adds Accept-Encoding after signing).
	_, signed, _ := strings.Cut(auth, "SignedHeaders=")
	signed, _, _ = strings.Cut(signed, ",")
	req.Header = http.Header{}
	for _, h := range strings.Split(signed, ";") {
		switch h {
		case "host", "x-amz-date", "x-amz-security-token":
		default:
			req.Header[http.CanonicalHeaderKey(h)] = r.header.Values(h)
		}
	}
	if !strings.Contains(signed, "host") || (len(r.body) > 0 && !strings.Contains(signed, "content-type")) {
		t.Fatalf("signed headers %q", signed)
	}
	sum := sha256.Sum256(r.body)
	creds, _ := staticCreds.Retrieve(context.Background())
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hex.EncodeToString(sum[:]), "execute-api", region, at); err != nil {
		t.Fatal(err)
	}
	if want := req.Header.Get("Authorization"); want != auth {
		t.Fatalf("signature\n got %s\nwant %s", auth, want)
	}
}

// TestSignsExecuteAPIRequests: requests to an API Gateway URL carry a
// SigV4 signature for execute-api in the URL's region, over the method,
// the stage path, the query and the body, that the SDK's signer
// reproduces; no admin token is sent.
func TestSignsExecuteAPIRequests(t *testing.T) {
	hc, got := capture(t)
	c, err := New("http://a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com/prod", WithHTTPClient(hc),
		WithCredentials(staticCreds), withClock(func() time.Time { return fixedClock }), WithTenant("acme"))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Signs() {
		t.Fatal("an execute-api URL is not signed by default")
	}
	ctx := context.Background()
	if _, err := c.Submit(ctx, SubmitRequest{PipelineID: "checkout.deliver-order", IdempotencyKey: "k-1", Body: []byte(`{"orderId":"1001"}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.List(ctx, ListQuery{PipelineID: "p", Statuses: []store.Status{store.DLQ, store.Failed}, Limit: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cancel(ctx, "e-1", CancelRequest{Reason: "stop"}); err != nil {
		t.Fatal(err)
	}
	if len(*got) != 3 {
		t.Fatalf("%d requests", len(*got))
	}
	for _, r := range *got {
		if !strings.HasPrefix(r.uri, "/prod/v1/") {
			t.Fatalf("request URI %q lost the stage", r.uri)
		}
		verify(t, r, "eu-west-1")
	}
}

// TestLocalURLsAreNotSigned: a local URL is not signed; its operator
// routes get the admin token instead, and SignAlways signs it (with the
// region of the environment).
func TestLocalURLsAreNotSigned(t *testing.T) {
	hc, got := capture(t)
	c, err := New("http://127.0.0.1:8080", WithHTTPClient(hc), WithAdminToken("s3cret"), WithCredentials(staticCreds))
	if err != nil {
		t.Fatal(err)
	}
	if c.Signs() {
		t.Fatal("a local URL is signed")
	}
	if _, err := c.Redrive(context.Background(), "e-1", RedriveRequest{Reason: "r"}); err != nil {
		t.Fatal(err)
	}
	r := (*got)[0]
	if r.header.Get("Authorization") != "Bearer s3cret" || r.header.Get("X-Amz-Date") != "" {
		t.Fatalf("headers %v", r.header)
	}

	isolateAWSConfig(t)
	t.Setenv("AWS_REGION", "ap-south-1")
	s, err := New("http://api.example.com", WithHTTPClient(hc), WithSigning(SignAlways), WithCredentials(staticCreds),
		withClock(func() time.Time { return fixedClock }))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Status(context.Background(), "e-1"); err != nil {
		t.Fatal(err)
	}
	verify(t, (*got)[1], "ap-south-1")

	never, err := New("https://x.execute-api.us-east-1.amazonaws.com", WithSigning(SignNever))
	if err != nil || never.Signs() {
		t.Fatalf("SignNever: signs %v, %v", never != nil && never.Signs(), err)
	}
}

// isolateAWSConfig points the shared AWS config and credentials files at
// empty files, so that the machine's profile cannot leak into a test.
func isolateAWSConfig(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_CONFIG_FILE", empty)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", empty)
	t.Setenv("AWS_PROFILE", "")
}

// TestAwaitCompletionIsNeverSigned: the resume token authorizes an await
// completion, so even against API Gateway it is sent unsigned, without
// tenant or credentials.
func TestAwaitCompletionIsNeverSigned(t *testing.T) {
	hc, got := capture(t)
	c, err := New("http://a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com/prod", WithHTTPClient(hc), WithTenant("acme"),
		WithCredentials(aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			t.Fatal("credentials retrieved for an await completion")
			return aws.Credentials{}, nil
		})))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CompleteAwait(context.Background(), "e-1", "aw-1", "tok", []byte(`{}`), ""); err != nil {
		t.Fatal(err)
	}
	r := (*got)[0]
	if r.header.Get("Authorization") != "" || r.header.Get("X-Tenant-Id") != "" || r.header.Get("X-Resume-Token") != "tok" {
		t.Fatalf("headers %v", r.header)
	}
}

// TestAdminTokenWithSigningIsRefused: SigV4 owns the Authorization header,
// so New refuses an admin token on a signed client.
func TestAdminTokenWithSigningIsRefused(t *testing.T) {
	if _, err := New("https://a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com", WithAdminToken("t")); err == nil {
		t.Fatal("an admin token was accepted on a signed client")
	}
	if _, err := New("https://a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com", WithAdminToken("t"), WithSigning(SignNever)); err != nil {
		t.Fatal(err)
	}
}

// TestSigningWithoutRegionFails: a signed request with no region from the
// URL, the options or the environment fails before it is sent.
func TestSigningWithoutRegionFails(t *testing.T) {
	isolateAWSConfig(t)
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	hc, got := capture(t)
	c, err := New("https://api.example.com", WithHTTPClient(hc), WithSigning(SignAlways), WithCredentials(staticCreds))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Status(context.Background(), "e-1"); err == nil || !strings.Contains(err.Error(), "region") {
		t.Fatalf("error %v", err)
	}
	if len(*got) != 0 {
		t.Fatal("an unsigned request was sent")
	}
}

// TestExecuteAPIRegion: the API Gateway host pattern and its region.
func TestExecuteAPIRegion(t *testing.T) {
	for host, want := range map[string]string{
		"a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com":     "eu-west-1",
		"A1B2C3D4E5.EXECUTE-API.US-EAST-1.AMAZONAWS.COM":     "us-east-1",
		"a1b2c3d4e5.execute-api.cn-north-1.amazonaws.com.cn": "cn-north-1",
		"api.example.com": "",
		"127.0.0.1":       "",
		"a1.execute-api.eu-west-1.amazonaws.com.evil.example": "",
		"x.y.execute-api.eu-west-1.amazonaws.com":             "",
		"a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com.":     "eu-west-1",
	} {
		got, ok := ExecuteAPIRegion(host)
		if got != want || ok != (want != "") {
			t.Errorf("ExecuteAPIRegion(%q) = %q, %v; want %q", host, got, ok, want)
		}
	}
}
