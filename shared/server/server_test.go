package server

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/qasync/qasync/shared/config"
)

// TestServeClosesSlowBodyWithinReadTimeout: a client that sends its
// headers and then trickles the body (one byte every 50 ms of a 1 MiB
// body, 14 hours of it) has its connection closed by the qasync serve
// server, not before http.read-timeout has passed, instead of holding it
// open until the body is complete. How long after the timeout the close
// comes is the machine's business: the test's own bound only stops a
// server that never closes.
func TestServeClosesSlowBodyWithinReadTimeout(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	cfg.HTTPReadTimeout, cfg.HTTPWriteTimeout = 400*time.Millisecond, time.Second
	srv := newServer(cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, "body not read", http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	start := time.Now() // before the dial: the server's read timeout starts once it has the connection
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/pipelines/x/executions HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", 1<<20)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				if _, err := conn.Write([]byte(" ")); err != nil {
					return
				}
			}
		}
	}()
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Minute)) // the test's own bound
	_, err = io.Copy(io.Discard, conn)                        // until the server closes the connection
	elapsed := time.Since(start)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the server kept the trickling connection open for %v", elapsed)
	}
	if elapsed < cfg.HTTPReadTimeout-50*time.Millisecond {
		t.Fatalf("connection closed after %v, before the read timeout %v", elapsed, cfg.HTTPReadTimeout)
	}
}

// TestServeServerTimeoutsFromConfig: every timeout of the server comes
// from its key, and the defaults bound each phase of a connection.
func TestServeServerTimeoutsFromConfig(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	srv := newServer(cfg, http.NotFoundHandler())
	if srv.ReadHeaderTimeout != 10*time.Second || srv.ReadTimeout != time.Minute || srv.WriteTimeout != 90*time.Second || srv.IdleTimeout != 2*time.Minute {
		t.Fatalf("timeouts header %v read %v write %v idle %v", srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout)
	}
	// The default read timeout lets the default largest body arrive at
	// 0.1 MiB/s.
	if rate := float64(cfg.MaxBodyBytes) / srv.ReadTimeout.Seconds(); rate > 0.1*(1<<20) {
		t.Fatalf("a max-size body needs %.0f B/s within the read timeout", rate)
	}
}
