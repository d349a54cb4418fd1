package awsclient_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"

	"github.com/qasync/qasync/shared/internal/awsclient"
)

// TestHTTPClientKeepsConnections: 32 requests in flight at once to one
// endpoint, twice, open 32 connections, not 32 more the second time: the
// pool keeps every connection of the first wave (the SDK's default keeps
// 10 of them and opens 22 new ones for the second wave).
func TestHTTPClientKeepsConnections(t *testing.T) {
	const inFlight = 32
	var conns atomic.Int32
	var mu sync.Mutex
	arrived, release := 0, make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Hold each wave's requests until all have arrived: they are in
		// flight at once, each on a connection of its own.
		mu.Lock()
		arrived++
		if arrived == inFlight {
			arrived = 0
			close(release)
			release = make(chan struct{})
			mu.Unlock()
		} else {
			wait := release
			mu.Unlock()
			<-wait
		}
		_, _ = io.WriteString(w, "{}")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()

	for name, c := range map[string]aws.HTTPClient{"HTTPClient": awsclient.HTTPClient(), "LoadEnvConfig": envConfigClient(t)} {
		conns.Store(0)
		for range 2 {
			var wg sync.WaitGroup
			for range inFlight {
				wg.Go(func() {
					req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL, nil)
					resp, err := c.Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				})
			}
			wg.Wait()
		}
		if n := conns.Load(); n != inFlight {
			t.Errorf("%s: two waves of %d requests opened %d connections, want %d", name, inFlight, n, inFlight)
		}
	}
}

// envConfigClient is LoadEnvConfig's HTTP client.
func envConfigClient(t *testing.T) aws.HTTPClient {
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "AKID")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "SECRET")
	cfg, err := awsclient.LoadEnvConfig(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return cfg.HTTPClient
}

// TestLoadConfigKeepsConnections: LoadConfig's HTTP client is the SDK's
// with HTTPClient's pool sizes.
func TestLoadConfigKeepsConnections(t *testing.T) {
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "AKID")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "SECRET")
	cfg, err := awsclient.LoadConfig(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b, ok := cfg.HTTPClient.(*awshttp.BuildableClient)
	if !ok {
		t.Fatalf("HTTP client %T, want the SDK's BuildableClient", cfg.HTTPClient)
	}
	if tr := b.GetTransport(); tr.MaxIdleConnsPerHost != awsclient.MaxIdleConnsPerHost || tr.MaxIdleConns != awsclient.MaxIdleConns {
		t.Errorf("idle connections %d per host, %d in all; want %d and %d", tr.MaxIdleConnsPerHost, tr.MaxIdleConns,
			awsclient.MaxIdleConnsPerHost, awsclient.MaxIdleConns)
	}
}
