// Package players owns players and their API keys.
//
// An API key is shown once, at creation; only its SHA-256 (and its last
// four characters, to tell keys apart) is stored, so a leaked database does
// not leak working keys. Keys are 32 random bytes, so a plain (unsalted)
// hash is safe against guessing.
//
// A player may hold several keys. An operator revokes one (it is refused
// from the next request on) or rotates it: a successor is made and the old
// key keeps working until a chosen time, so clients can move over without
// an outage. Authenticate reads the key's row on every request, with no
// cache, so a revocation or an expiry holds at once in every process.
package players

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fibe-dev/billing/internal/platform/dbtx"
	"github.com/fibe-dev/billing/internal/platform/errcode"
)

// keyPrefix makes keys recognisable in logs and secret scanners.
const keyPrefix = "bk_"

var (
	// ErrUnauthorized is a missing, malformed, unknown, revoked or expired
	// API key.
	ErrUnauthorized = errcode.New("players: unknown, revoked or expired API key", errcode.Answer{
		Status: http.StatusUnauthorized, Code: "unauthorized", Detail: "a valid API key is required: Authorization: Bearer <key>"})
	// ErrInvalidName is an empty or over-long player name.
	ErrInvalidName = errors.New("players: name must be 1 to 200 characters")
)

// DB is a pool, a connection or a transaction (the one DB interface).
type DB = dbtx.DB

// Player is an account holder.
type Player struct {
	ID        int64
	Name      string
	CreatedAt time.Time
}

// Create makes a player with a fresh API key and returns the key in clear.
func Create(ctx context.Context, db DB, name string) (Player, string, error) {
	name = strings.TrimSpace(name)
	if name == "" || len(name) > 200 {
		return Player{}, "", ErrInvalidName
	}
	key, err := NewAPIKey()
	if err != nil {
		return Player{}, "", err
	}
	var p Player
	err = db.QueryRow(ctx, `
		WITH p AS (INSERT INTO players (name) VALUES ($1) RETURNING id, name, created_at),
		     k AS (INSERT INTO api_keys (player_id, key_hash, hint) SELECT id, $2, $3 FROM p)
		SELECT id, name, created_at FROM p`, name, HashKey(key), hintOf(key)).Scan(&p.ID, &p.Name, &p.CreatedAt)
	if err != nil {
		return Player{}, "", fmt.Errorf("players: create: %w", err)
	}
	return p, key, nil
}

// NewAPIKey returns a new random key.
func NewAPIKey() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("players: random: %w", err)
	}
	return keyPrefix + hex.EncodeToString(b[:]), nil
}

// HashKey is the stored form of a key.
func HashKey(key string) []byte {
	sum := sha256.Sum256([]byte(key))
	return sum[:]
}

// authenticateSQL is one lookup of the key_hash unique index. It reads the
// row each time, by the clock of the database: no cache may keep a revoked
// or expired key working in any process.
const authenticateSQL = `SELECT player_id FROM api_keys
	WHERE key_hash = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())`

// Authenticate returns the id of the player owning key, if the key is
// neither revoked nor expired.
func Authenticate(ctx context.Context, db DB, key string) (int64, error) {
	if !strings.HasPrefix(key, keyPrefix) || len(key) > 200 {
		return 0, ErrUnauthorized
	}
	var id int64
	err := db.QueryRow(ctx, authenticateSQL, HashKey(key)).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, ErrUnauthorized
	}
	if err != nil {
		return 0, fmt.Errorf("players: authenticate: %w", err)
	}
	return id, nil
}
