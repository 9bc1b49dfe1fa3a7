package players_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/domain/players"
	"github.com/fibe-dev/billing/internal/kit/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

func TestCreateAndAuthenticate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.Tx(t)

	p, key, err := players.Create(ctx, pool, "ada")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(key, "bk_"))

	id, err := players.Authenticate(ctx, pool, key)
	require.NoError(t, err)
	require.Equal(t, p.ID, id)

	var stored int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM api_keys WHERE key_hash::text LIKE '%'||$1||'%'", key[3:]).Scan(&stored))
	require.Zero(t, stored, "the clear key is never stored")

	for _, bad := range []string{"", "bk_", key + "x", "Bearer " + key, strings.Repeat("a", 500)} {
		_, err := players.Authenticate(ctx, pool, bad)
		require.ErrorIs(t, err, players.ErrUnauthorized, bad)
	}
	_, err = pool.Exec(ctx, "UPDATE api_keys SET revoked_at = now() WHERE player_id = $1", p.ID)
	require.NoError(t, err)
	_, err = players.Authenticate(ctx, pool, key)
	require.ErrorIs(t, err, players.ErrUnauthorized)

	_, _, err = players.Create(ctx, pool, "  ")
	require.ErrorIs(t, err, players.ErrInvalidName)
}
