package httpapi

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/dev/procs"
	"github.com/fibe-dev/billing/internal/platform/durable/durabletest"
	"github.com/fibe-dev/billing/wallet"
)

// TestOpenAPIConformanceNotDurable: a conversion committed on a primary
// whose synchronous standby never confirms it (the wait cancelled, as
// pg_auto_failover does when it turns synchronous replication off) is
// answered with the documented 503 not_durable and Retry-After, not 201,
// although PostgreSQL applied it. The client's retry with the same key,
// once commits are confirmed again, replays that one conversion; a replay
// through the unconfirmed primary is refused the same way.
func TestOpenAPIConformanceNotDurable(t *testing.T) {
	t.Parallel()
	var opts Options
	e := newEnvWith(t, nil, func(o *Options) { opts = *o })
	stranded := durabletest.Strand(t, e.pool.Config().ConnString())
	durabletest.CancelWaits(t, stranded)
	opts.Pool, opts.Gatherer = stranded, prometheus.NewRegistry()
	s, err := New(opts)
	require.NoError(t, err)
	lost := *e
	lost.srv = httptest.NewServer(s)
	t.Cleanup(lost.srv.Close)
	alice := e.newPlayer("alice")
	e.credit(alice, wallet.Mana, 10)
	conversion := call{as: alice, method: "POST", path: "/v1/conversions", key: "unconfirmed", body: `{"mana":4}`}
	legs := `SELECT count(*) FROM wallet_transactions WHERE kind = 'conversion'`

	refused := conversion
	refused.want, refused.code = 503, CodeNotDurable
	requireRetryAfter(t, newConformance(t, &lost).do(refused))
	require.Equal(t, 2, e.count(legs), "applied on the primary, not acknowledged")

	ok := conversion
	ok.want = 201
	again := newConformance(t, e).do(ok)
	require.True(t, again.replayed(), "the retry replays the conversion the primary applied")
	requireRetryAfter(t, newConformance(t, &lost).do(refused))
	require.Equal(t, 2, e.count(legs), "one conversion: two legs")
	require.Equal(t, int64(6), balance(t, e, alice, wallet.Mana))
	e.requireAuditClean()
}

// TestOpenAPIConformanceDatabaseUnavailable: with no database to reach (a
// primary lost, its successor not promoted yet) the API answers the
// documented 503 unavailable with Retry-After, not a 500.
func TestOpenAPIConformanceDatabaseUnavailable(t *testing.T) {
	t.Parallel()
	var opts Options
	e := newEnvWith(t, nil, func(o *Options) { opts = *o })
	alice := e.newPlayer("alice")
	port, err := procs.FreePort()
	require.NoError(t, err)
	gone, err := pgxpool.New(context.Background(), fmt.Sprintf("postgres://billing@127.0.0.1:%d/billing?sslmode=disable", port))
	require.NoError(t, err)
	t.Cleanup(gone.Close)
	opts.Pool, opts.Gatherer = gone, prometheus.NewRegistry()
	s, err := New(opts)
	require.NoError(t, err)
	lost := *e
	lost.srv = httptest.NewServer(s)
	t.Cleanup(lost.srv.Close)
	c := newConformance(t, &lost)
	requireRetryAfter(t, c.do(call{as: alice, method: "POST", path: "/v1/conversions", key: "no-db", body: `{"mana":1}`,
		want: 503, code: CodeUnavailable}))
	requireRetryAfter(t, c.do(call{as: alice, method: "GET", path: "/v1/wallets", want: 503, code: CodeUnavailable}))
}
