package idempotency_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/web/idempotency"
)

// TestWrapOutsideTx: the handler runs with no transaction open (it would
// call a provider there), a 503 releases the key so the retry runs again,
// a 2xx is stored and replayed, and concurrent requests with one key run
// the handler once at a time.
func TestWrapOutsideTx(t *testing.T) {
	t.Parallel()
	f := newFixture(t, idempotency.Options{})
	var status atomic.Int64
	status.Store(http.StatusServiceUnavailable)
	var calls, openTx atomic.Int64
	srv := httptest.NewServer(f.mw.WrapOutsideTx(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		var n int64
		_ = f.pool.QueryRow(r.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND state LIKE 'idle in transaction%'`).Scan(&n)
		openTx.Add(n)
		_, _ = f.pool.Exec(r.Context(), `INSERT INTO effects (player_id, body) VALUES ($1, 'outside')`, f.player)
		time.Sleep(20 * time.Millisecond)
		w.WriteHeader(int(status.Load()))
		fmt.Fprintf(w, `{"call":%d}`, calls.Load())
	}))
	t.Cleanup(srv.Close)
	f.srv = srv

	r := f.post(t, f.player, "k", "{}")
	require.Equal(t, http.StatusServiceUnavailable, r.status)
	require.Zero(t, f.keyCount(t, "running")+f.keyCount(t, "completed"), "a 503 releases the key")

	status.Store(http.StatusCreated)
	var wg sync.WaitGroup
	results := make([]result, 10)
	for i := range results {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/things", strings.NewReader("{}"))
			req.Header.Set("X-Player", fmt.Sprint(f.player))
			req.Header.Set("Idempotency-Key", "k")
			resp, err := client.Do(req)
			if err == nil {
				results[i] = result{status: resp.StatusCode}
				resp.Body.Close()
			}
		})
	}
	awaitGroup(t, &wg, "the ten racing requests' answers")
	created := 0
	for _, res := range results {
		require.Contains(t, []int{http.StatusCreated, http.StatusConflict}, res.status)
		if res.status == http.StatusCreated {
			created++
		}
	}
	require.GreaterOrEqual(t, created, 1)
	require.EqualValues(t, 2, calls.Load(), "the failed run, then exactly one run for ten racing requests")
	again := f.post(t, f.player, "k", "{}")
	require.True(t, again.replayed)
	require.Equal(t, `{"call":2}`, again.body)
	require.EqualValues(t, 2, calls.Load())
	require.Equal(t, 1, f.keyCount(t, "completed"))
	require.Zero(t, openTx.Load(), "no transaction is open while the handler runs")
	require.Equal(t, 2, f.effects(t), "the handler commits its own effects")
}
