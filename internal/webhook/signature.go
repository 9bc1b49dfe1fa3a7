package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fibe-dev/billing/internal/hmacsig"
)

// Signature errors. The handler maps each to a 400 with a stable code.
var (
	ErrMissingSignature   = errors.New("webhook: missing signature header")
	ErrMalformedSignature = errors.New("webhook: malformed signature header")
	ErrBadSignature       = errors.New("webhook: signature does not match")
	ErrStaleSignature     = errors.New("webhook: signature timestamp outside the tolerance")
)

// DefaultTolerance is how far a signed timestamp may lie from our clock, in
// either direction (Stripe's own default for old timestamps).
const DefaultTolerance = 300 * time.Second

// Header names of each provider's signature.
const (
	HeaderStripe = "Stripe-Signature"
	HeaderPaddle = "Paddle-Signature"
	HeaderCreem  = "Creem-Signature" // sent as creem-signature; HTTP headers are case-insensitive
)

// Verifier checks one provider's signature over the raw body.
type Verifier interface {
	Verify(h http.Header, body []byte, now time.Time) error
}

// StripeVerifier checks `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>...]`,
// an HMAC-SHA256 of "<t>.<body>". Any v1 may match any secret (rotation).
type StripeVerifier struct {
	Secrets   []string
	Tolerance time.Duration // 0 means DefaultTolerance
}

// Verify implements Verifier.
func (v StripeVerifier) Verify(h http.Header, body []byte, now time.Time) error {
	ts, sigs, err := ParseStripeHeader(h.Get(HeaderStripe))
	if err != nil {
		return err
	}
	if !anyMatch(v.Secrets, sigs, ts.Literal+".", body) {
		return ErrBadSignature
	}
	return checkTimestamp(ts, now, v.Tolerance)
}

// PaddleVerifier checks `Paddle-Signature: ts=<unix>;h1=<hex>[;h1=<hex>...]`,
// an HMAC-SHA256 of "<ts>:<body>".
type PaddleVerifier struct {
	Secrets   []string
	Tolerance time.Duration // 0 means DefaultTolerance
}

// Verify implements Verifier.
func (v PaddleVerifier) Verify(h http.Header, body []byte, now time.Time) error {
	ts, sigs, err := ParsePaddleHeader(h.Get(HeaderPaddle))
	if err != nil {
		return err
	}
	if !anyMatch(v.Secrets, sigs, ts.Literal+":", body) {
		return ErrBadSignature
	}
	return checkTimestamp(ts, now, v.Tolerance)
}

// CreemVerifier checks `creem-signature: <hex>`, an HMAC-SHA256 of the body.
// Creem signs no timestamp: the (provider, event id) claim is the only
// replay defence, and it is enough because a replay is then a duplicate.
type CreemVerifier struct {
	Secrets []string
}

// Verify implements Verifier.
func (v CreemVerifier) Verify(h http.Header, body []byte, _ time.Time) error {
	sig, err := ParseCreemHeader(h.Get(HeaderCreem))
	if err != nil {
		return err
	}
	if !anyMatch(v.Secrets, [][]byte{sig}, "", body) {
		return ErrBadSignature
	}
	return nil
}

// maxSignatures bounds the work one header can ask for.
const maxSignatures = 8

// Timestamp is a signature header's timestamp: the text the provider
// signed, exactly as the header spells it, and the time it names.
type Timestamp struct {
	Literal string
	Unix    int64
}

// ParseStripeHeader parses a Stripe-Signature value. Unknown schemes (v0)
// and undecodable v1 values are skipped, as Stripe's own library does.
func ParseStripeHeader(value string) (ts Timestamp, sigs [][]byte, err error) {
	return parseTimestamped(value, ",", "t", "v1")
}

// ParsePaddleHeader parses a Paddle-Signature value.
func ParsePaddleHeader(value string) (ts Timestamp, sigs [][]byte, err error) {
	return parseTimestamped(value, ";", "ts", "h1")
}

func parseTimestamped(value, sep, tsKey, sigKey string) (Timestamp, [][]byte, error) {
	value = strings.TrimSpace(value)
	if value == "" {
		return Timestamp{}, nil, ErrMissingSignature
	}
	ts := Timestamp{Unix: -1}
	var sigs [][]byte
	for _, part := range strings.Split(value, sep) {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return Timestamp{}, nil, fmt.Errorf("%w: %q is not key=value", ErrMalformedSignature, truncate(part))
		}
		switch k {
		case tsKey:
			n, err := parseUnix(v)
			if err != nil || ts.Unix != -1 {
				return Timestamp{}, nil, fmt.Errorf("%w: bad or repeated %s", ErrMalformedSignature, tsKey)
			}
			ts = Timestamp{Literal: v, Unix: n}
		case sigKey:
			if sig, err := hex.DecodeString(v); err == nil && len(sig) == sha256.Size && len(sigs) < maxSignatures {
				sigs = append(sigs, sig)
			}
		}
	}
	if ts.Unix == -1 {
		return Timestamp{}, nil, fmt.Errorf("%w: no %s", ErrMalformedSignature, tsKey)
	}
	if len(sigs) == 0 {
		return Timestamp{}, nil, fmt.Errorf("%w: no valid %s", ErrMalformedSignature, sigKey)
	}
	return ts, sigs, nil
}

// parseUnix reads a timestamp spelled as providers spell it: decimal
// digits only (no sign, no space, no leading zero), so one instant has one
// spelling and the signature is checked over the very text that was signed.
func parseUnix(s string) (int64, error) {
	if s == "" || len(s) > 19 || (len(s) > 1 && s[0] == '0') || strings.ContainsFunc(s, notDigit) {
		return 0, strconv.ErrSyntax
	}
	return strconv.ParseInt(s, 10, 64)
}

func notDigit(r rune) bool { return r < '0' || r > '9' }

// ParseCreemHeader parses a creem-signature value: one hex HMAC-SHA256.
func ParseCreemHeader(value string) ([]byte, error) {
	value = strings.TrimSpace(value)
	if value == "" {
		return nil, ErrMissingSignature
	}
	sig, err := hex.DecodeString(value)
	if err != nil || len(sig) != sha256.Size {
		return nil, fmt.Errorf("%w: want 64 hex digits", ErrMalformedSignature)
	}
	return sig, nil
}

// anyMatch reports whether any sig is the HMAC of prefix+body under any
// secret. hmac.Equal compares in constant time; returning on the first
// match reveals only which secret is current, not any secret's bytes.
func anyMatch(secrets []string, sigs [][]byte, prefix string, body []byte) bool {
	for _, secret := range secrets {
		want := hmacsig.Sum(secret, prefix, body)
		for _, sig := range sigs {
			if hmac.Equal(sig, want) {
				return true
			}
		}
	}
	return false
}

// checkTimestamp rejects a signature made too long ago (a replay) or too
// far ahead (a clock we should not trust), after the MAC has matched.
func checkTimestamp(ts Timestamp, now time.Time, tolerance time.Duration) error {
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	skew := now.Sub(time.Unix(ts.Unix, 0))
	if skew > tolerance || skew < -tolerance {
		return fmt.Errorf("%w: signed at %d, %s from now", ErrStaleSignature, ts.Unix, skew.Round(time.Second))
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 32 {
		return s[:32] + "..."
	}
	return s
}
