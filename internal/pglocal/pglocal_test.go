package pglocal_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/pglocal"
)

// TestRestartReusesData proves the dev cluster keeps its data across starts
// and leaves no process behind.
func TestRestartReusesData(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()

	srv, err := pglocal.Start(pglocal.Options{Dir: dir, Fast: true})
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, srv.URL())
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)")
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
	require.NoError(t, srv.Stop())

	srv, err = pglocal.Start(pglocal.Options{Dir: dir, Fast: true})
	require.NoError(t, err)
	conn, err = pgx.Connect(ctx, srv.URL())
	require.NoError(t, err)
	var v int
	require.NoError(t, conn.QueryRow(ctx, "SELECT v FROM kept").Scan(&v))
	require.Equal(t, 42, v)
	require.NoError(t, conn.Close(ctx))
	require.NoError(t, srv.Stop())

	out, _ := exec.Command("pgrep", "-af", "postgres.*"+dir).Output()
	require.Empty(t, strings.TrimSpace(string(out)), "no postgres left running for %s", dir)
}
