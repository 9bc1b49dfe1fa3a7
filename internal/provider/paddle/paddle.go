// Package paddle is billing's Paddle Billing driver: it verifies
// Paddle-Signature, reads Paddle's events (transaction.completed,
// adjustments), opens transactions (their checkout URL) and lists the
// events API, through one paddle-go-sdk client whose every call goes
// through one retry policy. Refunds are not automated: an unapplied Paddle
// payment is left for an operator.
//
// The payment is the transaction; a chargeback and its reversal are one
// dispute per transaction, keyed ChargebackID.
package paddle

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	paddleapi "github.com/PaddleHQ/paddle-go-sdk/v4"
	"github.com/PaddleHQ/paddle-go-sdk/v4/pkg/paddleerr"

	"github.com/fibe-dev/billing/internal/provider"
)

// Name is the provider's name.
const Name = provider.Paddle

// Driver is the Paddle driver.
type Driver struct {
	sdk    *paddleapi.SDK
	policy *provider.Policy
	signed provider.Signed
}

// New returns a Paddle driver; o.APIURL "" is Paddle's production API.
func New(o provider.Options) *Driver {
	url := o.APIURL
	if url == "" {
		url = paddleapi.ProductionBaseURL
	}
	// The SDK's HTTP doer turns network errors, 429 and 5xx into
	// transient errors before the SDK decodes them (its error type does
	// not keep the status).
	sdk, err := paddleapi.New(o.APIKey, paddleapi.WithBaseURL(url), paddleapi.WithClient(transientDoer{o.Client()}))
	support := provider.Support{Provider: Name, Secrets: len(o.WebhookSecrets) > 0, APIKey: o.APIKey != "",
		NoRefunds: true, Err: err}
	return &Driver{sdk: sdk, policy: provider.NewPolicy(support, o.Retry, classify),
		signed: provider.Signed{Name: SignatureHeader, Header: header, Secrets: o.WebhookSecrets, Tolerance: o.Tolerance}}
}

// Name implements provider.Provider.
func (d *Driver) Name() string { return Name }

// Available implements provider.Provider.
func (d *Driver) Available(c provider.Capability) error { return d.policy.Available(c) }

// classify is the policy's reading of a paddle-go-sdk error: Paddle's
// error answer (a 4xx: 429 and 5xx never reach the SDK) is its refusal;
// anything else, an answer we could not read, is worth another attempt.
func classify(err error) error {
	var pe *paddleerr.Error
	if errors.As(err, &pe) {
		msg := pe.Detail
		if msg == "" {
			msg = pe.Code
		}
		return &provider.RejectedError{Provider: Name, Status: pe.Status, Message: msg}
	}
	return provider.Transient(err, 0)
}

// transientDoer is the SDK's HTTP doer: network errors, 429 and 5xx become
// transient errors carrying the provider's Retry-After.
type transientDoer struct{ c *http.Client }

func (d transientDoer) Do(req *http.Request) (*http.Response, error) {
	resp, err := d.c.Do(req)
	if err != nil {
		return nil, provider.Transient(err, 0)
	}
	if provider.TransientStatus(resp.StatusCode) {
		resp.Body.Close()
		return nil, provider.Transient(fmt.Errorf("%s %s: %s", req.Method, req.URL.Path, resp.Status), provider.RetryAfter(resp.Header))
	}
	return resp, nil
}

// Refund implements provider.Provider: Paddle refunds are not automated.
func (d *Driver) Refund(context.Context, provider.RefundRequest) (string, error) {
	return "", d.Available(provider.Refunds)
}

// SignatureHeader carries Paddle's signature.
const SignatureHeader = "Paddle-Signature"

// header is `Paddle-Signature: ts=<unix>;h1=<hex>[;h1=<hex>...]`, each h1 an
// HMAC-SHA256 of "<ts>:<body>".
var header = provider.Header{Sep: ";", TS: "ts", Sig: "h1", Join: ":"}

// Verify implements provider.Provider: any h1 may match any secret
// (rotation), and ts must lie within the tolerance of now.
func (d *Driver) Verify(h http.Header, body []byte, now time.Time) error {
	return d.signed.Verify(h, body, now)
}

// ParseHeader parses a Paddle-Signature value.
func ParseHeader(value string) (provider.Timestamp, [][]byte, error) { return header.Parse(value) }
