package idempotency_test

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/web/idempotency"
)

func TestParseKey(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"abc":              "abc",
		`"abc"`:            "abc",
		` "a b" `:          "a b",
		`"a\"b\\c"`:        `a"b\c`,
		"8e4f0c2a-9b1d-4c": "8e4f0c2a-9b1d-4c",
	} {
		got, err := idempotency.ParseKey(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", `""`, `"a"b"`, `"a\x"`, "tab\there", "\u00e9", string(make([]byte, 256))} {
		_, err := idempotency.ParseKey(in)
		require.ErrorIs(t, err, idempotency.ErrInvalidKey, "%q", in)
	}
}

// A holder that died between its claim and its transaction blocks the key
// until the lock times out; then the next request takes it over and runs.
func TestStaleClaimIsTakenOver(t *testing.T) {
	t.Parallel()
	f := newFixture(t, idempotency.Options{LockTimeout: time.Minute})
	ctx := context.Background()
	fp := idempotency.NewFingerprint(http.MethodPost, "/v1/things", []byte(`{}`))
	dead, err := f.mw.Store().Begin(ctx, f.player, "k", fp, f.clock.Now())
	require.NoError(t, err)
	require.NotNil(t, dead.Claim)

	r := f.post(t, f.player, "k", `{}`)
	require.Equal(t, http.StatusConflict, r.status)
	require.Contains(t, r.body, "idempotency_key_in_use")

	f.clock.Add(time.Minute + time.Second)
	r = f.post(t, f.player, "k", `{}`)
	require.Equal(t, http.StatusCreated, r.status)
	require.False(t, r.replayed)
	require.Equal(t, 1, f.effects(t))

	// The dead holder, should it wake up, has lost its claim.
	tx := testdb.Begin(t, f.pool)
	require.ErrorIs(t, f.mw.Store().Lock(ctx, tx, dead.Claim), idempotency.ErrInUse)
	require.ErrorIs(t, f.mw.Store().Complete(ctx, tx, dead.Claim, &idempotency.Response{Status: 200}, f.clock.Now()), idempotency.ErrInUse)
	require.NoError(t, f.mw.Store().Release(ctx, dead.Claim))
	require.True(t, f.post(t, f.player, "k", `{}`).replayed, "the completed key survives the stale release")
}

// A live holder keeps its key row locked while it works, so even a lock far
// past its timeout is not taken over: the duplicate gets 409, never a
// second run.
func TestSlowLiveHolderIsNotTakenOver(t *testing.T) {
	t.Parallel()
	f := newFixture(t, idempotency.Options{LockTimeout: time.Millisecond})
	started, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock) // a failed assertion still lets the first request end
	ok := f.effect(http.StatusCreated, 0)
	var runs atomic.Int64
	f.setHandler(func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) {
		// Only the first run blocks: a duplicate that took the key over
		// runs through and fails the 409 check below, rather than hang.
		if runs.Add(1) == 1 {
			close(started)
			blockUntil(t, release, "the test to release the first request")
		}
		ok(w, r, tx)
	})
	first := make(chan result, 1)
	go func() { first <- f.post(t, f.player, "k", `{}`) }()
	await(t, started, "the first request's handler")
	f.clock.Add(time.Hour)
	dup := f.post(t, f.player, "k", `{}`)
	require.Equal(t, http.StatusConflict, dup.status, "a duplicate of a live holder's key: %s", dup.body)
	unblock()
	require.Equal(t, http.StatusCreated, await(t, first, "the first request's answer").status)
	require.True(t, f.post(t, f.player, "k", `{}`).replayed)
	require.Equal(t, 1, f.effects(t))
	require.EqualValues(t, 1, f.calls.Load())
}

func TestExpiredKeyRunsAgain(t *testing.T) {
	t.Parallel()
	f := newFixture(t, idempotency.Options{})
	require.False(t, f.post(t, f.player, "k", `{}`).replayed)
	f.clock.Add(idempotency.TTL - time.Second)
	require.True(t, f.post(t, f.player, "k", `{}`).replayed)
	f.clock.Add(2 * time.Second)
	r := f.post(t, f.player, "k", `{"other":"body"}`)
	require.Equal(t, http.StatusCreated, r.status, "an expired key is forgotten, whatever it was used for")
	require.False(t, r.replayed)
	require.Equal(t, 2, f.effects(t))
}

func TestReaperRemovesOnlyKeysOlderThan24h(t *testing.T) {
	t.Parallel()
	f := newFixture(t, idempotency.Options{})
	ctx := context.Background()
	now := f.clock.Now()
	ages := map[string]time.Duration{
		"old-completed":   25 * time.Hour,
		"edge-completed":  idempotency.TTL + time.Second,
		"young-completed": idempotency.TTL - time.Second,
		"fresh":           time.Minute,
		"old-running":     30 * time.Hour,
	}
	for key, age := range ages {
		status, respStatus := "completed", any(201)
		var lockedAt any
		if key == "old-running" {
			status, respStatus, lockedAt = "running", nil, now.Add(-age)
		}
		_, err := f.pool.Exec(ctx, `
			INSERT INTO idempotency_keys (player_id, key, fingerprint, status, response_status, locked_at, created_at)
			VALUES ($1, $2, '\x00', $3, $4, $5, $6)`, f.player, key, status, respStatus, lockedAt, now.Add(-age))
		require.NoError(t, err)
	}
	worker := &idempotency.ReapWorker{Store: f.mw.Store(), Now: f.clock.Now}
	tw := rivertest.NewWorker(t, riverpgxv5.New(f.pool), &river.Config{}, worker)
	tx := testdb.Begin(t, f.pool)
	res, err := tw.Work(ctx, t, tx, idempotency.ReapArgs{}, nil)
	require.NoError(t, err)
	require.Equal(t, river.EventKindJobCompleted, res.EventKind)
	require.JSONEq(t, `{"deleted":3}`, string(res.Job.Output()))
	require.NoError(t, tx.Commit(ctx))

	rows, err := f.pool.Query(ctx, `SELECT key FROM idempotency_keys ORDER BY key`)
	require.NoError(t, err)
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"fresh", "young-completed"}, left)
}
