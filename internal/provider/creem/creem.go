// Package creem is billing's Creem driver: it verifies creem-signature,
// reads Creem's events (checkout.completed, refunds, disputes) and opens
// checkouts through Creem's REST API (it has no Go library), with one
// net/http client whose every call goes through one retry policy. Creem's
// API lists no events (ListEvents is provider.ErrNoListing) and refunds are
// not automated.
//
// The payment is Creem's order (the checkout's id when an event has none);
// the checkout is an alias.
package creem

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/fibe-dev/billing/internal/provider"
)

// Name is the provider's name.
const Name = provider.Creem

// DefaultAPIURL is Creem's API (its test mode is https://test-api.creem.io).
const DefaultAPIURL = "https://api.creem.io"

// Driver is the Creem driver.
type Driver struct {
	opts    provider.Options
	baseURL string
	client  *http.Client
	policy  *provider.Policy
}

// New returns a Creem driver; o.APIURL "" is DefaultAPIURL.
func New(o provider.Options) *Driver {
	url := o.APIURL
	if url == "" {
		url = DefaultAPIURL
	}
	support := provider.Support{Provider: Name, Secrets: len(o.WebhookSecrets) > 0, APIKey: o.APIKey != "",
		NoListing: true, NoRefunds: true}
	return &Driver{opts: o, baseURL: strings.TrimRight(url, "/"), client: o.Client(),
		policy: provider.NewPolicy(support, o.Retry, classify)}
}

// Name implements provider.Provider.
func (d *Driver) Name() string { return Name }

// Available implements provider.Provider.
func (d *Driver) Available(c provider.Capability) error { return d.policy.Available(c) }

// ListEvents implements provider.Provider: Creem's API has no event
// listing, so its lost webhooks cannot be recovered by reconciliation.
func (d *Driver) ListEvents(context.Context, time.Time, func(string, []byte) error) error {
	return d.Available(provider.Listing)
}

// Refund implements provider.Provider: Creem refunds are not automated.
func (d *Driver) Refund(context.Context, provider.RefundRequest) (string, error) {
	return "", d.Available(provider.Refunds)
}

// classify is the policy's reading of a failure of do: do classifies
// every answer itself, so what is left (a request we could not build) is
// final.
func classify(err error) error { return err }

// do calls the API once: network errors, 429 and 5xx are transient, other
// 4xx Creem's refusal, and an answer we cannot read transient too.
func (d *Driver) do(ctx context.Context, method, path string, body, dst any) error {
	req, err := d.request(ctx, method, path, body)
	if err != nil {
		return err
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return provider.Transient(fmt.Errorf("creem: %s %s: %w", method, path, err), 0)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch {
	case err != nil:
		return provider.Transient(fmt.Errorf("creem: read answer: %w", err), 0)
	case provider.TransientStatus(resp.StatusCode):
		return provider.Transient(fmt.Errorf("creem: %s %s: %s", method, path, resp.Status), provider.RetryAfter(resp.Header))
	case resp.StatusCode >= 400:
		return &provider.RejectedError{Provider: Name, Status: resp.StatusCode, Message: message(raw)}
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return provider.Transient(fmt.Errorf("creem: decode %s answer: %w", path, err), 0)
	}
	return nil
}

func (d *Driver) request(ctx context.Context, method, path string, body any) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("creem: encode: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, d.baseURL+path, rd)
	if err != nil {
		return nil, fmt.Errorf("creem: %w", err)
	}
	req.Header.Set("x-api-key", d.opts.APIKey)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}

// message extracts Creem's error message, or the body's start.
func message(raw []byte) string {
	var e struct {
		Message any    `json:"message"`
		Error   string `json:"error"`
	}
	if json.Unmarshal(raw, &e) == nil && e.Message != nil {
		return fmt.Sprint(e.Message)
	}
	if e.Error != "" {
		return e.Error
	}
	return string(raw[:min(len(raw), 200)])
}

// SignatureHeader carries Creem's signature (sent as creem-signature; HTTP
// headers are case-insensitive).
const SignatureHeader = "Creem-Signature"

// Verify implements provider.Provider: `creem-signature: <hex>`, an
// HMAC-SHA256 of the body under any secret. Creem signs no timestamp: the
// (provider, event id) claim is the only replay defence, and it is enough
// because a replay is then a duplicate.
func (d *Driver) Verify(h http.Header, body []byte, _ time.Time) error {
	sig, err := ParseHeader(h.Get(SignatureHeader))
	if err != nil {
		return err
	}
	if !provider.MatchHMAC(d.opts.WebhookSecrets, [][]byte{sig}, "", body) {
		return provider.ErrBadSignature
	}
	return nil
}

// ParseHeader parses a creem-signature value: one hex HMAC-SHA256.
func ParseHeader(value string) ([]byte, error) { return provider.ParseHexMAC(value) }
