// Package durable is what billing's connection pools need to acknowledge
// only what survives the loss of the primary, on PostgreSQL with
// synchronous standbys (pg_auto_failover):
//
//   - Commit, and Do for statements outside an explicit transaction, fail
//     with ErrNotDurable when PostgreSQL answered the commit with its
//     WARNING "canceling wait for synchronous replication": the
//     transaction committed on this primary, but no synchronous standby
//     confirmed it, so it may be gone after a failover. PostgreSQL reports
//     such a commit as a success; only the warning tells.
//   - Configure installs the notice handler that sees that warning, and
//     closes every connection that meets a read-only node (SQLSTATE 25006,
//     a connection left on a demoted primary or a standby) instead of
//     handing it back to the pool, so the next connection is made through
//     the URL's target_session_attrs and reaches the new primary.
//
// Every acknowledging commit of billing goes through Commit or Do; a caller
// answers ErrNotDurable as a retryable failure (503, a failed job), which
// is correct whether or not the row survives, because every mutation is
// replay-safe by key.
package durable

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// ErrNotDurable means a commit was applied on the primary but not
// confirmed by a synchronous standby. Nothing may be acknowledged on it;
// a retry with the same key is safe whether or not the row survives.
var ErrNotDurable = errors.New("durable: the commit was not confirmed by a synchronous standby " +
	"(its wait for synchronous replication was cancelled): it may exist on this primary only")

// readOnlyState is SQLSTATE read_only_sql_transaction: a write reached a
// node that is (now) read-only.
const readOnlyState = "25006"

// Connection defaults Configure applies when the URL sets none. A primary
// that froze (a stopped machine) still completes TCP handshakes and then
// never answers: without a bound, each pooled connection to it, and each
// attempt to connect to it first among the URL's hosts, would hold its
// caller until that caller's own deadline.
const (
	DefaultConnectTimeout = 5 * time.Second
	DefaultPingTimeout    = 3 * time.Second
)

var (
	notDurableTotal = promauto.NewCounter(prometheus.CounterOpts{
		Name: "billing_db_commits_not_durable_total",
		Help: "Commits PostgreSQL answered with \"canceling wait for synchronous replication\": applied on the primary, unconfirmed by a standby, never acknowledged.",
	})
	readOnlyClosedTotal = promauto.NewCounter(prometheus.CounterOpts{
		Name: "billing_db_read_only_connections_closed_total",
		Help: "Connections closed because a statement met a read-only node (SQLSTATE 25006): left on a demoted primary or a standby.",
	})
)

// connState is what a connection's notice handler tells its committer.
// commits numbers the Commit and Do calls made on the connection;
// cancelled is the number of the one whose synchronous-replication wait
// was cancelled last. Both are atomics: a pooled transaction's Commit
// gives the connection back to the pool before it returns, so the
// committer reads them after another goroutine may hold the connection.
type connState struct {
	commits   atomic.Uint64
	cancelled atomic.Uint64
}

const stateKey = "billing.durable"

func stateOf(c *pgconn.PgConn) *connState {
	if c == nil {
		return nil
	}
	// Only the goroutine holding the connection gets here (its committer,
	// or its notice handler while that goroutine reads), so the map needs
	// no lock of its own.
	data := c.CustomData()
	st, _ := data[stateKey].(*connState)
	if st == nil {
		st = &connState{}
		data[stateKey] = st
	}
	return st
}

// Configure makes cfg's connections report cancelled synchronous waits to
// Commit and Do, close themselves on a read-only node, run with
// synchronous_commit on, and bound connects and pings
// (DefaultConnectTimeout, DefaultPingTimeout), unless cfg already sets
// those. logger receives one line per event; nil is slog.Default() at the
// time of the event.
func Configure(cfg *pgxpool.Config, logger *slog.Logger) {
	log := func() *slog.Logger {
		if logger != nil {
			return logger
		}
		return slog.Default()
	}
	cc := &cfg.ConnConfig.Config
	prevNotice, prevErr := cc.OnNotice, cc.OnPgError
	cc.OnNotice = func(c *pgconn.PgConn, n *pgconn.Notice) {
		if IsSyncRepCancel(n) {
			st := stateOf(c)
			st.cancelled.Store(st.commits.Load())
			notDurableTotal.Inc()
			log().Warn("database: a commit's wait for the synchronous standby was cancelled; it is not acknowledged",
				"server", serverOf(c), "notice", n.Message)
		}
		if prevNotice != nil {
			prevNotice(c, n)
		}
	}
	cc.OnPgError = func(c *pgconn.PgConn, pgErr *pgconn.PgError) bool {
		if pgErr.Code == readOnlyState {
			readOnlyClosedTotal.Inc()
			log().Warn("database: connection reached a read-only node; closing it so the pool reconnects to the primary",
				"server", serverOf(c), "error", pgErr.Message)
			return false
		}
		if prevErr != nil {
			return prevErr(c, pgErr)
		}
		return true
	}
	if _, set := cc.RuntimeParams["synchronous_commit"]; !set {
		// A role or database set to local (or off), pg_auto_failover's
		// documented speed-up, would acknowledge commits no standby has:
		// billing's sessions wait for the standby whatever the defaults.
		// A URL may still ask for more (remote_apply).
		cc.RuntimeParams["synchronous_commit"] = "on"
	}
	if cc.ConnectTimeout == 0 {
		// pgconn applies it to each host of a multi-host URL in turn.
		cc.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.PingTimeout == 0 {
		cfg.PingTimeout = DefaultPingTimeout
	}
}

func serverOf(c *pgconn.PgConn) string {
	if nc := c.Conn(); nc != nil {
		return nc.RemoteAddr().String()
	}
	return ""
}

// IsSyncRepCancel reports whether n is PostgreSQL's warning that a
// commit's wait for synchronous replication was cancelled (a cancel
// request, a statement timeout, or the connection being terminated) after
// the transaction had committed locally. PostgreSQL gives it no SQLSTATE
// of its own, so it is recognised by its text, as the server writes it
// with lc_messages in English (the default; see docs/deploying.md).
func IsSyncRepCancel(n *pgconn.Notice) bool {
	if n == nil || n.Severity != "WARNING" && n.SeverityUnlocalized != "WARNING" {
		return false
	}
	return strings.Contains(n.Message, "wait for synchronous replication") ||
		strings.Contains(n.Detail, "already committed locally, but might not have been replicated")
}

// Commit commits tx and fails with ErrNotDurable when PostgreSQL applied
// the commit without a synchronous standby's confirmation. tx's pool must
// have been configured with Configure; on another pool Commit is
// tx.Commit.
func Commit(ctx context.Context, tx pgx.Tx) error {
	var st *connState
	var n uint64
	if c := tx.Conn(); c != nil {
		st = stateOf(c.PgConn())
		n = st.commits.Add(1)
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	if st != nil && st.cancelled.Load() == n {
		return fmt.Errorf("commit: %w", ErrNotDurable)
	}
	return nil
}

// Do runs f on one connection of pool, for acknowledging writes that run
// as autocommit statements (each commits by itself, and waits for the
// standby the same way), and fails with ErrNotDurable when one of them
// was applied without a synchronous standby's confirmation.
func Do(ctx context.Context, pool *pgxpool.Pool, f func(conn *pgxpool.Conn) error) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	st := stateOf(conn.Conn().PgConn())
	n := st.commits.Add(1)
	if err := f(conn); err != nil {
		return err
	}
	if st.cancelled.Load() == n {
		return fmt.Errorf("autocommit: %w", ErrNotDurable)
	}
	return nil
}

// Unavailable reports whether err means the primary could not be reached
// or stopped being the primary under the statement: no connection could
// be made (every host of the URL refused, or none is read-write yet), the
// connection was lost or closed, the server is shutting down or starting
// (SQLSTATE 57P01-57P03, class 08), or it is now read-only (25006). Each
// is what a failover looks like from the application, and each is worth
// a retry once a new primary is up; the outcome of a commit cut off this
// way is unknown, so only replay-safe work may be retried.
func Unavailable(err error) bool {
	if err == nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		// The caller's own deadline, whatever it cut: a timeout, not a
		// failover (its connection is closed because of it).
		return false
	}
	var connect *pgconn.ConnectError
	var pgErr *pgconn.PgError
	var netErr net.Error
	switch {
	case errors.As(err, &connect), errors.Is(err, pgconn.ErrConnClosed),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	case errors.As(err, &pgErr):
		return pgErr.Code == readOnlyState || strings.HasPrefix(pgErr.Code, "08") ||
			pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03"
	case errors.As(err, &netErr):
		return !netErr.Timeout()
	}
	return false
}
