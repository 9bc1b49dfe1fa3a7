package timeline

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fibe-dev/billing/internal/platform/dbtx"
)

// LayerAPIKey is the player's API keys: made, rotated, revoked, expired
// (`billing players keys`). A player's timeline only.
const LayerAPIKey = "api_key"

// The line types of LayerAPIKey.
const (
	TypeKeyCreated = "key_created" // a key made on its own (with the player, or by keys create)
	TypeKeyRotated = "key_rotated" // a key made to replace another, which works until its end
	TypeKeyRevoked = "key_revoked" // an operator revoked a key
	TypeKeyExpired = "key_expired" // a rotated key's end passed
)

// maxPlayerKeys bounds the keys a player's timeline tells, the newest.
const maxPlayerKeys = 100

// accessKeyRow is one api_keys row, never the key (only its last four
// characters). Expired is the database's verdict as of the snapshot.
type accessKeyRow struct {
	ID          int64
	CreatedAt   time.Time
	Hint        string
	ExpiresAt   *time.Time
	RevokedAt   *time.Time
	Reason      string
	RotatedFrom int64
	Expired     bool
}

// playerKeysSQL reads the player's newest keys by api_keys_player_id_idx.
const playerKeysSQL = `SELECT id, created_at, coalesce(hint, ''), expires_at, revoked_at, coalesce(revoke_reason, ''),
	coalesce(rotated_from, 0), coalesce(expires_at <= now(), false)
FROM api_keys WHERE player_id = $1 ORDER BY id DESC LIMIT $2`

// addKeyLines adds the player's key events to t, in time order.
func addKeyLines(ctx context.Context, q dbtx.DB, player int64, t *Timeline) error {
	keys, err := collect(ctx, q, "api keys", playerKeysSQL, []any{player, maxPlayerKeys}, func(r pgx.Row) (*accessKeyRow, error) {
		k := &accessKeyRow{}
		return k, r.Scan(&k.ID, &k.CreatedAt, &k.Hint, &k.ExpiresAt, &k.RevokedAt, &k.Reason, &k.RotatedFrom, &k.Expired)
	})
	if err != nil {
		return err
	}
	byID := map[int64]*accessKeyRow{}
	for _, k := range keys {
		byID[k.ID] = k
	}
	for _, k := range keys {
		t.Lines = append(t.Lines, keyLines(k, byID[k.RotatedFrom], player)...)
	}
	sortLines(t.Lines)
	return nil
}

// keyLines are what happened to key k; old is the key it replaced, if
// read.
func keyLines(k, old *accessKeyRow, player int64) []Line {
	line := func(at time.Time, typ, text string) Line {
		return Line{At: at, Layer: LayerAPIKey, Type: typ, Text: text, Refs: Refs{PlayerID: player}}
	}
	name := fmt.Sprintf("API key %d (%s)", k.ID, k.masked())
	out := []Line{line(k.CreatedAt, TypeKeyCreated, name+" created")}
	if k.RotatedFrom != 0 {
		out[0].Type = TypeKeyRotated
		out[0].Text = fmt.Sprintf("%s created to replace key %d", name, k.RotatedFrom)
		if old != nil && old.ExpiresAt != nil {
			out[0].Text += fmt.Sprintf(", which works until %s", minute(*old.ExpiresAt))
		}
	}
	if k.RevokedAt != nil {
		l := line(*k.RevokedAt, TypeKeyRevoked, name+" revoked: it answers 401 from then on")
		if k.Reason != "" {
			l.Details = append(l.Details, "reason: "+k.Reason)
		}
		out = append(out, l)
	}
	if k.Expired && (k.RevokedAt == nil || k.RevokedAt.After(*k.ExpiresAt)) {
		out = append(out, line(*k.ExpiresAt, TypeKeyExpired, name+" expired after its rotation: it answers 401 from then on"))
	}
	return out
}

// masked names a key without showing it: "bk_…1a2b".
func (k *accessKeyRow) masked() string { return "bk_…" + k.Hint }
