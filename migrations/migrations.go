// Package migrations owns the database schema: River's own tables (through
// rivermigrate) and the application's tables (embedded goose SQL files).
//
// Migrate is idempotent and safe to run from several processes at once: the
// whole run holds a PostgreSQL advisory lock, so a second migrator waits and
// then finds nothing to do. It waits by polling, holding no snapshot, so
// that a migration may build its indexes CONCURRENTLY.
package migrations

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

//go:embed sql/*.sql
var files embed.FS

// lockKey is an arbitrary constant: the advisory lock id of a migration run.
const lockKey int64 = 0x62696c6c696e67 // "billing"

// Result tells what a run applied.
type Result struct {
	RiverVersions []int
	AppVersions   []int64
}

// Migrate applies River's migrations and then ours, under one advisory lock.
func Migrate(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) (*Result, error) {
	return MigrateTo(ctx, pool, logger, 0)
}

// MigrateTo is Migrate stopping after our migration version (0: all of
// them), for tests that check a migration against the rows the code before
// it wrote.
func MigrateTo(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger, version int64) (*Result, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: acquire: %w", err)
	}
	defer conn.Release()
	if err := lock(ctx, conn, logger); err != nil {
		return nil, err
	}
	defer func() {
		// Unlock on a fresh context: ctx may be cancelled, and a session lock
		// left behind on a pooled connection would block the next migrator.
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", lockKey)
	}()

	res := &Result{}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("migrate: river: %w", err)
	}
	riverRes, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return nil, fmt.Errorf("migrate: river: %w", err)
	}
	for _, v := range riverRes.Versions {
		res.RiverVersions = append(res.RiverVersions, v.Version)
	}

	if res.AppVersions, err = migrateApp(ctx, pool, version); err != nil {
		return nil, err
	}
	logger.InfoContext(ctx, "migrated", "river_applied", len(res.RiverVersions), "app_applied", len(res.AppVersions))
	return res, nil
}

// migrateApp applies our migrations up to version (0: all) and returns
// the versions it applied.
func migrateApp(ctx context.Context, pool *pgxpool.Pool, version int64) ([]int64, error) {
	sub, err := fs.Sub(files, "sql")
	if err != nil {
		return nil, err
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	provider, err := goose.NewProvider(goose.DialectPostgres, db, sub)
	if err != nil {
		return nil, fmt.Errorf("migrate: goose: %w", err)
	}
	var results []*goose.MigrationResult
	if version > 0 {
		results, err = provider.UpTo(ctx, version)
	} else {
		results, err = provider.Up(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("migrate: app: %w", err)
	}
	var applied []int64
	for _, r := range results {
		applied = append(applied, r.Source.Version)
	}
	return applied, nil
}

// lockPoll bounds the wait between two tries of the migration lock.
const lockPoll = time.Second

// lock takes the migration lock on conn. It polls pg_try_advisory_lock
// rather than waiting in pg_advisory_lock: a statement waiting for a lock
// holds a snapshot, and CREATE INDEX CONCURRENTLY in the running migration
// waits for every older snapshot in the database to go. The lock's holder
// is another session of that migrator (the build runs on a connection of
// its own), so PostgreSQL would see no deadlock and both would wait for
// ever. Between tries this session is idle, in no transaction.
func lock(ctx context.Context, conn *pgxpool.Conn, logger *slog.Logger) error {
	wait := 10 * time.Millisecond
	for tries := 0; ; tries++ {
		var locked bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", lockKey).Scan(&locked); err != nil {
			return fmt.Errorf("migrate: lock: %w", err)
		}
		if locked {
			return nil
		}
		if tries == 0 {
			logger.InfoContext(ctx, "waiting for another migrator to finish")
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("migrate: waiting for another migrator: %w", ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, lockPoll)
	}
}
