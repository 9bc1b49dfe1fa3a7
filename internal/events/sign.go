package events

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fibe-dev/billing/internal/platform/hmacsig"
)

// Signature is the webhook-signature header of body sent as id at ts,
// signed with each secret ("whsec_" and the key in base64): one "v1,"
// signature per secret, space-separated (Standard Webhooks).
func Signature(id string, ts time.Time, body []byte, secrets ...string) (string, error) {
	sigs := make([]string, 0, len(secrets))
	for _, s := range secrets {
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
		if err != nil {
			return "", fmt.Errorf("events: a signing secret is not whsec_ and base64: %w", err)
		}
		mac := hmacsig.Sum(string(key), id+"."+strconv.FormatInt(ts.Unix(), 10)+".", body)
		sigs = append(sigs, "v1,"+base64.StdEncoding.EncodeToString(mac))
	}
	return strings.Join(sigs, " "), nil
}

// signingSecrets are the secrets e signs with at now: its own, and the
// previous one while the rotation's grace lasts.
func (e *Endpoint) signingSecrets(now time.Time) []string {
	if e.previous != "" && e.PreviousSecretUntil != nil && now.Before(*e.PreviousSecretUntil) {
		return []string{e.secret, e.previous}
	}
	return []string{e.secret}
}
