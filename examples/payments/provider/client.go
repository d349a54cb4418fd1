package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Client calls the provider's API at BaseURL.
type Client struct {
	// BaseURL is the API's root, e.g. http://127.0.0.1:8090.
	BaseURL string
	// HTTP defaults to http.DefaultClient.
	HTTP *http.Client
}

// Create creates (and charges) the payment r under key, or returns the
// payment created earlier under key without charging again.
func (c *Client) Create(ctx context.Context, key string, r CreateRequest) (Payment, error) {
	var p Payment
	err := c.do(ctx, "create", http.MethodPost, "/v1/payments", map[string]string{HeaderIdempotencyKey: key}, r, &p,
		http.StatusCreated, http.StatusOK)
	return p, err
}

// Find returns the payment created under key; found is false when none
// was.
func (c *Client) Find(ctx context.Context, key string) (p Payment, found bool, err error) {
	err = c.do(ctx, "find", http.MethodGet, "/v1/payments?idempotencyKey="+url.QueryEscape(key), nil, nil, &p, http.StatusOK)
	var se *StatusError
	if errors.As(err, &se) && se.Code == http.StatusNotFound {
		return Payment{}, false, nil
	}
	return p, err == nil, err
}

// RegisterCallback asks the provider to report payment id's settlement
// to cb. Registering the same callback again changes nothing; another
// one replaces it.
func (c *Client) RegisterCallback(ctx context.Context, id string, cb Callback) error {
	return c.do(ctx, "register callback", http.MethodPost, "/v1/payments/"+url.PathEscape(id)+"/callbacks", nil, cb, nil,
		http.StatusAccepted, http.StatusOK)
}

// do sends one request and decodes a successful answer (one of ok) into
// out; any other answer is a *StatusError.
func (c *Client) do(ctx context.Context, op, method, path string, header map[string]string, body, out any, ok ...int) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("provider: %s: encode request: %w", op, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.BaseURL, "/")+path, rd)
	if err != nil {
		return fmt.Errorf("provider: %s: %w", op, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("provider: %s: %w", op, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("provider: %s: read answer: %w", op, err)
	}
	for _, code := range ok {
		if resp.StatusCode != code {
			continue
		}
		if out == nil {
			return nil
		}
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("provider: %s: decode answer: %w", op, err)
		}
		return nil
	}
	msg := strings.TrimSpace(string(raw))
	if len(msg) > 200 {
		msg = msg[:200]
	}
	return &StatusError{Op: op, Code: resp.StatusCode, Message: msg}
}
