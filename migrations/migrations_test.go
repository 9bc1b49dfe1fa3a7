package migrations_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/migrations"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// TestMigrateConcurrentAndIdempotent runs two migrators at once on a fresh
// database, then a third: all succeed and the schema exists exactly once.
// The second waits while the first builds indexes CONCURRENTLY, which
// hangs if the waiting one holds a snapshot: the bound makes that a
// failure.
func TestMigrateConcurrentAndIdempotent(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
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

// TestMigratorWaitsWithoutSnapshot holds the migration lock as a running
// migrator would and starts another: while it waits, an index builds
// CONCURRENTLY in its database (such a build waits for every older
// snapshot, so it would wait for a migrator blocked inside a statement),
// and once the lock is released the waiting migrator applies everything.
func TestMigratorWaitsWithoutSnapshot(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	url := testdb.EmptyURL(t)

	holder, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer holder.Close(context.WithoutCancel(ctx))
	_, err = holder.Exec(ctx, "SELECT pg_advisory_lock($1)", migrations.LockKey)
	require.NoError(t, err)

	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["application_name"] = "waiting_migrator"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	defer cancel() // first: a migrator still waiting gives its connection back to the pool
	done := make(chan error, 1)
	go func() {
		_, err := migrations.Migrate(ctx, pool, nil)
		done <- err
	}()
	require.Eventually(t, func() bool {
		var n int
		err := holder.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = 'waiting_migrator' AND query LIKE '%advisory_lock%'`).Scan(&n)
		return err == nil && n > 0
	}, testdb.WorkDeadline, 10*time.Millisecond, "the second migrator never asked for the lock")

	// The build runs in a session of its own, as goose's is beside the
	// running migrator's lock: PostgreSQL sees no deadlock then.
	build, cancelBuild := context.WithTimeout(ctx, 20*time.Second)
	defer cancelBuild()
	builder, err := pgx.Connect(build, url)
	require.NoError(t, err)
	defer builder.Close(context.WithoutCancel(ctx))
	_, err = builder.Exec(build, "CREATE TABLE scratch (id bigint)")
	require.NoError(t, err)
	_, err = builder.Exec(build, "CREATE INDEX CONCURRENTLY scratch_id_idx ON scratch (id)")
	require.NoError(t, err, "a concurrent build waited for the waiting migrator")
	select {
	case err := <-done:
		t.Fatalf("the second migrator did not wait for the lock: %v", err)
	default:
	}

	_, err = holder.Exec(ctx, "SELECT pg_advisory_unlock($1)", migrations.LockKey)
	require.NoError(t, err)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("the second migrator did not finish once the lock was free")
	}
	var n int
	require.NoError(t, holder.QueryRow(ctx, "SELECT count(*) FROM pg_indexes WHERE indexname = 'wallet_transactions_payment_key_idx'").Scan(&n))
	require.Equal(t, 1, n, "migration 00013 applied")
}
