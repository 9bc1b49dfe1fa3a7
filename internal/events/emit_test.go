package events_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/events"
	"github.com/fibe-dev/billing/internal/kit/testdb"
)

// TestEmitOnceUnderRace: N goroutines replaying the same effect, each in a
// transaction of its own, write one event with one delivery per endpoint;
// the player's sequence still increases strictly.
func TestEmitOnceUnderRace(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ctx := context.Background()
	addEndpoint(t, pool, "http://127.0.0.1:1/all")
	addEndpoint(t, pool, "http://127.0.0.1:1/refunds", events.PaymentRefunded)
	addEndpoint(t, pool, "http://127.0.0.1:1/orders", events.OrderFulfilled)
	const n = 24
	var wg sync.WaitGroup
	outs := make([]events.Emitted, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			tx, err := pool.Begin(ctx)
			if err != nil {
				errs[i] = err
				return
			}
			defer func() { _ = tx.Rollback(ctx) }()
			if outs[i], errs[i] = events.EmitTx(ctx, tx, refunded(1, "payment:1:refund")); errs[i] == nil {
				errs[i] = tx.Commit(ctx)
			}
		})
	}
	wg.Wait()
	fresh := 0
	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, events.ID(events.PaymentRefunded, "payment:1:refund"), outs[i].ID)
		if !outs[i].Replayed {
			fresh++
			require.Equal(t, 2, outs[i].Deliveries, "the all-types and the refunds endpoints")
		}
	}
	require.Equal(t, 1, fresh, "one goroutine wrote the event")
	var nEvents, nDeliveries, nJobs int
	require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM event_deliveries),
		(SELECT count(*) FROM river_job WHERE kind = 'deliver_event')`).Scan(&nEvents, &nDeliveries, &nJobs))
	require.Equal(t, []int{1, 2, 2}, []int{nEvents, nDeliveries, nJobs})

	second := emit(t, pool, refunded(1, "payment:2:refund"))
	other := emit(t, pool, refunded(2, "payment:3:refund"))
	require.Greater(t, second.Sequence, int64(1), "sequences increase per player")
	require.Equal(t, int64(1), other.Sequence, "each player counts alone")
}

// TestEnvelope: the body is the agreed envelope, and a replay answers the
// stored event without touching it.
func TestEnvelope(t *testing.T) {
	t.Parallel()
	db := testdb.Tx(t)
	ctx := context.Background()
	first := emit(t, db, refunded(5, "k"))
	require.Equal(t, int64(1), first.Sequence)
	again := emit(t, db, refunded(5, "k"))
	require.True(t, again.Replayed)
	shown, err := events.Show(ctx, db, first.ID)
	require.NoError(t, err)
	var body map[string]any
	require.NoError(t, json.Unmarshal(shown.Body, &body))
	require.Regexp(t, `^evt_[0-9a-f]{32}$`, body["id"])
	require.Equal(t, first.ID, body["id"])
	require.Equal(t, events.PaymentRefunded, body["type"])
	require.Equal(t, events.APIVersion, body["api_version"])
	require.Regexp(t, `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$`, body["created_at"])
	require.EqualValues(t, 5, body["player_id"])
	require.EqualValues(t, 1, body["sequence"])
	require.Equal(t, map[string]any{"provider": "stripe", "payment_id": "cs_k", "order_id": float64(7),
		"amount": float64(999), "currency": "usd"}, body["data"])
	_, err = events.Show(ctx, db, "evt_nope")
	require.ErrorIs(t, err, events.ErrEventNotFound)
}

// TestAddEndpoint: adding is idempotent on the URL (the secret is shown
// once); a bad URL or type is refused and changes nothing.
func TestAddEndpoint(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ctx := context.Background()
	first := addEndpoint(t, pool, "https://example.test/hooks", events.OrderFulfilled)
	require.Regexp(t, `^whsec_[A-Za-z0-9+/]+=*$`, first.Secret)
	again, err := events.AddEndpoint(ctx, pool, "https://example.test/hooks", nil)
	require.NoError(t, err)
	require.False(t, again.Created)
	require.Empty(t, again.Secret, "the secret is shown once")
	require.Equal(t, first.Endpoint.ID, again.Endpoint.ID)
	for _, bad := range []string{"ftp://example.test/x", "example.test/x", "http://", "file:///etc/passwd", "http://u:p@example.test/"} {
		_, err := events.AddEndpoint(ctx, pool, bad, nil)
		require.ErrorIs(t, err, events.ErrBadURL, bad)
	}
	_, err = events.AddEndpoint(ctx, pool, "https://example.test/other", []string{"payment.stolen"})
	require.ErrorIs(t, err, events.ErrUnknownType)
	eps, err := events.Endpoints(ctx, pool)
	require.NoError(t, err)
	require.Len(t, eps, 1, "nothing was added by the refused calls")
	_, err = events.SetEnabled(ctx, pool, 999, false, "x")
	require.ErrorIs(t, err, events.ErrEndpointNotFound)
}

// TestCreatedAtGrowsWithSequence: a transaction that began first but
// emitted second (its effect committed second) gets the higher sequence
// and the later created_at, in its row and in its body.
func TestCreatedAtGrowsWithSequence(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ctx := context.Background()
	first, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = first.Rollback(ctx) }()
	_, err = first.Exec(ctx, `SELECT 1`) // its now() is fixed here, before the other began
	require.NoError(t, err)
	earlier := emit(t, pool, refunded(5, "payment:50:refund"))
	later, err := events.EmitTx(ctx, first, refunded(5, "payment:51:refund"))
	require.NoError(t, err)
	require.NoError(t, first.Commit(ctx))
	require.Greater(t, later.Sequence, earlier.Sequence)
	var rowOrder, bodyOrder bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT b.created_at > a.created_at,
			(b.payload->>'created_at')::timestamptz > (a.payload->>'created_at')::timestamptz
		FROM events a, events b WHERE a.id = $1 AND b.id = $2`, earlier.ID, later.ID).Scan(&rowOrder, &bodyOrder))
	require.True(t, rowOrder, "the event numbered later was created later")
	require.True(t, bodyOrder, "and its body says so")
}
