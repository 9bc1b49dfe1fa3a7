package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/domain/players"
	"github.com/fibe-dev/billing/internal/kit/testdb"
)

func TestPlayersCreate(t *testing.T) {
	t.Parallel()
	dbURL := testdb.NewURL(t)
	out := runBilling(t, []string{"BILLING_DATABASE_URL=" + dbURL}, "players", "create", "--name", "Ada")
	var got struct {
		PlayerID string `json:"player_id"`
		APIKey   string `json:"api_key"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	pool, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	defer pool.Close()
	id, err := players.Authenticate(context.Background(), pool, got.APIKey)
	require.NoError(t, err)
	require.Equal(t, got.PlayerID, strconv.FormatInt(id, 10))
	var stored int
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT count(*) FROM api_keys WHERE key_hash = $1`, players.HashKey(got.APIKey)).Scan(&stored))
	require.Equal(t, 1, stored, "only the hash is stored")

	cmd := exec.Command(billingBin(t), "players", "create")
	cmd.Env = append(cmd.Environ(), "BILLING_DATABASE_URL="+dbURL)
	raw, err := cmd.CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(raw), `"name" not set`)
}

// keysSnapshot is every key row, to prove a refused command changed nothing.
func keysSnapshot(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var s string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT coalesce(string_agg(concat_ws('|', id, player_id,
		encode(key_hash, 'hex'), hint, created_at, expires_at, revoked_at, revoke_reason, rotated_from), E'\n' ORDER BY id), '')
		FROM api_keys`).Scan(&s))
	return s
}

type newKeyOut struct {
	PlayerID     string     `json:"player_id"`
	KeyID        string     `json:"key_id"`
	APIKey       string     `json:"api_key"`
	RotatedFrom  string     `json:"rotated_from"`
	OldExpiresAt *time.Time `json:"old_expires_at"`
}

// An operator creates, lists, revokes and rotates a player's keys from the
// command line; the API's check, run in this other process, follows each
// change at once. Bad input exits 1 and changes nothing.
func TestPlayersKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL, pool := newDB(t)
	env := []string{"BILLING_DATABASE_URL=" + dbURL}
	ada, first, err := players.Create(ctx, pool, "ada")
	require.NoError(t, err)
	bob, _, err := players.Create(ctx, pool, "bob")
	require.NoError(t, err)
	adaID := strconv.FormatInt(ada.ID, 10)

	var created newKeyOut
	out := runBilling(t, env, "players", "keys", "create", "--player", adaID)
	require.NoError(t, json.Unmarshal([]byte(out), &created), out)
	requireKeyOf(t, pool, created.APIKey, ada.ID)
	requireKeyOf(t, pool, first, ada.ID)

	out = runBilling(t, env, "players", "keys", "list", "--player", adaID, "--json")
	var listed []struct {
		ID, Hint, State string
	}
	require.NoError(t, json.Unmarshal([]byte(out), &listed), out)
	require.Len(t, listed, 2)
	require.Equal(t, created.KeyID, listed[1].ID)
	require.Equal(t, "bk_…"+created.APIKey[len(created.APIKey)-4:], listed[1].Hint)
	require.NotContains(t, out, created.APIKey[3:], "a key is shown once")
	out = runBilling(t, env, "players", "keys", "list", "--player", adaID)
	require.Contains(t, out, "id="+created.KeyID+" "+listed[1].Hint+" active created=")
	require.Contains(t, out, "2 keys, 2 working")

	requireKeysRefused(t, env, pool, adaID, strconv.FormatInt(bob.ID, 10), created.KeyID)

	out = runBilling(t, env, "players", "keys", "revoke", "--player", adaID, "--key-id", created.KeyID, "--reason", "leaked")
	require.Contains(t, out, "revoked key "+created.KeyID)
	requireNotKey(t, pool, created.APIKey)
	out = runBilling(t, env, "players", "keys", "revoke", "--player", adaID, "--key-id", created.KeyID, "--json")
	var again struct {
		State        string `json:"state"`
		RevokeReason string `json:"revoke_reason"`
		Changed      bool   `json:"changed"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &again), out)
	require.Equal(t, "revoked", again.State)
	require.Equal(t, "leaked", again.RevokeReason)
	require.False(t, again.Changed, "revoking twice is fine and says so")

	requireRotatedByCLI(t, env, pool, ada.ID, first, listed[0].ID)
}

func requireKeyOf(t *testing.T, pool *pgxpool.Pool, key string, player int64) {
	t.Helper()
	id, err := players.Authenticate(context.Background(), pool, key)
	require.NoError(t, err)
	require.Equal(t, player, id)
}

func requireNotKey(t *testing.T, pool *pgxpool.Pool, key string) {
	t.Helper()
	_, err := players.Authenticate(context.Background(), pool, key)
	require.ErrorIs(t, err, players.ErrUnauthorized)
}

// requireKeysRefused: commands naming an unknown player, another player's
// key, a validity that cannot be meant, or no key where two could be meant
// exit 1 and change no key.
func requireKeysRefused(t *testing.T, env []string, pool *pgxpool.Pool, adaID, bobID, keyID string) {
	t.Helper()
	before := keysSnapshot(t, pool)
	for _, bad := range [][]string{
		{"revoke", "--player", bobID, "--key-id", keyID},
		{"revoke", "--player", "999999", "--key-id", keyID},
		{"list", "--player", "999999"},
		{"create", "--player", "999999"},
		{"rotate", "--player", adaID, "--key-id", keyID, "--old-valid-for", "-1h"},
		{"rotate", "--player", adaID, "--key-id", keyID, "--old-valid-until", "2001-01-01T00:00:00Z"},
		{"rotate", "--player", adaID, "--key-id", keyID, "--old-valid-for", "1h", "--old-valid-until", "2099-01-01T00:00:00Z"},
		{"rotate", "--player", adaID},
	} {
		code, out := runBillingExit(t, env, append([]string{"players", "keys"}, bad...)...)
		require.Equal(t, 1, code, "%v: %s", bad, out)
		require.Regexp(t, `no key|no such player|old-valid|past|several API keys|none of the others`, out, bad)
	}
	require.Equal(t, before, keysSnapshot(t, pool), "a refused command changes nothing")
}

// requireRotatedByCLI rotates the player's one unrotated key (first, id
// firstID) for an hour, refuses to rotate it twice, rotates its successor
// at once, and lists the outcome.
func requireRotatedByCLI(t *testing.T, env []string, pool *pgxpool.Pool, player int64, first, firstID string) {
	t.Helper()
	adaID := strconv.FormatInt(player, 10)
	var rot newKeyOut
	out := runBilling(t, env, "players", "keys", "rotate", "--player", adaID, "--old-valid-for", "1h")
	require.NoError(t, json.Unmarshal([]byte(out), &rot), out)
	require.Equal(t, firstID, rot.RotatedFrom)
	require.NotNil(t, rot.OldExpiresAt)
	require.WithinDuration(t, time.Now().Add(time.Hour), *rot.OldExpiresAt, time.Minute)
	requireKeyOf(t, pool, first, player)
	requireKeyOf(t, pool, rot.APIKey, player)
	out = runBillingFail(t, env, "players", "keys", "rotate", "--player", adaID, "--key-id", rot.RotatedFrom)
	require.Contains(t, out, "was rotated to key "+rot.KeyID)

	var now newKeyOut
	out = runBilling(t, env, "players", "keys", "rotate", "--player", adaID, "--key-id", rot.KeyID, "--old-valid-for", "0", "--json")
	require.NoError(t, json.Unmarshal([]byte(out), &now), out)
	requireNotKey(t, pool, rot.APIKey)
	requireKeyOf(t, pool, now.APIKey, player)
	out = runBilling(t, env, "players", "keys", "list", "--player", adaID)
	require.Contains(t, out, "id="+rot.KeyID+" ")
	require.Regexp(t, `id=`+rot.KeyID+` \S+ expired .* rotated_from=`+rot.RotatedFrom+` rotated_to=`+now.KeyID, out)
	require.Contains(t, out, "4 keys, 2 working")
}
