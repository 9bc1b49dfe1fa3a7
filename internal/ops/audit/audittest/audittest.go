// Package audittest ends a money test with the full audit (package audit):
// every invariant, the same function `billing ledger verify` runs.
package audittest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/ops/audit"
)

// RequireClean fails t unless every invariant holds on pool's database.
// A zero opts.WebhookSince matches every claimed event with its job (a
// test's database is younger than River's job retention). Call it from the
// test's goroutine (it uses require).
func RequireClean(t testing.TB, pool *pgxpool.Pool, opts audit.Options) {
	t.Helper()
	if opts.WebhookSince.IsZero() {
		opts.WebhookSince = time.Unix(0, 0)
	}
	report, err := audit.Run(context.Background(), pool, opts)
	require.NoError(t, err)
	require.True(t, report.Clean(), report.String())
}
