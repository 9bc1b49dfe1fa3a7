// Package idempotency is the API's replay cache: a store of
// (player, Idempotency-Key) rows and the HTTP middleware that makes every
// mutating request run at most once per key.
//
// A request carrying a key goes through three steps:
//
//  1. Claim, in its own short committed statement: the key row is inserted
//     as "running" with locked_at (INSERT ... ON CONFLICT DO NOTHING). A
//     concurrent duplicate finds that committed row at once and answers
//     "in use" instead of blocking behind the first request's transaction.
//  2. The mutation runs in a second transaction that first locks the key row
//     (SELECT ... FOR UPDATE), then, before committing, flips it to
//     "completed" with the response. The effect and its cached response
//     therefore commit atomically: a crash leaves neither or both.
//  3. A 5xx, a panic or a failed commit rolls the mutation back and deletes
//     the running claim, so a retry runs again from scratch. The delete runs
//     on a short context of its own: the request's may have expired (often
//     the very reason for the 5xx), and a claim left behind would answer
//     409 until it went stale.
//
// A key answers only the request it was claimed for: the same method, path
// and body in canonical JSON form (Fingerprint, fingerprint.go); any other
// request under it is ErrReused.
//
// A claim whose holder died (its process crashed between the steps) is taken
// over once its lock is older than a timeout. A live holder keeps the row
// locked for the whole of step 2, and takeover skips locked rows, so a slow
// request is never run twice. Keys expire after TTL (24 h); ReapWorker
// deletes them.
package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fibe-dev/billing/internal/platform/durable"
	"github.com/fibe-dev/billing/internal/platform/errcode"
)

const (
	// MaxKeyLength bounds an Idempotency-Key, in characters.
	MaxKeyLength = 255
	// TTL is how long a key is remembered.
	TTL = 24 * time.Hour
	// DefaultLockTimeout is how old a running claim must be before another
	// request may take it over. It only matters for a holder that died: a
	// live one keeps its row locked and cannot be taken over.
	DefaultLockTimeout = time.Minute
)

// Errors, each with its answer (package errcode). The middleware hands
// them to Options.WriteError.
var (
	ErrInvalidKey = errcode.New("idempotency: key must be 1 to 255 printable ASCII characters", errcode.Answer{
		Status: http.StatusBadRequest, Code: "invalid_idempotency_key",
		Detail: "Idempotency-Key must be 1 to 255 printable ASCII characters, quoted or bare"})
	// ErrInUse: the first request is still running, and most finish well
	// within a second.
	ErrInUse = errcode.New("idempotency: key is in use by a request that is still running", errcode.Answer{
		Status: http.StatusConflict, Code: "idempotency_key_in_use",
		Detail: "a request with this Idempotency-Key is still running; retry later", RetryAfter: time.Second})
	ErrReused = errcode.New("idempotency: key was used for a different request", errcode.Answer{
		Status: http.StatusUnprocessableEntity, Code: "idempotency_key_reused",
		Detail: "this Idempotency-Key was used for a different request"})
	ErrBodyTooLarge = errcode.New("idempotency: request body too large", errcode.Answer{
		Status: http.StatusRequestEntityTooLarge, Code: "body_too_large", Detail: "request body too large"})
	// ErrBodyIncomplete and ErrBodyTimeout are a body the client cut short
	// or sent too slowly: the client's fault (4xx), not the server's. They
	// wrap the read's failure, whose own answer (a lost connection, a
	// deadline) is not the client's.
	ErrBodyIncomplete = errcode.New("idempotency: request body ended early", errcode.Answer{
		Status: http.StatusBadRequest, Code: "incomplete_body", Detail: "the request body ended early; nothing was done"})
	ErrBodyTimeout = errcode.New("idempotency: request body timed out", errcode.Answer{
		Status: http.StatusRequestTimeout, Code: "body_timeout",
		Detail: "the request body did not arrive in time; nothing was done"})
	// ErrNoPlayer means the middleware ran on an unauthenticated request: a
	// wiring bug, answered as a 500.
	ErrNoPlayer = errors.New("idempotency: no authenticated player on the request")
)

// Response is a stored response.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Claim is a running key held by this request. Complete or Release it.
type Claim struct {
	ID       int64
	PlayerID int64
	Key      string
	LockedAt time.Time
}

// Lookup is what Begin found: either a claim (run the request) or a replay.
type Lookup struct {
	Claim  *Claim
	Replay *Response
}

// Store reads and writes idempotency_keys.
type Store struct {
	pool        *pgxpool.Pool
	lockTimeout time.Duration
}

// NewStore returns a Store; lockTimeout <= 0 means DefaultLockTimeout.
func NewStore(pool *pgxpool.Pool, lockTimeout time.Duration) *Store {
	if lockTimeout <= 0 {
		lockTimeout = DefaultLockTimeout
	}
	return &Store{pool: pool, lockTimeout: lockTimeout}
}

// ParseKey reads an Idempotency-Key header value: a structured-field string
// ("quoted", with \" and \\ escapes) or the bare key. Both forms name the
// same key.
func ParseKey(v string) (string, error) {
	v = strings.TrimSpace(v)
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		var b strings.Builder
		inner := v[1 : len(v)-1]
		for i := 0; i < len(inner); i++ {
			c := inner[i]
			if c == '\\' {
				if i+1 == len(inner) || (inner[i+1] != '"' && inner[i+1] != '\\') {
					return "", ErrInvalidKey
				}
				i++
				c = inner[i]
			} else if c == '"' {
				return "", ErrInvalidKey
			}
			b.WriteByte(c)
		}
		v = b.String()
	}
	if len(v) == 0 || len(v) > MaxKeyLength {
		return "", ErrInvalidKey
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return "", ErrInvalidKey
		}
	}
	return v, nil
}

// keyRow is a stored key as Begin reads it.
type keyRow struct {
	id          int64
	fingerprint []byte
	status      string
	resp        Response
	headers     []byte
	lockedAt    *time.Time
	createdAt   time.Time
}

// maxBeginRounds bounds Begin's loop: each round either decides or observed
// a concurrent change (a claim, a release, an expiry) worth one more look.
const maxBeginRounds = 4

// Begin claims key for playerID or finds its stored response. It returns
// ErrReused for another request (fingerprint) and ErrInUse while a live
// request holds the key. now is the caller's clock.
func (s *Store) Begin(ctx context.Context, playerID int64, key string, fingerprint Fingerprint, now time.Time) (*Lookup, error) {
	for range maxBeginRounds {
		row, err := s.read(ctx, playerID, key)
		if err != nil {
			return nil, err
		}
		if row == nil {
			claim, err := s.insert(ctx, playerID, key, fingerprint.stored, now)
			if err != nil || claim != nil {
				return &Lookup{Claim: claim}, err
			}
			continue // lost the insert race: look again
		}
		look, retry, err := s.decide(ctx, row, playerID, key, fingerprint, now)
		if !retry {
			return look, err
		}
	}
	return nil, ErrInUse
}

// decide acts on an existing row; retry asks Begin to read it again.
func (s *Store) decide(ctx context.Context, row *keyRow, playerID int64, key string, fingerprint Fingerprint, now time.Time) (*Lookup, bool, error) {
	running := row.status == "running"
	stale := running && (row.lockedAt == nil || !row.lockedAt.After(now.Add(-s.lockTimeout)))
	if !row.createdAt.After(now.Add(-TTL)) && (!running || stale) {
		// Expired but not yet reaped: forget it and treat the request as new.
		// The conditions make a concurrent change (a takeover, a completion) win.
		if _, err := s.pool.Exec(ctx, `
			DELETE FROM idempotency_keys
			WHERE id = $1 AND status = $2 AND locked_at IS NOT DISTINCT FROM $3`, row.id, row.status, row.lockedAt); err != nil {
			return nil, false, fmt.Errorf("idempotency: expire: %w", err)
		}
		return nil, true, nil
	}
	if !fingerprint.matches(row.fingerprint) {
		return nil, false, ErrReused
	}
	if !running {
		if len(row.headers) > 0 {
			if err := json.Unmarshal(row.headers, &row.resp.Header); err != nil {
				return nil, false, fmt.Errorf("idempotency: stored headers: %w", err)
			}
		}
		counted, err := s.countReplay(ctx, row.id)
		if err != nil || !counted {
			return nil, !counted && err == nil, err
		}
		return &Lookup{Replay: &row.resp}, false, nil
	}
	if !stale {
		return nil, false, ErrInUse
	}
	claim, err := s.takeOver(ctx, row, playerID, key, now)
	if err != nil || claim != nil {
		return &Lookup{Claim: claim}, false, err
	}
	return nil, true, nil
}

// countReplay counts a replay on the key's row before it is answered.
// The stored response may have been committed on a primary that no
// synchronous standby confirmed (its wait cancelled, or a primary since
// replaced): only a write whose own commit a standby confirms proves the
// row it follows in the WAL survives a failover, so the replay is
// answered only after this one is (durable.ErrNotDurable otherwise).
// false means the row is gone (expired meanwhile): look again.
func (s *Store) countReplay(ctx context.Context, id int64) (bool, error) {
	var n int64
	err := durable.Do(ctx, s.pool, func(conn *pgxpool.Conn) error {
		tag, err := conn.Exec(ctx, `UPDATE idempotency_keys SET replays = replays + 1 WHERE id = $1 AND status = 'completed'`, id)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return false, fmt.Errorf("idempotency: count replay: %w", err)
	}
	return n == 1, nil
}

func (s *Store) read(ctx context.Context, playerID int64, key string) (*keyRow, error) {
	var r keyRow
	var status *int32
	err := s.pool.QueryRow(ctx, `
		SELECT id, fingerprint, status, response_status, response_headers, response_body, locked_at, created_at
		FROM idempotency_keys WHERE player_id = $1 AND key = $2`, playerID, key).
		Scan(&r.id, &r.fingerprint, &r.status, &status, &r.headers, &r.resp.Body, &r.lockedAt, &r.createdAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("idempotency: read key: %w", err)
	}
	if status != nil {
		r.resp.Status = int(*status)
	}
	return &r, nil
}

// claimSQL inserts a running claim. It is pipelined after claimLocalSQL,
// one implicit transaction: the claim acknowledges nothing, and the
// mutation's own commit, which waits for the synchronous standby, comes
// after it in the WAL and so carries it to the standby too. A claim lost
// with a primary before that commit only lets the retry run afresh, which
// is right since its mutation was lost as well. So the claim waits for the
// local flush alone, not for a standby too: one synchronous-replication
// wait per request, not two.
const (
	claimLocalSQL = `SELECT set_config('synchronous_commit', 'local', true)`
	claimSQL      = `
		INSERT INTO idempotency_keys (player_id, key, fingerprint, status, locked_at, created_at)
		VALUES ($1, $2, $3, 'running', $4, $4)
		ON CONFLICT (player_id, key) DO NOTHING
		RETURNING id, locked_at`
)

// insert claims a new key; nil, nil means another request inserted it first.
func (s *Store) insert(ctx context.Context, playerID int64, key string, fingerprint []byte, now time.Time) (*Claim, error) {
	c := &Claim{PlayerID: playerID, Key: key}
	b := &pgx.Batch{}
	b.Queue(claimLocalSQL)
	b.Queue(claimSQL, playerID, key, fingerprint, now).QueryRow(func(row pgx.Row) error {
		return row.Scan(&c.ID, &c.LockedAt)
	})
	err := s.pool.SendBatch(ctx, b).Close()
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("idempotency: claim: %w", err)
	}
	return c, nil
}

// takeOver moves a stale lock to this request. SKIP LOCKED leaves alone a
// row that a live holder has locked in its mutation transaction.
func (s *Store) takeOver(ctx context.Context, row *keyRow, playerID int64, key string, now time.Time) (*Claim, error) {
	c := &Claim{ID: row.id, PlayerID: playerID, Key: key}
	err := s.pool.QueryRow(ctx, `
		UPDATE idempotency_keys k SET locked_at = $3
		FROM (SELECT id FROM idempotency_keys
		      WHERE id = $1 AND status = 'running' AND locked_at IS NOT DISTINCT FROM $2
		      FOR UPDATE SKIP LOCKED) l
		WHERE k.id = l.id
		RETURNING k.locked_at`, row.id, row.lockedAt, now).Scan(&c.LockedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("idempotency: take over: %w", err)
	}
	return c, nil
}

// Lock locks the claimed row inside the mutation's transaction and checks
// the claim is still this request's (ErrInUse if it was taken over).
func (s *Store) Lock(ctx context.Context, tx pgx.Tx, c *Claim) error {
	var one int
	err := tx.QueryRow(ctx, `
		SELECT 1 FROM idempotency_keys
		WHERE id = $1 AND status = 'running' AND locked_at = $2 FOR UPDATE`, c.ID, c.LockedAt).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrInUse
	}
	if err != nil {
		return fmt.Errorf("idempotency: lock key: %w", err)
	}
	return nil
}

// Complete stores resp as the key's answer inside the mutation's
// transaction; committing tx commits both.
func (s *Store) Complete(ctx context.Context, tx pgx.Tx, c *Claim, resp *Response, now time.Time) error {
	headers, err := json.Marshal(resp.Header)
	if err != nil {
		return fmt.Errorf("idempotency: encode headers: %w", err)
	}
	tag, err := tx.Exec(ctx, `
		UPDATE idempotency_keys
		SET status = 'completed', response_status = $3, response_headers = $4, response_body = $5,
		    completed_at = $6, locked_at = NULL
		WHERE id = $1 AND status = 'running' AND locked_at = $2`,
		c.ID, c.LockedAt, resp.Status, headers, resp.Body, now)
	if err != nil {
		return fmt.Errorf("idempotency: complete: %w", err)
	}
	if tag.RowsAffected() != 1 {
		return ErrInUse
	}
	return nil
}

// Release deletes a running claim so that a retry runs the request again.
// A completed row is left alone (its commit may have succeeded after all).
func (s *Store) Release(ctx context.Context, c *Claim) error {
	_, err := s.pool.Exec(ctx, `
		DELETE FROM idempotency_keys WHERE id = $1 AND status = 'running' AND locked_at = $2`, c.ID, c.LockedAt)
	if err != nil {
		return fmt.Errorf("idempotency: release: %w", err)
	}
	return nil
}

// reapBatch bounds one DELETE so the reaper never holds many row locks.
const reapBatch = 5000

// Reap deletes keys created before cutoff, in batches, and returns how many.
// A running key goes only when its lock is that old too, and a row locked
// by a live request is skipped.
func (s *Store) Reap(ctx context.Context, cutoff time.Time) (int64, error) {
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, `
			DELETE FROM idempotency_keys WHERE id IN (
				SELECT id FROM idempotency_keys
				WHERE created_at < $1 AND (status = 'completed' OR locked_at IS NULL OR locked_at < $1)
				LIMIT $2 FOR UPDATE SKIP LOCKED)`, cutoff, reapBatch)
		if err != nil {
			return total, fmt.Errorf("idempotency: reap: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < reapBatch {
			return total, nil
		}
	}
}
