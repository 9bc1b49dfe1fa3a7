package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestScrapeSumsOnlyGrow: a process that stops answering counts as at its
// last answer, and one whose counters start again from zero (restarted)
// keeps what it counted before, so a fault's difference of two scrapes is
// never negative.
func TestScrapeSumsOnlyGrow(t *testing.T) {
	t.Parallel()
	var five03, down atomic.Int64
	steady := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, `billing_http_requests_total{code="503",route="/v1/orders"} 10`)
	}))
	t.Cleanup(steady.Close)
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if down.Load() == 1 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "billing_http_requests_total{code=\"503\",route=\"/v1/orders\"} %d\n", five03.Load())
		fmt.Fprintln(w, `billing_db_commits_not_durable_total 2`)
	}))
	t.Cleanup(flaky.Close)
	r := &Run{hc: steady.Client(), fo: &failoverRun{metrics: []string{
		strings.TrimPrefix(steady.URL, "http://"), strings.TrimPrefix(flaky.URL, "http://")}}}
	ctx := context.Background()

	five03.Store(229)
	require.Equal(t, counts{answered503: 239, notDurable: 2}, r.scrape(ctx))
	down.Store(1)
	require.Equal(t, counts{answered503: 239, notDurable: 2}, r.scrape(ctx), "a silent process counts as last seen")
	down.Store(0)
	five03.Store(5) // restarted: its counters began again
	require.Equal(t, counts{answered503: 244, notDurable: 4}, r.scrape(ctx), "a restart keeps what was counted")
}
