package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/players"
	"github.com/fibe-dev/billing/internal/testdb"
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

	cmd := exec.Command(binPath, "players", "create")
	cmd.Env = append(cmd.Environ(), "BILLING_DATABASE_URL="+dbURL)
	raw, err := cmd.CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(raw), `"name" not set`)
}
