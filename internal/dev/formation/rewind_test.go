package formation_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/dev/formation"
)

// testDivergedFormerPrimaryIsRewound (a case of TestFormation) reproduces
// what pg_auto_failover 2.0 can leave behind on a starved machine: a
// former primary holding WAL the new primary never had, started as the
// new primary's standby without a rewind, whose PostgreSQL then refuses
// to start ("requested timeline ... is not a child of this server's
// history"). WaitHealthy sees that in the node's log, rewinds the node
// from the primary and starts its keeper; the node rejoins as a standby,
// and the commit only it had is gone (it was never acknowledged to anyone
// who waits for a standby).
func testDivergedFormerPrimaryIsRewound(t *testing.T, f *formation.Formation) {
	ctx, d := diverge(t, f, "diverged")
	pool, old, next := d.pool, d.old, d.next
	rewoundBefore := len(f.Rewound())
	logBefore := len(old.Log(math.MaxInt))

	// Follow next without a rewind, as the keeper does on its way
	// report_lsn -> secondary: next's timeline history at hand, a standby.
	copyHistories(t, next.DataDir(), old.DataDir())
	require.NoError(t, formation.WriteStandbySignal(f, old))
	conninfo := fmt.Sprintf("host=localhost port=%d user=pgautofailover_replicator", next.Port)
	err := formation.PgCtl(ctx, f, old, "start", "--wait", "--timeout", "300",
		"-o", d.opts+fmt.Sprintf(" -c primary_conninfo='%s'", conninfo))
	require.Error(t, err, "a diverged standby does not start")
	// PostgreSQL's logging collector may still be writing the failed
	// start's lines when pg_ctl has seen the server die: wait for them.
	require.Eventually(t, func() bool {
		return strings.Contains(postgresLogs(t, old), "is not a child of this server's history")
	}, logDeadline, 50*time.Millisecond, "%v; the node's log ends:\n%s", err, old.Log(2000))

	require.NoError(t, f.WaitHealthy(ctx))
	require.Equal(t, []string{old.Name}, f.Rewound()[rewoundBefore:])
	rows, err := pool.Query(ctx, `SELECT id FROM `+d.table+` ORDER BY id`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, []int64{1, 2}, ids, "the diverged commit is not the formation's")
	var onOld int64
	require.NoError(t, queryRow(ctx, old.AdminURL(), `SELECT count(*) FROM `+d.table+` WHERE id = 99`, &onOld))
	require.Zero(t, onOld, "the rewound node dropped its diverged commit")
	logged := old.Log(math.MaxInt)[logBefore:] // what this case made it log
	require.Contains(t, logged, "servers diverged at WAL location", "pg_rewind had work to do")
	require.Contains(t, logged, "rewound to "+next.Name+"'s history")
}

// postgresLogs is everything n's PostgreSQL has logged through its
// logging collector so far. It reads what it can: it is polled while the
// collector writes.
func postgresLogs(t *testing.T, n *formation.Node) string {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(n.DataDir(), "log", "*"))
	var all strings.Builder
	for _, p := range paths {
		b, _ := os.ReadFile(p)
		all.Write(b)
	}
	return all.String()
}

// copyHistories copies the timeline history files of one data directory
// into another's pg_wal, owned as the rest of it is.
func copyHistories(t *testing.T, from, to string) {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(from, "pg_wal", "*.history"))
	require.NoError(t, err)
	require.NotEmpty(t, paths, "a promoted node has a timeline history")
	info, err := os.Stat(filepath.Join(to, "pg_wal"))
	require.NoError(t, err)
	for _, p := range paths {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		dst := filepath.Join(to, "pg_wal", filepath.Base(p))
		require.NoError(t, os.WriteFile(dst, b, 0o600))
		st := info.Sys().(*syscall.Stat_t)
		require.NoError(t, os.Chown(dst, int(st.Uid), int(st.Gid)))
	}
}

func execOn(ctx context.Context, url, sql string) (int64, error) {
	var n int64
	err := queryRow(ctx, url, sql+` RETURNING 1`, &n)
	return n, err
}

// TestDivergenceIsSeenOnce: the log is read from where the last look
// stopped, so a signature already dealt with does not count again, and a
// half-written last line waits for its end.
func TestDivergenceIsSeenOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	n := formation.NewNodeForLog(dir, "node1")
	log := filepath.Join(dir, "node1.log")
	appendTo := func(s string) {
		file, err := os.OpenFile(log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		require.NoError(t, err)
		_, err = file.WriteString(s)
		require.NoError(t, err)
		require.NoError(t, file.Close())
	}
	require.False(t, formation.DivergedSinceLastLook(n), "no log yet")
	appendTo("INFO  Transition complete\n")
	require.False(t, formation.DivergedSinceLastLook(n))
	line := "FATAL:  requested timeline 3 is not a child of this server's history\n"
	appendTo(line[:20])
	require.False(t, formation.DivergedSinceLastLook(n), "half a line")
	appendTo(line[20:])
	require.True(t, formation.DivergedSinceLastLook(n))
	require.False(t, formation.DivergedSinceLastLook(n), "seen already")
	appendTo(strings.Repeat("LOG:  redo starts\n", 3) + line)
	require.True(t, formation.DivergedSinceLastLook(n))
}

// testRewoundNodeStreamsFromTheSource (a case of TestFormation, the last:
// it leaves a node without its keeper) is what CI met on a starved
// machine: the keeper of a diverged former primary, sent through
// report_lsn, does not rewind or set up replication itself once the
// formation has rewound it; it only starts PostgreSQL and waits for it to
// be ready. pg_rewind copies the source's configuration, and a primary
// has no standby settings, so the node must still stream from the source
// on its own: here its PostgreSQL is started with no keeper at all while
// the source keeps writing, and a row the source commits after the rewind
// must reach it.
func testRewoundNodeStreamsFromTheSource(t *testing.T, f *formation.Formation) {
	ctx, d := diverge(t, f, "streamed")
	pool, old, next := d.pool, d.old, d.next

	// The source writes while pg_rewind copies from it.
	wctx, stopWriting := context.WithCancel(ctx)
	written := make(chan int64, 1) // never blocks the writer, should the test end first
	go func() {
		n := int64(0)
		for id := int64(1000); wctx.Err() == nil; id++ {
			if _, err := pool.Exec(wctx, `INSERT INTO `+d.table+` VALUES ($1)`, id); err == nil {
				n++
			}
		}
		written <- n
	}()
	require.NoError(t, formation.PgRewind(ctx, f, old, next))
	stopWriting()
	require.Positive(t, <-written, "the source took writes during the rewind")
	insert(t, ctx, pool, d.table, 3)

	require.NoError(t, formation.PgCtl(ctx, f, old, "start", "--no-wait", "-o", fmt.Sprintf("-p %d -h localhost", old.Port)))
	t.Cleanup(func() {
		_ = formation.PgCtl(context.Background(), f, old, "stop", "--mode", "immediate", "--wait", "--timeout", "300")
	})
	var seen int64
	require.Eventually(t, func() bool {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return queryRow(qctx, old.AdminURL(), `SELECT count(*) FROM `+d.table+` WHERE id = 3`, &seen) == nil && seen > 0
	}, 3*time.Minute, 250*time.Millisecond, "the rewound node never replayed a commit the source made after the rewind")
	var diverged int64
	require.NoError(t, queryRow(ctx, old.AdminURL(), `SELECT count(*) FROM `+d.table+` WHERE id = 99`, &diverged))
	require.Zero(t, diverged, "the rewound node dropped its diverged commit")
	var recovering bool
	require.NoError(t, queryRow(ctx, old.AdminURL(), `SELECT pg_is_in_recovery()`, &recovering))
	require.True(t, recovering, "the rewound node is a standby")
}

// divergence is a formation whose former primary, old, holds a commit
// (99 in table) that next, the primary now, never had; next has 1 and 2.
// old's keeper is dead and its PostgreSQL stopped; opts start that
// PostgreSQL by hand on its own port.
type divergence struct {
	f         *formation.Formation
	pool      *pgxpool.Pool
	old, next *formation.Node
	opts      string
	table     string
}

// diverge makes a divergence in f, whose rows go to a new table of that
// name; ctx bounds the case that uses it.
func diverge(t *testing.T, f *formation.Formation, table string) (context.Context, divergence) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startDeadline)
	t.Cleanup(cancel)
	d := divergence{f: f, table: table}
	d.pool = newPool(t, d.f.URL())
	_, err := d.pool.Exec(ctx, `CREATE TABLE `+table+` (id bigint PRIMARY KEY)`)
	require.NoError(t, err)
	insert(t, ctx, d.pool, table, 1)
	d.old, err = d.f.Primary(ctx)
	require.NoError(t, err)
	require.NoError(t, d.old.Kill())
	d.next, err = d.f.WaitPrimary(ctx, d.old)
	require.NoError(t, err)
	insert(t, ctx, d.pool, table, 2)

	// The old primary, alone, commits what no standby has: its history
	// now diverges from next's.
	d.opts = fmt.Sprintf("-p %d -h localhost -c synchronous_standby_names=''", d.old.Port)
	require.NoError(t, formation.PgCtl(ctx, d.f, d.old, "start", "--wait", "--timeout", "300", "-o", d.opts))
	_, err = execOn(ctx, d.old.AdminURL(), `INSERT INTO `+table+` VALUES (99)`)
	require.NoError(t, err)
	require.NoError(t, formation.PgCtl(ctx, d.f, d.old, "stop", "--mode", "fast", "--wait", "--timeout", "300"))
	return ctx, d
}
