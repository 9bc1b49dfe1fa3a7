package events_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/events"
	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/ops/audit"
	"github.com/fibe-dev/billing/internal/ops/audit/audittest"
)

// billing endpoints add URL, raced N times on one URL (half of the callers
// asking for one type, half for every type): one endpoint; every caller
// answered its id; exactly one created it and saw its secret, which is the
// one stored; the others were answered the endpoint unchanged, without a
// secret (docs/deploying.md: adding a URL twice changes nothing and does
// not show the secret again).
func TestAddEndpointRacingOnOneURL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	const n, url = 16, "http://127.0.0.1:1/raced"
	var wg sync.WaitGroup
	added := make([]events.Added, n)
	errs := make([]error, n)
	for i := range n {
		var types []string
		if i%2 == 0 {
			types = []string{events.DebtForgiven}
		}
		wg.Go(func() { added[i], errs[i] = events.AddEndpoint(ctx, pool, url, types) })
	}
	wg.Wait()
	var id int64
	var secret string
	var stored []string
	require.NoError(t, pool.QueryRow(ctx, `SELECT id, secret, types FROM event_endpoints WHERE url = $1`, url).Scan(&id, &secret, &stored))
	created := 0
	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, id, added[i].Endpoint.ID, "caller %d", i)
		require.Equal(t, url, added[i].Endpoint.URL)
		require.Equal(t, stored, added[i].Endpoint.Types, "caller %d was answered the endpoint as stored", i)
		if added[i].Created {
			created++
			require.Equal(t, secret, added[i].Secret, "the creator saw the stored secret")
		} else {
			require.Empty(t, added[i].Secret, "caller %d saw the secret of an endpoint it did not create", i)
		}
	}
	require.Equal(t, 1, created, "one caller created the endpoint")
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM event_endpoints`))
	audittest.RequireClean(t, pool, audit.Options{})
}

// billing events resend EVENT_ID, raced N times: N new deliveries of the
// one event to its endpoint, each with a River job of its own, and the
// event itself (its id, sequence, body and time) unchanged.
func TestResendRacing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	addEndpoint(t, pool, "http://127.0.0.1:1/resend")
	ev := emit(t, pool, refunded(1, "payment:9:refund"))
	require.Equal(t, 1, ev.Deliveries)
	var before string
	require.NoError(t, pool.QueryRow(ctx, `SELECT row_to_json(e)::text FROM events e WHERE id = $1`, ev.ID).Scan(&before))

	const n = 12
	var wg sync.WaitGroup
	sent := make([]int, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { sent[i], errs[i] = events.Resend(ctx, pool, ev.ID, 0) })
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, 1, sent[i], "resend %d made one delivery, to the one endpoint", i)
	}
	var after string
	require.NoError(t, pool.QueryRow(ctx, `SELECT row_to_json(e)::text FROM events e WHERE id = $1`, ev.ID).Scan(&after))
	require.JSONEq(t, before, after, "the event is unchanged")
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM events`))
	require.Equal(t, n+1, count(t, pool, `SELECT count(*) FROM event_deliveries WHERE event_id = $1`, ev.ID))
	require.Equal(t, n+1, count(t, pool, `SELECT count(DISTINCT (j.args->>'delivery_id')::bigint) FROM river_job j
		JOIN event_deliveries d ON d.id = (j.args->>'delivery_id')::bigint
		WHERE j.kind = 'deliver_event' AND d.event_id = $1`, ev.ID), "every delivery has a job")
	require.Equal(t, n+1, count(t, pool, `SELECT count(*) FROM river_job WHERE kind = 'deliver_event'`), "and no delivery two")
	audittest.RequireClean(t, pool, audit.Options{})
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}
