package provider

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

	"github.com/fibe-dev/billing/internal/platform/hmacsig"
)

// Signature errors. The intake answers each with a 400 and a stable code.
var (
	ErrMissingSignature   = errors.New("provider: missing signature header")
	ErrMalformedSignature = errors.New("provider: malformed signature header")
	ErrBadSignature       = errors.New("provider: signature does not match")
	ErrStaleSignature     = errors.New("provider: signature timestamp outside the tolerance")
)

// DefaultTolerance is how far a signed timestamp may lie from our clock, in
// either direction (Stripe's own default for old timestamps).
const DefaultTolerance = 300 * time.Second

// MaxSignatures bounds the work one header can ask for.
const MaxSignatures = 8

// Timestamp is a signature header's timestamp: the text the provider
// signed, exactly as the header spells it, and the time it names.
type Timestamp struct {
	Literal string
	Unix    int64
}

// Header describes a timestamped signature header,
// "<TS>=<unix><Sep><Sig>=<hex>[<Sep><Sig>=<hex>...]", each <hex> an
// HMAC-SHA256 of "<unix><Join><body>".
type Header struct {
	Sep, TS, Sig, Join string
}

// Parse parses a header value. Other keys (Stripe's v0) and undecodable
// signatures are skipped, as Stripe's own library does.
func (f Header) Parse(value string) (Timestamp, [][]byte, error) {
	value = strings.TrimSpace(value)
	if value == "" {
		return Timestamp{}, nil, ErrMissingSignature
	}
	ts := Timestamp{Unix: -1}
	var sigs [][]byte
	for _, part := range strings.Split(value, f.Sep) {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return Timestamp{}, nil, fmt.Errorf("%w: %q is not key=value", ErrMalformedSignature, Truncate(part))
		}
		switch k {
		case f.TS:
			n, err := parseUnix(v)
			if err != nil || ts.Unix != -1 {
				return Timestamp{}, nil, fmt.Errorf("%w: bad or repeated %s", ErrMalformedSignature, f.TS)
			}
			ts = Timestamp{Literal: v, Unix: n}
		case f.Sig:
			if sig, err := hex.DecodeString(v); err == nil && len(sig) == sha256.Size && len(sigs) < MaxSignatures {
				sigs = append(sigs, sig)
			}
		}
	}
	if ts.Unix == -1 {
		return Timestamp{}, nil, fmt.Errorf("%w: no %s", ErrMalformedSignature, f.TS)
	}
	if len(sigs) == 0 {
		return Timestamp{}, nil, fmt.Errorf("%w: no valid %s", ErrMalformedSignature, f.Sig)
	}
	return ts, sigs, nil
}

// Verify checks value, a header of this shape: any signature may match
// any secret; then the timestamp must lie within tolerance of now.
func (f Header) Verify(value string, secrets []string, body []byte, now time.Time, tolerance time.Duration) error {
	ts, sigs, err := f.Parse(value)
	if err != nil {
		return err
	}
	if !MatchHMAC(secrets, sigs, ts.Literal+f.Join, body) {
		return ErrBadSignature
	}
	return CheckTimestamp(ts, now, tolerance)
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

// ParseHexMAC parses a header value that is one hex HMAC-SHA256.
func ParseHexMAC(value string) ([]byte, error) {
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

// MatchHMAC reports whether any sig is the HMAC of prefix+body under any
// secret. hmac.Equal compares in constant time; returning on the first
// match reveals only which secret is current, not any secret's bytes.
func MatchHMAC(secrets []string, sigs [][]byte, prefix string, body []byte) bool {
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

// CheckTimestamp rejects a signature made too long ago (a replay) or too
// far ahead (a clock we should not trust), after the MAC has matched.
func CheckTimestamp(ts Timestamp, now time.Time, tolerance time.Duration) error {
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	skew := now.Sub(time.Unix(ts.Unix, 0))
	if skew > tolerance || skew < -tolerance {
		return fmt.Errorf("%w: signed at %d, %s from now", ErrStaleSignature, ts.Unix, skew.Round(time.Second))
	}
	return nil
}

// Signed verifies one timestamped header shape (a driver embeds it as its
// Verify): any signature may match any secret (rotation), and the signed
// timestamp must lie within Tolerance of now.
type Signed struct {
	Name      string // the header's name
	Header    Header
	Secrets   []string
	Tolerance time.Duration // 0 is DefaultTolerance
}

// Verify implements Provider.Verify.
func (s Signed) Verify(h http.Header, body []byte, now time.Time) error {
	return s.Header.Verify(h.Get(s.Name), s.Secrets, body, now, s.Tolerance)
}
