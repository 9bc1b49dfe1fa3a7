package players_test

import (
	"context"
	"encoding/hex"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/domain/players"
	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/ops/audit"
	"github.com/fibe-dev/billing/internal/ops/audit/audittest"
)

// keysState is every key row, to prove that a refused call changed nothing.
func keysState(t *testing.T, pool players.DB) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT concat_ws('|', id, player_id, encode(key_hash, 'hex'), hint, created_at,
		expires_at, revoked_at, revoke_reason, rotated_from) FROM api_keys ORDER BY id`)
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

func requireWorks(t *testing.T, pool players.DB, key string, player int64) {
	t.Helper()
	id, err := players.Authenticate(context.Background(), pool, key)
	require.NoError(t, err)
	require.Equal(t, player, id)
}

func requireRefused(t *testing.T, pool players.DB, key string) {
	t.Helper()
	_, err := players.Authenticate(context.Background(), pool, key)
	require.ErrorIs(t, err, players.ErrUnauthorized)
}

// A player holds several keys; a revoked one is refused at once, the
// others keep working; revoking again says so and keeps the first
// revocation; an unknown player, another player's key or a bad reason is
// an error that changes nothing. The clear key is never stored, only its
// hash and last four characters.
func TestKeysCreateListRevoke(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.Tx(t)
	ada, first, err := players.Create(ctx, pool, "ada")
	require.NoError(t, err)
	bob, _, err := players.Create(ctx, pool, "bob")
	require.NoError(t, err)

	k, second, err := players.CreateKey(ctx, pool, ada.ID)
	require.NoError(t, err)
	require.Equal(t, players.KeyActive, k.State)
	require.Equal(t, second[len(second)-4:], k.Hint)
	require.Equal(t, "bk_…"+k.Hint, k.Masked())
	requireWorks(t, pool, first, ada.ID)
	requireWorks(t, pool, second, ada.ID)
	var leaked int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM api_keys WHERE position($1 in concat_ws('|', key_hash::text, hint)) > 0`,
		second[3:]).Scan(&leaked))
	require.Zero(t, leaked, "the clear key is never stored")

	keys, err := players.ListKeys(ctx, pool, ada.ID)
	require.NoError(t, err)
	require.Len(t, keys, 2)
	require.Equal(t, first[len(first)-4:], keys[0].Hint)
	require.Equal(t, k.ID, keys[1].ID)

	before := keysState(t, pool)
	_, _, err = players.CreateKey(ctx, pool, 999_999)
	require.ErrorIs(t, err, players.ErrPlayerNotFound)
	_, err = players.ListKeys(ctx, pool, 999_999)
	require.ErrorIs(t, err, players.ErrPlayerNotFound)
	_, _, err = players.Revoke(ctx, pool, bob.ID, k.ID, "")
	require.ErrorIs(t, err, players.ErrKeyNotFound, "another player's key")
	_, _, err = players.Revoke(ctx, pool, 999_999, k.ID, "")
	require.ErrorIs(t, err, players.ErrPlayerNotFound)
	_, _, err = players.Revoke(ctx, pool, ada.ID, k.ID, string(make([]byte, 501)))
	require.ErrorIs(t, err, players.ErrInvalidReason)
	require.Equal(t, before, keysState(t, pool), "a refused call changes nothing")
	requireWorks(t, pool, second, ada.ID)

	r, changed, err := players.Revoke(ctx, pool, ada.ID, k.ID, "leaked in a log")
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, players.KeyRevoked, r.State)
	require.Equal(t, "leaked in a log", r.RevokeReason)
	requireRefused(t, pool, second)
	requireWorks(t, pool, first, ada.ID)

	again, changed, err := players.Revoke(ctx, pool, ada.ID, k.ID, "other reason")
	require.NoError(t, err)
	require.False(t, changed, "revoked already")
	require.Equal(t, r.RevokedAt, again.RevokedAt)
	require.Equal(t, "leaked in a log", again.RevokeReason, "the first revocation stands")
}

// A rotation makes a working successor and ends the old key when asked:
// later, at once, or at a given time; a key is rotated once; the choices
// that cannot be meant are refused and change nothing.
func TestKeysRotate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	ada, first, err := players.Create(ctx, pool, "ada")
	require.NoError(t, err)
	keys, err := players.ListKeys(ctx, pool, ada.ID)
	require.NoError(t, err)
	old := keys[0]

	before := keysState(t, pool)
	for _, p := range []players.RotateParams{
		{PlayerID: ada.ID, OldValidFor: -time.Second},
		{PlayerID: ada.ID, OldValidUntil: time.Now().Add(-time.Hour)},
		{PlayerID: ada.ID, OldValidFor: players.MaxOldValidFor + time.Hour},
	} {
		_, err := players.Rotate(ctx, pool, p)
		require.ErrorIs(t, err, players.ErrInvalidValidity, p)
	}
	_, err = players.Rotate(ctx, pool, players.RotateParams{PlayerID: ada.ID, KeyID: old.ID + 1000})
	require.ErrorIs(t, err, players.ErrKeyNotFound)
	_, err = players.Rotate(ctx, pool, players.RotateParams{PlayerID: 999_999})
	require.ErrorIs(t, err, players.ErrPlayerNotFound)
	require.Equal(t, before, keysState(t, pool), "a refused rotation changes nothing")

	rot, err := players.Rotate(ctx, pool, players.RotateParams{PlayerID: ada.ID, OldValidFor: time.Hour})
	require.NoError(t, err)
	require.Equal(t, old.ID, rot.Old.ID)
	require.Equal(t, players.KeyExpiring, rot.Old.State)
	require.Equal(t, rot.New.ID, rot.Old.RotatedTo)
	require.Equal(t, old.ID, rot.New.RotatedFrom)
	require.WithinDuration(t, time.Now().Add(time.Hour), *rot.Old.ExpiresAt, time.Minute)
	requireWorks(t, pool, first, ada.ID)
	requireWorks(t, pool, rot.APIKey, ada.ID)

	_, err = players.Rotate(ctx, pool, players.RotateParams{PlayerID: ada.ID, KeyID: old.ID})
	require.ErrorIs(t, err, players.ErrKeyRotated)
	require.ErrorContains(t, err, "rotated to key")

	// Without a key id the one never rotated is meant; at once: the old
	// key is refused from the commit on.
	now, err := players.Rotate(ctx, pool, players.RotateParams{PlayerID: ada.ID})
	require.NoError(t, err)
	require.Equal(t, rot.New.ID, now.Old.ID)
	require.Equal(t, players.KeyExpired, now.Old.State)
	requireRefused(t, pool, rot.APIKey)
	requireWorks(t, pool, now.APIKey, ada.ID)
	requireWorks(t, pool, first, ada.ID)

	_, _, err = players.CreateKey(ctx, pool, ada.ID)
	require.NoError(t, err)
	_, err = players.Rotate(ctx, pool, players.RotateParams{PlayerID: ada.ID})
	require.ErrorIs(t, err, players.ErrKeyAmbiguous)

	_, _, err = players.Revoke(ctx, pool, ada.ID, now.New.ID, "")
	require.NoError(t, err)
	_, err = players.Rotate(ctx, pool, players.RotateParams{PlayerID: ada.ID, KeyID: now.New.ID})
	require.ErrorIs(t, err, players.ErrKeyRevoked)
}

// A rotated key stops working when its time comes, with nothing run in
// between: the time is compared on every authentication.
func TestKeysExpireOnTheirOwn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	ada, first, err := players.Create(ctx, pool, "ada")
	require.NoError(t, err)
	rot, err := players.Rotate(ctx, pool, players.RotateParams{PlayerID: ada.ID, OldValidFor: 2 * time.Second})
	require.NoError(t, err)
	requireWorks(t, pool, first, ada.ID)
	require.Eventually(t, func() bool {
		_, err := players.Authenticate(ctx, pool, first)
		return err != nil
	}, testdb.WorkDeadline, 50*time.Millisecond, "the rotated key never expired")
	requireRefused(t, pool, first)
	requireWorks(t, pool, rot.APIKey, ada.ID)
	keys, err := players.ListKeys(ctx, pool, ada.ID)
	require.NoError(t, err)
	require.Equal(t, players.KeyExpired, keys[0].State)
}

// Operators racing on one key: of N rotations exactly one makes a
// successor and the others are refused; of N revocations exactly one
// revokes and the others report it revoked already, all with the same
// time. The full audit stays clean.
func TestKeysRaceRotateAndRevoke(t *testing.T) {
	t.Parallel()
	const n = 16
	ctx := context.Background()
	pool := testdb.NewPool(t, n+4)
	ada, _, err := players.Create(ctx, pool, "ada")
	require.NoError(t, err)
	keys, err := players.ListKeys(ctx, pool, ada.ID)
	require.NoError(t, err)
	old := keys[0].ID

	rotErrs := make([]error, n)
	race(n, func(i int) {
		_, rotErrs[i] = players.Rotate(ctx, pool, players.RotateParams{PlayerID: ada.ID, KeyID: old, OldValidFor: time.Hour})
	})
	won := 0
	for _, err := range rotErrs {
		if err == nil {
			won++
			continue
		}
		require.ErrorIs(t, err, players.ErrKeyRotated)
	}
	require.Equal(t, 1, won, "one rotation wins")
	keys, err = players.ListKeys(ctx, pool, ada.ID)
	require.NoError(t, err)
	require.Len(t, keys, 2, "one successor")

	changed := make([]bool, n)
	revoked := make([]players.Key, n)
	revErrs := make([]error, n)
	race(n, func(i int) { revoked[i], changed[i], revErrs[i] = players.Revoke(ctx, pool, ada.ID, old, "race") })
	count := 0
	for i := range n {
		require.NoError(t, revErrs[i])
		if changed[i] {
			count++
		}
		require.Equal(t, revoked[0].RevokedAt, revoked[i].RevokedAt)
	}
	require.Equal(t, 1, count, "one revocation revokes")
	audittest.RequireClean(t, pool, audit.Options{})
}

// race runs f(0..n-1) at once and waits for all.
func race(n int, f func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() { <-start; f(i) })
	}
	close(start)
	wg.Wait()
}

// Authentication stays one lookup of the key_hash unique index, expiry and
// revocation checked on the row it finds: on a table of many keys (some
// revoked, some rotated) its plan reads one row by the index, never the
// table.
func TestAuthenticateIsOneIndexLookup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.Tx(t) // ANALYZE and EXPLAIN see the transaction's own rows
	_, key, err := players.Create(ctx, pool, "ada")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO players (name) SELECT 'bulk-' || i FROM generate_series(1, 5000) i`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO api_keys (player_id, key_hash, hint, revoked_at, expires_at)
		SELECT id, sha256(convert_to(name, 'UTF8')), 'bulk', CASE WHEN id % 3 = 0 THEN now() END,
			CASE WHEN id % 5 = 0 THEN now() + interval '1 hour' END
		FROM players WHERE name LIKE 'bulk-%'`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `ANALYZE api_keys`)
	require.NoError(t, err)
	rows, err := pool.Query(ctx, `EXPLAIN (ANALYZE, FORMAT TEXT) `+strings.Replace(players.AuthenticateSQL, "$1",
		`'\x`+hex.EncodeToString(players.HashKey(key))+`'::bytea`, 1))
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	plan := strings.Join(lines, "\n")
	require.Contains(t, plan, "Index Scan using api_keys_key_hash_key on api_keys", plan)
	require.Contains(t, plan, "rows=1 loops=1", plan)
	require.NotContains(t, plan, "Seq Scan", plan)
}
