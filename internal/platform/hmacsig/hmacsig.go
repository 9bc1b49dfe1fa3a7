// Package hmacsig is the MAC all three payment providers sign webhooks
// with: HMAC-SHA256 of a prefix (the timestamp and its separator, or
// nothing) followed by the body. The drivers verify with it (package
// provider's signature rules), and the development provider and the
// drivers' test kit sign with it.
package hmacsig

import (
	"crypto/hmac"
	"crypto/sha256"
)

// Sum is HMAC-SHA256 of prefix+body under secret.
func Sum(secret, prefix string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(prefix))
	m.Write(body)
	return m.Sum(nil)
}
