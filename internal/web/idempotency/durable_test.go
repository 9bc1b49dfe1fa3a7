package idempotency_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/platform/durable/durabletest"
	"github.com/fibe-dev/billing/internal/web/idempotency"
)

// lostPrimary serves f's route through a middleware whose pool commits on
// a primary that no synchronous standby confirms (each wait cancelled).
func (f *fixture) lostPrimary(t *testing.T) *fixture {
	t.Helper()
	stranded := durabletest.Strand(t, f.pool.Config().ConnString())
	durabletest.CancelWaits(t, stranded)
	mw := idempotency.NewMiddleware(idempotency.Options{Pool: stranded, Now: f.clock.Now,
		PlayerID: func(r *http.Request) (int64, bool) {
			id, err := strconv.ParseInt(r.Header.Get("X-Player"), 10, 64)
			return id, err == nil
		}})
	lost := &fixture{pool: f.pool, clock: f.clock, player: f.player}
	lost.srv = httptest.NewServer(mw.Wrap(func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
		f.calls.Add(1)
		(*f.handler.Load())(w, r, tx)
	}))
	t.Cleanup(lost.srv.Close)
	return lost
}

// A mutation whose commit no standby confirmed is answered 503 with
// Retry-After although PostgreSQL applied it; the client's retry with the
// same key replays it (once commits are confirmed again) and runs nothing
// a second time.
func TestMutationNotDurableAnswers503ThenReplays(t *testing.T) {
	t.Parallel()
	f := newFixture(t, idempotency.Options{})
	lost := f.lostPrimary(t)

	first := lost.post(t, f.player, "k-lost", `{"a":1}`)
	require.Equal(t, http.StatusServiceUnavailable, first.status, first.body)
	require.Contains(t, first.body, `"not_durable"`)
	require.NotEmpty(t, first.header.Get("Retry-After"))
	require.Equal(t, 1, f.effects(t), "applied on the primary, but not acknowledged")

	again := f.post(t, f.player, "k-lost", `{"a":1}`)
	require.Equal(t, http.StatusCreated, again.status, again.body)
	require.True(t, again.replayed)
	require.Equal(t, 1, f.effects(t))
	require.EqualValues(t, 1, f.calls.Load())
}

// A replay is answered only after its own write (the replay count) is
// confirmed: on a primary whose commits no standby confirms, even a key
// whose answer was stored long ago is answered 503, not replayed.
func TestReplayNotDurableAnswers503(t *testing.T) {
	t.Parallel()
	f := newFixture(t, idempotency.Options{})
	lost := f.lostPrimary(t)
	first := f.post(t, f.player, "k-replay", `{"a":1}`)
	require.Equal(t, http.StatusCreated, first.status)

	r := lost.post(t, f.player, "k-replay", `{"a":1}`)
	require.Equal(t, http.StatusServiceUnavailable, r.status, r.body)
	require.False(t, r.replayed)
	require.Contains(t, r.body, `"not_durable"`)

	r = f.post(t, f.player, "k-replay", `{"a":1}`)
	require.True(t, r.replayed)
	require.Equal(t, first.body, r.body)
	var replays int
	require.NoError(t, f.pool.QueryRow(context.Background(),
		`SELECT replays FROM idempotency_keys WHERE key = 'k-replay'`).Scan(&replays))
	require.Equal(t, 2, replays, "the refused replay's count was applied locally too")
	require.Equal(t, 1, f.effects(t))
}

// A claim acknowledges nothing, so it does not wait for the synchronous
// standby (only the mutation's commit does, and it carries the claim): on
// a primary whose standby never confirms, claiming a key returns at once;
// the connection's synchronous_commit is on again afterwards.
func TestClaimDoesNotWaitForTheStandby(t *testing.T) {
	t.Parallel()
	f := newFixture(t, idempotency.Options{})
	stranded := durabletest.Strand(t, f.pool.Config().ConnString())
	store := idempotency.NewStore(stranded, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	look, err := store.Begin(ctx, f.player, "k-claim", idempotency.NewFingerprint("POST", "/v1/things", []byte(`{}`)), time.Now())
	require.NoError(t, err, "the claim waited for a standby that never comes")
	require.NotNil(t, look.Claim)
	again, err := store.Begin(ctx, f.player, "k-claim", idempotency.NewFingerprint("POST", "/v1/things", []byte(`{}`)), time.Now())
	require.ErrorIs(t, err, idempotency.ErrInUse, "%+v", again)
	for range 5 { // every pooled connection: the setting was the claim's transaction's only
		var level string
		require.NoError(t, stranded.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&level))
		require.Equal(t, "on", level)
	}
}
