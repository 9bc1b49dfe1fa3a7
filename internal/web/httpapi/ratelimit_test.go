package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/wallet"
)

// One player's requests beyond its token bucket are refused with a 429
// problem and a Retry-After, before anything runs; another player is not
// affected; the refused request, retried after the delay, runs once.
func TestRateLimitAnswers429WithRetryAfter(t *testing.T) {
	t.Parallel()
	// The bucket's clock stands still until the test moves it: on a busy
	// machine the three GETs may take longer than a refill.
	var mu sync.Mutex
	at := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return at }
	e := newEnvWith(t, func(s *setup) {
		s.RateLimit = RateLimit{PerSecond: 1, Burst: 3}
		s.limiterClock = clock
	})
	alice, bob := e.newPlayer("alice"), e.newPlayer("bob")
	e.credit(alice, wallet.Mana, 100)
	for range 3 {
		require.Equal(t, http.StatusOK, e.do(alice, http.MethodGet, "/v1/wallets", "", "").status)
	}
	r := e.do(alice, http.MethodPost, "/v1/conversions", "after-429", `{"mana":5}`)
	requireProblem(t, r, http.StatusTooManyRequests, CodeRateLimited)
	wait, err := strconv.Atoi(r.header.Get("Retry-After"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, wait, 1)
	require.Equal(t, 0, e.count(`SELECT count(*) FROM idempotency_keys`), "a refused request claims nothing")
	require.Equal(t, http.StatusOK, e.do(bob, http.MethodGet, "/v1/wallets", "", "").status, "bob has his own bucket")

	mu.Lock()
	at = at.Add(time.Duration(wait) * time.Second)
	mu.Unlock()
	r = e.do(alice, http.MethodPost, "/v1/conversions", "after-429", `{"mana":5}`)
	require.Equal(t, http.StatusCreated, r.status, string(r.raw))
	require.Equal(t, int64(95), balance(t, e, alice, wallet.Mana))
	e.requireAuditClean()
}

// Fairness: alice floods the API with conversions that all block (her
// wallet row is locked), more of them than the server's pool has
// connections. Without a per-player bound they would hold every connection
// and bob's GET would wait for them; with it, alice holds at most her
// share and bob is served at once. Then every one of alice's conversions
// runs exactly once.
func TestOneFloodingPlayerCannotStarveAnother(t *testing.T) {
	t.Parallel()
	const share, flood = 4, 60 // the server's pool has 30 connections
	e := newEnvWith(t, func(s *setup) { s.RateLimit = RateLimit{Concurrent: share} })
	alice, bob := e.newPlayer("alice"), e.newPlayer("bob")
	e.credit(alice, wallet.Mana, 1000)
	ctx := context.Background()
	side, err := pgxpool.New(ctx, e.pool.Config().ConnString()) // the test's own connections
	require.NoError(t, err)
	t.Cleanup(side.Close)
	lock, err := side.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lock.Rollback(ctx) })
	_, err = lock.Exec(ctx, `SELECT 1 FROM wallets WHERE player_id = $1 FOR UPDATE`, alice.id)
	require.NoError(t, err)

	statuses := make(chan int, flood)
	var wg sync.WaitGroup
	for i := range flood {
		wg.Go(func() {
			statuses <- postConversion(e, alice, fmt.Sprintf("flood-%d", i))
		})
	}
	running := func() int {
		var n int
		_ = side.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE player_id = $1 AND status = 'running'`, alice.id).Scan(&n)
		return n
	}
	require.Eventually(t, func() bool { return running() >= share }, waitDeadline, 10*time.Millisecond, "the requests never filled their share")
	time.Sleep(200 * time.Millisecond) // let any request beyond the share show itself
	require.Equal(t, share, running(), "alice holds at most her share")

	// Alice's conversions stay blocked until the lock is rolled back
	// below, so bob answered at all means he was not queued behind them
	// (without the bound his GET would wait for a connection until this
	// client's deadline).
	client := &http.Client{Timeout: waitDeadline}
	req, err := http.NewRequest(http.MethodGet, e.srv.URL+"/v1/wallets", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+bob.key)
	resp, err := client.Do(req)
	require.NoError(t, err, "bob is served while alice floods")
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)

	require.NoError(t, lock.Rollback(ctx))
	wg.Wait()
	close(statuses)
	for s := range statuses {
		require.Equal(t, http.StatusCreated, s)
	}
	require.Equal(t, int64(1000-flood), balance(t, e, alice, wallet.Mana))
	e.requireAuditClean()
}

// postConversion converts 1 Mana as p under key and returns the status; it
// may run on any goroutine (no require).
func postConversion(e *env, p player, key string) int {
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/v1/conversions", strings.NewReader(`{"mana":1}`))
	if err != nil {
		return 0
	}
	req.Header.Set("Authorization", "Bearer "+p.key)
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// Twenty racing retries of one conversion under a tight in-flight bound:
// the ones that wait their turn replay the first answer; money moves once.
func TestRacingRetriesUnderTheLimiterHaveOneEffect(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, func(s *setup) { s.RateLimit = RateLimit{PerSecond: 1000, Burst: 1000, Concurrent: 2} })
	alice := e.newPlayer("alice")
	e.credit(alice, wallet.Mana, 100)
	requireOneEffect(t, raceSame(e, alice, 20, "/v1/conversions", "race-limited", `{"mana":30}`), http.StatusCreated)
	require.Equal(t, int64(70), balance(t, e, alice, wallet.Mana))
	require.Equal(t, int64(30), balance(t, e, alice, wallet.Sparks))
	e.requireAuditClean()
}
