package migrations_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/testdb"
	"github.com/fibe-dev/billing/migrations"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// TestMigrateConcurrentAndIdempotent runs two migrators at once on a fresh
// database, then a third: all succeed and the schema exists exactly once.
func TestMigrateConcurrentAndIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testdb.EmptyURL(t)

	var wg sync.WaitGroup
	results := make([]*migrations.Result, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pool, err := pgxpool.New(ctx, url)
			if err != nil {
				errs[i] = err
				return
			}
			defer pool.Close()
			results[i], errs[i] = migrations.Migrate(ctx, pool, nil)
		}()
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	applied := len(results[0].AppVersions) + len(results[1].AppVersions)
	require.Positive(t, applied)
	require.True(t, len(results[0].AppVersions) == 0 || len(results[1].AppVersions) == 0, "one migrator did the work")

	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer pool.Close()
	again, err := migrations.Migrate(ctx, pool, nil)
	require.NoError(t, err)
	require.Empty(t, again.AppVersions)
	require.Empty(t, again.RiverVersions)

	for _, table := range []string{"players", "api_keys", "river_job"} {
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename = $1", table).Scan(&n))
		require.Equal(t, 1, n, table)
	}
}
