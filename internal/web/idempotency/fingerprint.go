package idempotency

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/go-json-experiment/json/jsontext"
)

// fingerprintV2 is the version byte that starts a stored fingerprint of the
// canonical form. Fingerprints stored before it (32 bytes, no version) are
// the hash of the exact bytes; both kinds stay comparable for their 24 h.
const fingerprintV2 = 2

// Fingerprint identifies a request for the replay cache: the same method,
// path and body in canonical JSON form (see Canonical) make the same
// fingerprint, however the body was spelled.
type Fingerprint struct {
	stored []byte // what Begin stores for a new key: the version, then the hash of the canonical form
	exact  []byte // the hash of the exact bytes, as keys stored before canonical forms were compared it
}

// NewFingerprint fingerprints a request.
func NewFingerprint(method, path string, body []byte) Fingerprint {
	form, kind := Canonical(body), byte('c')
	if form == nil {
		form, kind = body, 'r' // not one JSON value: compared as the bytes sent
	}
	h := sha256.New()
	fmt.Fprintf(h, "billing-idempotency-v2\x00%s\x00%s\x00%c", method, path, kind)
	sum := sha256.Sum256(form)
	h.Write(sum[:])
	return Fingerprint{stored: append([]byte{fingerprintV2}, h.Sum(nil)...), exact: exactFingerprint(method, path, body)}
}

// exactFingerprint is the fingerprint of keys stored before canonical
// forms: method, path and the hash of the body's exact bytes.
func exactFingerprint(method, path string, body []byte) []byte {
	bodySum := sha256.Sum256(body)
	h := sha256.New()
	h.Write([]byte(method))
	h.Write([]byte{0})
	h.Write([]byte(path))
	h.Write([]byte{0})
	h.Write(bodySum[:])
	return h.Sum(nil)
}

// matches reports whether a stored fingerprint is this request's. A key
// stored before canonical forms holds only the hash of its exact bytes: it
// matches a byte-for-byte retry, not a re-spelled one.
func (f Fingerprint) matches(stored []byte) bool {
	if len(stored) == sha256.Size+1 && stored[0] == fingerprintV2 {
		return bytes.Equal(stored, f.stored)
	}
	return bytes.Equal(stored, f.exact)
}

// Canonical is body in canonical JSON form, or nil when body is not exactly
// one JSON value (invalid JSON or UTF-8, a duplicate member name, trailing
// data: the handler refuses those, and the cache compares their bytes).
// An empty or all-whitespace body is the empty form.
//
// The form removes insignificant whitespace, sorts object members by name
// (the bytes of the unescaped UTF-8 name), and writes every string with
// the same minimal escaping, so {"mana": 5} and {"mana":5}, or "\u0041"
// and "A", are one request. Numbers stay as written: 5, 5.0 and 5e0 differ,
// since converting them (as RFC 8785 does, through float64) would make
// distinct large integers look equal.
func Canonical(body []byte) []byte {
	if len(bytes.TrimSpace(body)) == 0 {
		return []byte{}
	}
	dec := jsontext.NewDecoder(bytes.NewReader(body))
	out, err := appendCanonical(nil, dec)
	if err != nil {
		return nil
	}
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		return nil
	}
	return out
}

// member is one object member in canonical form.
type member struct {
	name  string
	value []byte
}

// appendCanonical appends the canonical form of the next value of dec.
func appendCanonical(out []byte, dec *jsontext.Decoder) ([]byte, error) {
	tok, err := dec.ReadToken()
	if err != nil {
		return nil, err
	}
	switch tok.Kind() {
	case '{':
		var ms []member
		for dec.PeekKind() != '}' {
			tok, err := dec.ReadToken()
			if err != nil {
				return nil, err
			}
			name := tok.String() // before the next read invalidates tok
			v, err := appendCanonical(nil, dec)
			if err != nil {
				return nil, err
			}
			ms = append(ms, member{name: name, value: v})
		}
		if _, err := dec.ReadToken(); err != nil {
			return nil, err
		}
		return appendObject(out, ms)
	case '[':
		out = append(out, '[')
		for i := 0; dec.PeekKind() != ']'; i++ {
			if i > 0 {
				out = append(out, ',')
			}
			if out, err = appendCanonical(out, dec); err != nil {
				return nil, err
			}
		}
		if _, err := dec.ReadToken(); err != nil {
			return nil, err
		}
		return append(out, ']'), nil
	case '"':
		return jsontext.AppendQuote(out, tok.String())
	default: // numbers as written, true, false, null
		return append(out, tok.String()...), nil
	}
}

func appendObject(out []byte, ms []member) ([]byte, error) {
	sort.Slice(ms, func(i, j int) bool { return ms[i].name < ms[j].name })
	out = append(out, '{')
	for i, m := range ms {
		if i > 0 {
			out = append(out, ',')
		}
		var err error
		if out, err = jsontext.AppendQuote(out, m.name); err != nil {
			return nil, err
		}
		out = append(append(out, ':'), m.value...)
	}
	return append(out, '}'), nil
}
