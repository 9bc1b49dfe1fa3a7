package fibe

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The headers of an event delivery, per the Standard Webhooks specification.
const (
	HeaderWebhookID        = "webhook-id"
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"
)

// DefaultWebhookTolerance is how far a delivery's webhook-timestamp may be
// from the receiver's clock, either way, before Verify refuses it as a
// possible replay.
const DefaultWebhookTolerance = 5 * time.Minute

// Limits of the signature header: a delivery carries one signature per
// secret in use (two during a rotation), so these bound the work an
// attacker can make the verifier do without refusing a real one.
const (
	maxSignatures      = 16
	maxSignatureHeader = 4 << 10
	maxWebhookID       = 255
)

// Errors of Verify and NewWebhookVerifier; test with errors.Is. Each is
// the receiver's cue to answer 4xx and apply nothing: a delivery billing
// signed never fails with them while the secret is right and the clocks
// agree.
var (
	// ErrInvalidSecret: the secret is not "whsec_" and base64.
	ErrInvalidSecret = errors.New("fibe: invalid webhook secret")
	// ErrMissingHeader: webhook-id, webhook-timestamp or
	// webhook-signature is absent or empty.
	ErrMissingHeader = errors.New("fibe: missing webhook header")
	// ErrMalformedHeader: a header is present but not in its format (a
	// timestamp that is not plain decimal seconds, a signature that is not
	// "v1,<base64>", a header sent twice).
	ErrMalformedHeader = errors.New("fibe: malformed webhook header")
	// ErrStaleTimestamp: webhook-timestamp is further from now than the
	// tolerance (an old delivery replayed, or a clock far off).
	ErrStaleTimestamp = errors.New("fibe: webhook timestamp outside the tolerance")
	// ErrSignatureMismatch: no v1 signature matches the secret (a wrong
	// secret, or a body, id or timestamp changed in transit).
	ErrSignatureMismatch = errors.New("fibe: no webhook signature matches")
	// ErrMalformedEvent: the signed body is not an event envelope.
	ErrMalformedEvent = errors.New("fibe: malformed event body")
	// ErrIDMismatch: the body's id is not the webhook-id header.
	ErrIDMismatch = errors.New("fibe: event id differs from webhook-id")
)

// WebhookVerifier checks deliveries of billing's events against an
// endpoint's signing secret. It is safe for concurrent use.
type WebhookVerifier struct {
	key       []byte
	tolerance time.Duration
	now       func() time.Time
}

// VerifierOption configures a WebhookVerifier.
type VerifierOption func(*WebhookVerifier)

// WithWebhookTolerance sets how far webhook-timestamp may be from now, either
// way (default DefaultWebhookTolerance). A value <= 0 is ignored.
func WithWebhookTolerance(d time.Duration) VerifierOption {
	return func(v *WebhookVerifier) {
		if d > 0 {
			v.tolerance = d
		}
	}
}

// WithWebhookClock makes the verifier read the time from now (for tests).
func WithWebhookClock(now func() time.Time) VerifierOption {
	return func(v *WebhookVerifier) {
		if now != nil {
			v.now = now
		}
	}
}

// NewWebhookVerifier returns a verifier for the endpoint's signing secret,
// as `billing endpoints add` and `rotate-secret` print it: "whsec_"
// followed by the base64 of the key.
func NewWebhookVerifier(secret string, opts ...VerifierOption) (*WebhookVerifier, error) {
	b64, ok := strings.CutPrefix(secret, "whsec_")
	if !ok {
		return nil, fmt.Errorf("%w: it does not start with whsec_", ErrInvalidSecret)
	}
	key, err := base64.StdEncoding.Strict().DecodeString(b64)
	if err != nil || len(key) == 0 {
		return nil, fmt.Errorf("%w: the part after whsec_ is not base64", ErrInvalidSecret)
	}
	v := &WebhookVerifier{key: key, tolerance: DefaultWebhookTolerance, now: time.Now}
	for _, o := range opts {
		o(v)
	}
	return v, nil
}

// Verify checks one delivery, its headers and its raw body exactly as
// received (read the body before any JSON decoding: a re-encoded body no
// longer matches its signature), and returns its event. It refuses, with
// one of the errors above: a missing or malformed header, a timestamp
// outside the tolerance, a delivery no v1 signature of which matches (any
// one of several may: billing signs with the old and the new secret during
// a rotation), and a body that is not an event or whose id is not the
// webhook-id header.
//
// A delivery that verifies may still be one you applied before: billing
// sends at least once. Deduplicate on Event.ID.
func (v *WebhookVerifier) Verify(header http.Header, body []byte) (*Event, error) {
	id, ts, sigs, err := v.readHeaders(header)
	if err != nil {
		return nil, err
	}
	if err := v.checkSignature(id, ts, sigs, body); err != nil {
		return nil, err
	}
	var ev Event
	if err := json.Unmarshal(body, &ev); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformedEvent, err)
	}
	if ev.Type == "" || len(ev.Data) == 0 {
		return nil, fmt.Errorf("%w: no type or no data", ErrMalformedEvent)
	}
	if ev.ID != id {
		return nil, fmt.Errorf("%w: body %q, header %q", ErrIDMismatch, ev.ID, id)
	}
	return &ev, nil
}

// readHeaders returns the delivery's id, its timestamp as sent, and its
// signatures' fields; a timestamp outside the tolerance is an error.
func (v *WebhookVerifier) readHeaders(header http.Header) (string, string, []string, error) {
	var vals [3]string
	for i, name := range []string{HeaderWebhookID, HeaderWebhookTimestamp, HeaderWebhookSignature} {
		all := header.Values(name)
		switch {
		case len(all) == 0 || all[0] == "":
			return "", "", nil, fmt.Errorf("%w: %s", ErrMissingHeader, name)
		case len(all) > 1:
			return "", "", nil, fmt.Errorf("%w: %s sent %d times", ErrMalformedHeader, name, len(all))
		}
		vals[i] = all[0]
	}
	id, ts, sig := vals[0], vals[1], vals[2]
	if !validWebhookID(id) {
		return "", "", nil, fmt.Errorf("%w: %s is not 1 to %d printable ASCII characters", ErrMalformedHeader, HeaderWebhookID, maxWebhookID)
	}
	sent, err := parseTimestamp(ts)
	if err != nil {
		return "", "", nil, err
	}
	if d := v.now().Sub(sent); d > v.tolerance || d < -v.tolerance {
		return "", "", nil, fmt.Errorf("%w: %s is %s from now (tolerance %s)", ErrStaleTimestamp,
			HeaderWebhookTimestamp, d.Round(time.Second), v.tolerance)
	}
	sigs, err := parseSignatures(sig)
	if err != nil {
		return "", "", nil, err
	}
	return id, ts, sigs, nil
}

// parseTimestamp reads webhook-timestamp: Unix seconds in plain decimal,
// as billing writes them (no sign, space, leading zero, fraction or
// exponent), so that the signed text and the time compared are one value.
func parseTimestamp(ts string) (time.Time, error) {
	bad := len(ts) > 18 || (len(ts) > 1 && ts[0] == '0')
	for i := 0; i < len(ts) && !bad; i++ {
		bad = ts[i] < '0' || ts[i] > '9'
	}
	if bad {
		return time.Time{}, fmt.Errorf("%w: %s %q is not Unix seconds", ErrMalformedHeader, HeaderWebhookTimestamp, ts)
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil { // unreachable after the checks above; kept as a guard
		return time.Time{}, fmt.Errorf("%w: %s: %w", ErrMalformedHeader, HeaderWebhookTimestamp, err)
	}
	return time.Unix(secs, 0), nil
}

// parseSignatures returns the base64 signatures of the v1 entries of
// webhook-signature ("v1,<base64>", space-separated). Entries of another
// version are skipped, as the specification asks, so that a later scheme
// can be sent beside v1.
func parseSignatures(h string) ([]string, error) {
	if len(h) > maxSignatureHeader {
		return nil, fmt.Errorf("%w: %s is longer than %d bytes", ErrMalformedHeader, HeaderWebhookSignature, maxSignatureHeader)
	}
	fields := strings.Split(h, " ")
	if len(fields) > maxSignatures {
		return nil, fmt.Errorf("%w: %s has more than %d signatures", ErrMalformedHeader, HeaderWebhookSignature, maxSignatures)
	}
	var v1 []string
	for _, f := range fields {
		version, sig, ok := strings.Cut(f, ",")
		if !ok || sig == "" || len(version) < 2 || version[0] != 'v' || strings.Trim(version[1:], "0123456789") != "" {
			return nil, fmt.Errorf("%w: %s entry %q is not v<n>,<signature>", ErrMalformedHeader, HeaderWebhookSignature, f)
		}
		if version == "v1" {
			v1 = append(v1, sig)
		}
	}
	return v1, nil
}

// checkSignature compares each v1 signature with the HMAC-SHA256 of
// "id.timestamp.body" under the key, in constant time.
func (v *WebhookVerifier) checkSignature(id, ts string, sigs []string, body []byte) error {
	mac := hmac.New(sha256.New, v.key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	match := false
	for _, s := range sigs {
		got, err := base64.StdEncoding.Strict().DecodeString(s)
		if err == nil && hmac.Equal(got, want) {
			match = true // keep going: the time taken does not say which one matched
		}
	}
	if !match {
		return fmt.Errorf("%w (v1 signatures checked: %d)", ErrSignatureMismatch, len(sigs))
	}
	return nil
}

// validWebhookID: 1 to 255 printable ASCII characters without a space.
func validWebhookID(id string) bool {
	if id == "" || len(id) > maxWebhookID {
		return false
	}
	for i := range len(id) {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}
