package testdb

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The binary's shared database: one migrated clone that every Tx runs on.
// Nothing on it ever commits, so each test sees the template's rows plus
// its own, whatever other tests do at the same time.
var (
	sharedOnce sync.Once
	sharedPool *pgxpool.Pool
	sharedName string
	sharedErr  error
)

// sharedLockTimeout bounds how long a Tx waits for a row lock: two tests
// writing the same unique key wait for each other's rollback, and a test
// that never rolls back must not hang the other for ever.
const sharedLockTimeout = "60s"

// Tx is the default fixture: a transaction on a migrated database shared
// by the package's tests, rolled back when t ends. It costs a BEGIN, where
// New costs a whole database. A test that needs a commit (River workers,
// a race between sessions, a durable commit, a second connection that must
// see the first's writes) takes New instead.
//
// Sequences do not roll back: a test must not expect particular ids.
func Tx(t testing.TB) pgx.Tx {
	t.Helper()
	if !ready {
		t.Fatal("testdb: call testdb.Main(m) from the package's TestMain")
	}
	sharedOnce.Do(openShared)
	if sharedErr != nil {
		t.Fatalf("testdb: the shared database: %v", sharedErr)
	}
	tx, err := sharedPool.Begin(context.Background())
	if err != nil {
		t.Fatalf("testdb: begin: %v", err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

func openShared() {
	ctx := context.Background()
	sharedName = fmt.Sprintf("%s_shared", prefix)
	if sharedErr = clone(ctx, sharedName); sharedErr != nil {
		return
	}
	cfg, err := pgxpool.ParseConfig(urlFor(sharedName))
	if err != nil {
		sharedErr = err
		return
	}
	cfg.MaxConns = 20
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = sharedLockTimeout
	sharedPool, sharedErr = pgxpool.NewWithConfig(ctx, cfg)
}

// dropShared drops the shared database, if a test made it.
func dropShared() {
	if sharedPool != nil {
		sharedPool.Close()
	}
	if sharedName != "" {
		dropDatabase(sharedName)
	}
}
