package httpapi

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/domain/players"
	"github.com/fibe-dev/billing/wallet"
)

// sent is one request of a racing client: when the client started it
// (before anything went on the wire) and what it answered.
type sent struct {
	start  time.Time
	status int
	post   bool
	err    error
}

// send is e.do without require, for goroutines other than the test's.
func (e *env) send(key, method, path, idemKey, body string) (int, []byte, error) {
	req, err := http.NewRequest(method, e.srv.URL+path, bytes.NewBufferString(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, err
}

func (e *env) keyID(p player) int64 {
	e.t.Helper()
	keys, err := players.ListKeys(context.Background(), e.pool, p.id)
	require.NoError(e.t, err)
	require.Len(e.t, keys, 1)
	return keys[0].ID
}

// A key revoked while N clients hammer the API with it: every request that
// started after the revocation committed answers 401, and moved nothing;
// the requests that answered 201 before it each converted once (the
// conversions in the ledger are exactly the 201s); the player's other
// players are untouched; the full audit is clean. Nothing but the database
// decides: the server keeps no key in memory.
func TestRevokedKeyRefusedFromItsCommitOn(t *testing.T) {
	t.Parallel()
	const clients, after = 8, 3 // each client goes on until `after` of its requests started after the commit
	e := newEnv(t)
	alice, bob := e.newPlayer("alice"), e.newPlayer("bob")
	e.credit(alice, wallet.Mana, 1_000_000)
	keyID := e.keyID(alice)

	var committed atomic.Pointer[time.Time]
	var answered atomic.Int64
	results := make([][]sent, clients)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() { results[c] = hammer(e, alice.key, c, after, &committed, &answered) })
	}
	deadline := time.Now().Add(60 * time.Second)
	for answered.Load() < 4*clients {
		require.True(t, time.Now().Before(deadline), "the clients got no answers within 60 s")
		time.Sleep(5 * time.Millisecond)
	}
	_, changed, err := players.Revoke(context.Background(), e.pool, alice.id, keyID, "race")
	require.NoError(t, err)
	require.True(t, changed)
	now := time.Now()
	committed.Store(&now)
	wg.Wait()

	created, late := 0, 0
	for _, rs := range results {
		for _, r := range rs {
			require.NoError(t, r.err)
			if r.start.After(now) {
				late++
				require.Equal(t, http.StatusUnauthorized, r.status, "a request started %s after the revocation committed", r.start.Sub(now))
				continue
			}
			require.Contains(t, []int{http.StatusOK, http.StatusCreated, http.StatusUnauthorized}, r.status)
			if r.status == http.StatusCreated {
				created++
			}
		}
	}
	require.GreaterOrEqual(t, late, clients*after)
	require.Positive(t, created, "conversions ran before the revocation")
	require.Equal(t, created, e.count(`SELECT count(*) FROM wallet_transactions WHERE kind = 'conversion' AND player_id = $1 AND amount < 0`,
		alice.id), "every 201 converted once, no 401 converted")
	requireProblem(t, e.do(alice, http.MethodGet, "/v1/wallets", "", ""), http.StatusUnauthorized, CodeUnauthorized)
	require.Equal(t, http.StatusOK, e.do(bob, http.MethodGet, "/v1/wallets", "", "").status)
	e.requireAuditClean()
}

// hammer sends requests with key, alternating a read and a conversion, until
// `after` of them started after the time committed holds. Each goroutine
// has a deadline: it stops with an error rather than run for ever.
func hammer(e *env, key string, client, after int, committed *atomic.Pointer[time.Time], answered *atomic.Int64) []sent {
	var out []sent
	deadline := time.Now().Add(90 * time.Second)
	for i, late := 0, 0; late < after; i++ {
		if time.Now().After(deadline) {
			return append(out, sent{err: fmt.Errorf("client %d: the revocation never came within 90 s", client)})
		}
		r := sent{start: time.Now(), post: i%2 == 1}
		if c := committed.Load(); c != nil && r.start.After(*c) {
			late++
		}
		if r.post {
			r.status, _, r.err = e.send(key, http.MethodPost, "/v1/conversions", fmt.Sprintf("c%d-%d", client, i), `{"mana":1}`)
		} else {
			r.status, _, r.err = e.send(key, http.MethodGet, "/v1/wallets", "", "")
		}
		answered.Add(1)
		out = append(out, r)
	}
	return out
}

// A rotation: both keys work until the old one's time; a rotation "at
// once" refuses the old key from its commit on. Idempotency-Keys belong to
// the player, not to the key: a retry sent with the new key replays the
// answer the old key got, so a client rotates in the middle of a retry.
func TestRotatedKeyWorksUntilItsTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	alice := e.newPlayer("alice")
	e.credit(alice, wallet.Mana, 100)
	first := e.do(alice, http.MethodPost, "/v1/conversions", "rot-1", `{"mana":10}`)
	require.Equal(t, http.StatusCreated, first.status, string(first.raw))

	rot, err := players.Rotate(ctx, e.pool, players.RotateParams{PlayerID: alice.id, OldValidFor: time.Hour})
	require.NoError(t, err)
	next := player{id: alice.id, key: rot.APIKey}
	require.Equal(t, http.StatusOK, e.do(alice, http.MethodGet, "/v1/wallets", "", "").status, "the old key works until its time")
	again := e.do(next, http.MethodPost, "/v1/conversions", "rot-1", `{"mana":10}`)
	require.Equal(t, http.StatusCreated, again.status, string(again.raw))
	require.True(t, again.replayed(), "a retry with the new key replays")
	require.Equal(t, first.raw, again.raw)

	now, err := players.Rotate(ctx, e.pool, players.RotateParams{PlayerID: alice.id, KeyID: rot.New.ID})
	require.NoError(t, err)
	requireProblem(t, e.do(next, http.MethodGet, "/v1/wallets", "", ""), http.StatusUnauthorized, CodeUnauthorized)
	require.Equal(t, http.StatusOK, e.do(player{id: alice.id, key: now.APIKey}, http.MethodGet, "/v1/wallets", "", "").status)
	require.Equal(t, http.StatusOK, e.do(alice, http.MethodGet, "/v1/wallets", "", "").status, "the first key's hour is not over")
	_, _, err = players.Revoke(ctx, e.pool, alice.id, rot.Old.ID, "")
	require.NoError(t, err)
	requireProblem(t, e.do(alice, http.MethodGet, "/v1/wallets", "", ""), http.StatusUnauthorized, CodeUnauthorized)
	require.Equal(t, 1, e.count(`SELECT count(*) FROM wallet_transactions WHERE kind = 'conversion' AND amount < 0`))
	e.requireAuditClean()
}
