// Package audittest ends a money test with the full audit (package audit):
// every invariant, the same function `billing ledger verify` runs.
package audittest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/audit"
)

// RequireClean fails t unless every invariant holds on pool's database.
// Call it from the test's goroutine (it uses require).
func RequireClean(t testing.TB, pool *pgxpool.Pool, opts audit.Options) {
	t.Helper()
	report, err := audit.Run(context.Background(), pool, opts)
	require.NoError(t, err)
	require.True(t, report.Clean(), report.String())
}
