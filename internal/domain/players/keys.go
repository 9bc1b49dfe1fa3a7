package players

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fibe-dev/billing/internal/platform/durable"
)

// Key states, as a key is read.
const (
	KeyActive   = "active"   // works, with no end set
	KeyExpiring = "expiring" // rotated: works until ExpiresAt
	KeyExpired  = "expired"  // rotated, and its ExpiresAt has passed
	KeyRevoked  = "revoked"  // refused since RevokedAt
)

// Bounds of how long a rotated key keeps working: long enough to roll the
// new key out, never so long that rotating a leaked key means nothing.
const (
	DefaultOldValidFor = 24 * time.Hour
	MaxOldValidFor     = 30 * 24 * time.Hour
)

// maxReasonLen bounds a revocation's reason (the column's CHECK).
const maxReasonLen = 500

var (
	// ErrPlayerNotFound is a player id nothing is known about.
	ErrPlayerNotFound = errors.New("players: no such player")
	// ErrKeyNotFound is a key id that is not one of the player's keys.
	ErrKeyNotFound = errors.New("players: no such API key for this player")
	// ErrKeyRevoked is a rotation of a revoked key.
	ErrKeyRevoked = errors.New("players: the API key is revoked")
	// ErrKeyRotated is a rotation of a key rotated before: rotate its
	// successor instead.
	ErrKeyRotated = errors.New("players: the API key was rotated already")
	// ErrKeyAmbiguous is a rotation without a key id of a player with
	// several keys that could be meant.
	ErrKeyAmbiguous = errors.New("players: the player has several API keys to rotate; name one")
	// ErrNoKey is a rotation without a key id of a player with no working,
	// unrotated key.
	ErrNoKey = errors.New("players: the player has no working API key to rotate")
	// ErrInvalidValidity is an old key's end before now or too far ahead.
	ErrInvalidValidity = errors.New("players: invalid validity of the old key")
	// ErrInvalidReason is a revocation reason that is too long or not text.
	ErrInvalidReason = errors.New("players: a revocation reason is at most 500 characters of text")
)

// Key is an API key as an operator sees it: never the key itself.
type Key struct {
	ID       int64
	PlayerID int64
	// Hint is the key's last four characters; "" for a key made before
	// hints were kept.
	Hint         string
	State        string
	CreatedAt    time.Time
	ExpiresAt    *time.Time
	RevokedAt    *time.Time
	RevokeReason string
	RotatedFrom  int64 // the key this one replaced; 0: none
	RotatedTo    int64 // the key that replaced this one; 0: none
}

// Masked is how a key is named without being shown: "bk_…1a2b".
func (k Key) Masked() string {
	if k.Hint == "" {
		return keyPrefix + "…"
	}
	return keyPrefix + "…" + k.Hint
}

// hintOf is what is kept of a new key besides its hash.
func hintOf(key string) string { return key[len(key)-4:] }

// keySelect reads keys with their state as of the statement and their
// successor (by api_keys_rotated_from_idx).
const keySelect = `SELECT k.id, k.player_id, coalesce(k.hint, ''),
	CASE WHEN k.revoked_at IS NOT NULL THEN 'revoked' WHEN k.expires_at <= now() THEN 'expired'
		WHEN k.expires_at IS NOT NULL THEN 'expiring' ELSE 'active' END,
	k.created_at, k.expires_at, k.revoked_at, coalesce(k.revoke_reason, ''), coalesce(k.rotated_from, 0), coalesce(n.id, 0)
FROM api_keys k LEFT JOIN api_keys n ON n.rotated_from = k.id`

func scanKey(r pgx.Row) (Key, error) {
	var k Key
	err := r.Scan(&k.ID, &k.PlayerID, &k.Hint, &k.State, &k.CreatedAt, &k.ExpiresAt, &k.RevokedAt, &k.RevokeReason,
		&k.RotatedFrom, &k.RotatedTo)
	return k, err
}

// getKey reads key id of player; ErrKeyNotFound or ErrPlayerNotFound
// when there is none.
func getKey(ctx context.Context, db DB, player, id int64) (Key, error) {
	k, err := scanKey(db.QueryRow(ctx, keySelect+` WHERE k.id = $1 AND k.player_id = $2`, id, player))
	if errors.Is(err, pgx.ErrNoRows) {
		if err := requirePlayer(ctx, db, player); err != nil {
			return Key{}, err
		}
		return Key{}, fmt.Errorf("%w: player %d has no key %d", ErrKeyNotFound, player, id)
	}
	if err != nil {
		return Key{}, fmt.Errorf("players: read key %d: %w", id, err)
	}
	return k, nil
}

func requirePlayer(ctx context.Context, db DB, player int64) error {
	var ok bool
	if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM players WHERE id = $1)`, player).Scan(&ok); err != nil {
		return fmt.Errorf("players: read player %d: %w", player, err)
	}
	if !ok {
		return fmt.Errorf("%w: %d", ErrPlayerNotFound, player)
	}
	return nil
}

// CreateKey gives player a new API key besides the ones it has, and
// returns it in clear: the only time it is shown.
func CreateKey(ctx context.Context, db DB, player int64) (Key, string, error) {
	key, err := NewAPIKey()
	if err != nil {
		return Key{}, "", err
	}
	var id int64
	err = db.QueryRow(ctx, `INSERT INTO api_keys (player_id, key_hash, hint) SELECT id, $2, $3 FROM players WHERE id = $1
		RETURNING id`, player, HashKey(key), hintOf(key)).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return Key{}, "", fmt.Errorf("%w: %d", ErrPlayerNotFound, player)
	}
	if err != nil {
		return Key{}, "", fmt.Errorf("players: create key: %w", err)
	}
	k, err := getKey(ctx, db, player, id)
	return k, key, err
}

// ListKeys returns every key of player, oldest first.
func ListKeys(ctx context.Context, db DB, player int64) ([]Key, error) {
	if err := requirePlayer(ctx, db, player); err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, keySelect+` WHERE k.player_id = $1 ORDER BY k.id`, player)
	if err != nil {
		return nil, fmt.Errorf("players: list keys: %w", err)
	}
	keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Key, error) { return scanKey(r) })
	if err != nil {
		return nil, fmt.Errorf("players: list keys: %w", err)
	}
	return keys, nil
}

// Revoke refuses key id of player from now on: the statement commits on
// its own, and authentication reads the key on every request, so every
// request that starts after Revoke returns is refused (one already past
// its authentication finishes, like any request a moment older). changed
// is false when the key was revoked already (its first revocation stands).
func Revoke(ctx context.Context, db DB, player, id int64, reason string) (k Key, changed bool, err error) {
	reason = strings.TrimSpace(reason)
	if utf8.RuneCountInString(reason) > maxReasonLen || !utf8.ValidString(reason) || strings.ContainsRune(reason, 0) {
		return Key{}, false, ErrInvalidReason
	}
	tag, err := db.Exec(ctx, `UPDATE api_keys SET revoked_at = now(), revoke_reason = nullif($3, '')
		WHERE id = $1 AND player_id = $2 AND revoked_at IS NULL`, id, player, reason)
	if err != nil {
		return Key{}, false, fmt.Errorf("players: revoke key %d: %w", id, err)
	}
	k, err = getKey(ctx, db, player, id)
	return k, tag.RowsAffected() == 1, err
}

// RotateParams says which key to rotate and how long it keeps working.
type RotateParams struct {
	PlayerID int64
	// KeyID is the key to rotate; 0: the player's one working key that
	// was not rotated yet.
	KeyID int64
	// OldValidFor is how long the old key keeps working (0: it stops at
	// once), unless OldValidUntil is set.
	OldValidFor   time.Duration
	OldValidUntil time.Time
}

// Rotation is a rotated key and its successor, with the new key in clear:
// the only time it is shown.
type Rotation struct {
	Old, New Key
	APIKey   string
}

// Rotate makes a successor of a key, ends the old one as p says, and
// commits durably. A key is rotated once: a second rotation of it, even a
// concurrent one, fails with ErrKeyRotated (or ErrNoKey without a key id)
// and changes nothing.
func Rotate(ctx context.Context, pool *pgxpool.Pool, p RotateParams) (Rotation, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return Rotation{}, fmt.Errorf("players: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	r, err := RotateTx(ctx, tx, p)
	if err != nil {
		return Rotation{}, err
	}
	return r, durable.Commit(ctx, tx)
}

// RotateTx is Rotate in the caller's transaction.
func RotateTx(ctx context.Context, tx pgx.Tx, p RotateParams) (Rotation, error) {
	old, err := lockRotatable(ctx, tx, p)
	if err != nil {
		return Rotation{}, err
	}
	until, err := oldKeyEnd(ctx, tx, p)
	if err != nil {
		return Rotation{}, err
	}
	key, err := NewAPIKey()
	if err != nil {
		return Rotation{}, err
	}
	var id int64
	err = tx.QueryRow(ctx, `WITH o AS (UPDATE api_keys SET expires_at = $3 WHERE id = $2)
		INSERT INTO api_keys (player_id, key_hash, hint, rotated_from) VALUES ($1, $4, $5, $2) RETURNING id`,
		p.PlayerID, old, until, HashKey(key), hintOf(key)).Scan(&id)
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.ConstraintName == "api_keys_rotated_from_idx" {
		return Rotation{}, fmt.Errorf("%w: key %d", ErrKeyRotated, old)
	}
	if err != nil {
		return Rotation{}, fmt.Errorf("players: rotate key %d: %w", old, err)
	}
	r := Rotation{APIKey: key}
	if r.Old, err = getKey(ctx, tx, p.PlayerID, old); err != nil {
		return Rotation{}, err
	}
	r.New, err = getKey(ctx, tx, p.PlayerID, id)
	return r, err
}

// lockRotatable locks the key p names (or the player's one candidate)
// against a concurrent rotation or revocation, and checks it may be
// rotated. The row lock re-reads the row once a concurrent holder
// commits, so the loser of a race sees the winner's rotation.
func lockRotatable(ctx context.Context, tx pgx.Tx, p RotateParams) (int64, error) {
	if p.KeyID == 0 {
		return lockOnlyKey(ctx, tx, p.PlayerID)
	}
	var revoked, rotated bool
	err := tx.QueryRow(ctx, `SELECT revoked_at IS NOT NULL, expires_at IS NOT NULL FROM api_keys
		WHERE id = $1 AND player_id = $2 FOR UPDATE`, p.KeyID, p.PlayerID).Scan(&revoked, &rotated)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		_, err = getKey(ctx, tx, p.PlayerID, p.KeyID)
		return 0, err
	case err != nil:
		return 0, fmt.Errorf("players: lock key %d: %w", p.KeyID, err)
	case revoked:
		return 0, fmt.Errorf("%w: key %d of player %d; create a new one", ErrKeyRevoked, p.KeyID, p.PlayerID)
	case rotated:
		k, err := getKey(ctx, tx, p.PlayerID, p.KeyID)
		if err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("%w: key %d of player %d was rotated to key %d; rotate that one", ErrKeyRotated,
			k.ID, k.PlayerID, k.RotatedTo)
	}
	return p.KeyID, nil
}

// lockOnlyKey locks the player's one key that works and was never rotated.
func lockOnlyKey(ctx context.Context, tx pgx.Tx, player int64) (int64, error) {
	rows, err := tx.Query(ctx, `SELECT id FROM api_keys WHERE player_id = $1 AND revoked_at IS NULL AND expires_at IS NULL
		ORDER BY id FOR UPDATE`, player)
	if err != nil {
		return 0, fmt.Errorf("players: lock keys: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, fmt.Errorf("players: lock keys: %w", err)
	}
	switch len(ids) {
	case 1:
		return ids[0], nil
	case 0:
		if err := requirePlayer(ctx, tx, player); err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("%w: player %d (create one)", ErrNoKey, player)
	}
	return 0, fmt.Errorf("%w: player %d has keys %v (use --key-id)", ErrKeyAmbiguous, player, ids)
}

// oldKeyEnd is when the rotated key stops working, by the database's
// clock (the one authentication compares with).
func oldKeyEnd(ctx context.Context, tx pgx.Tx, p RotateParams) (time.Time, error) {
	var now time.Time
	if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("players: read the time: %w", err)
	}
	until := p.OldValidUntil
	if until.IsZero() {
		if p.OldValidFor < 0 {
			return time.Time{}, fmt.Errorf("%w: %s is negative", ErrInvalidValidity, p.OldValidFor)
		}
		until = now.Add(p.OldValidFor)
	}
	switch {
	case until.Before(now):
		return time.Time{}, fmt.Errorf("%w: %s is in the past (now %s)", ErrInvalidValidity,
			until.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	case until.After(now.Add(MaxOldValidFor)):
		return time.Time{}, fmt.Errorf("%w: at most %s from now", ErrInvalidValidity, MaxOldValidFor)
	}
	return until, nil
}
