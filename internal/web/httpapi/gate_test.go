package httpapi

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/internal/web/requests"
	"github.com/fibe-dev/billing/wallet"
)

// The funded gate: create, restart and sync answer 402 and enqueue nothing
// on a Marquee that is not funded, and 202 once it is; the jobs record the
// playground's transitions and the requests report them.
func TestNotFundedGateAndRequests(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker()
	alice := e.newPlayer("alice")
	m := e.do(alice, http.MethodPost, "/v1/marquees", "", `{"name":"box","plan":"standard"}`)
	require.Equal(t, http.StatusCreated, m.status)
	marquee := "/v1/marquees/" + m.str("id")
	nothingQueued := func() {
		t.Helper()
		require.Equal(t, 0, e.count(`SELECT count(*) FROM river_job WHERE kind LIKE 'playground_%'`))
	}

	requireProblem(t, e.do(alice, http.MethodPost, marquee+"/playgrounds", "k1", `{"name":"pg"}`), http.StatusPaymentRequired, CodeMarqueeNotFunded)
	require.Equal(t, 0, e.count(`SELECT count(*) FROM playgrounds`))
	nothingQueued()

	// Funding without Sparks: the request succeeds, the outcome says insufficient.
	r := e.do(alice, http.MethodPost, marquee+"/fund", "f1", "")
	require.Equal(t, http.StatusAccepted, r.status, string(r.raw))
	done := e.waitRequest(alice, r.str("request_id"))
	require.Equal(t, requests.Succeeded, done.str("status"))
	require.Equal(t, "insufficient", done.body["result"].(map[string]any)["outcome"])
	requireProblem(t, e.do(alice, http.MethodPost, marquee+"/playgrounds", "k2", ``), http.StatusPaymentRequired, CodeMarqueeNotFunded)

	e.credit(alice, wallet.Sparks, 250)
	r = e.do(alice, http.MethodPost, marquee+"/fund", "f2", "")
	require.Equal(t, http.StatusAccepted, r.status)
	require.Equal(t, "/v1/requests/"+r.str("request_id"), r.header.Get("Location"))
	require.Equal(t, "funded", e.waitRequest(alice, r.str("request_id")).body["result"].(map[string]any)["outcome"])
	require.Equal(t, true, e.do(alice, http.MethodGet, marquee, "", "").body["funded"])

	r = e.do(alice, http.MethodPost, marquee+"/playgrounds", "k3", `{"name":"pg"}`)
	require.Equal(t, http.StatusAccepted, r.status, string(r.raw))
	pg := "/v1/playgrounds/" + r.str("playground_id")
	// The playground exists as soon as the 202 is sent (same transaction as
	// its job); the worker may already have provisioned it by this GET.
	require.Contains(t, []string{"provisioning", "running"}, e.do(alice, http.MethodGet, pg, "", "").str("status"))
	done = e.waitRequest(alice, r.str("request_id"))
	require.Equal(t, requests.Succeeded, done.str("status"))
	require.Equal(t, "running", done.body["result"].(map[string]any)["status"])
	got := e.do(alice, http.MethodGet, pg, "", "")
	require.Equal(t, "running", got.str("status"))
	require.NotNil(t, got.body["running_at"])

	for _, op := range []string{"restart", "sync"} {
		r = e.do(alice, http.MethodPost, pg+"/"+op, "", "")
		require.Equal(t, http.StatusAccepted, r.status, string(r.raw))
		require.Equal(t, requests.Succeeded, e.waitRequest(alice, r.str("request_id")).str("status"))
	}
	got = e.do(alice, http.MethodGet, pg, "", "")
	require.EqualValues(t, 1, got.body["restart_count"])
	require.EqualValues(t, 1, got.body["sync_count"])
	require.NotNil(t, got.body["restarted_at"])
	require.NotNil(t, got.body["synced_at"])

	// The next service day, before its funding: everything is 402 again.
	e.clock.Add(24 * time.Hour)
	jobsBefore := e.count(`SELECT count(*) FROM river_job WHERE kind LIKE 'playground_%'`)
	requireProblem(t, e.do(alice, http.MethodPost, pg+"/restart", "", ""), http.StatusPaymentRequired, CodeMarqueeNotFunded)
	requireProblem(t, e.do(alice, http.MethodPost, pg+"/sync", "", ""), http.StatusPaymentRequired, CodeMarqueeNotFunded)
	requireProblem(t, e.do(alice, http.MethodPost, marquee+"/playgrounds", "", ""), http.StatusPaymentRequired, CodeMarqueeNotFunded)
	require.Equal(t, jobsBefore, e.count(`SELECT count(*) FROM river_job WHERE kind LIKE 'playground_%'`))
	require.Equal(t, 1, e.count(`SELECT count(*) FROM playgrounds`))

	r = e.do(alice, http.MethodPost, marquee+"/fund", "", "")
	require.Equal(t, "funded", e.waitRequest(alice, r.str("request_id")).body["result"].(map[string]any)["outcome"])
	for _, op := range []string{"restart", "sync"} {
		r = e.do(alice, http.MethodPost, pg+"/"+op, "", "")
		require.Equal(t, http.StatusAccepted, r.status, string(r.raw))
		require.Equal(t, requests.Succeeded, e.waitRequest(alice, r.str("request_id")).str("status"))
	}
	require.Equal(t, http.StatusAccepted, e.do(alice, http.MethodPost, marquee+"/playgrounds", "", "").status)
	require.EqualValues(t, 50, balance(t, e, alice, wallet.Sparks), "two days at 100 Sparks")
	e.requireAuditClean()
}

func balance(t *testing.T, e *env, p player, c wallet.Currency) int64 {
	t.Helper()
	b, err := e.wallets.Balances(context.Background(), p.id)
	require.NoError(t, err)
	return b[c]
}

// Without a worker a request stays queued; a cancelled job reports
// cancelled with its error.
func TestRequestStatusesFromRiver(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := e.newPlayer("alice")
	marquee := e.fundedMarquee(alice)
	r := e.do(alice, http.MethodPost, "/v1/marquees/"+idStr(marquee)+"/playgrounds", "", "")
	require.Equal(t, http.StatusAccepted, r.status)
	req := "/v1/requests/" + r.str("request_id")
	got := e.do(alice, http.MethodGet, req, "", "")
	require.Equal(t, requests.Queued, got.str("status"))
	require.Equal(t, "playground_create", got.str("kind"))
	require.Nil(t, got.body["result"])

	var jobID int64
	require.NoError(t, e.pool.QueryRow(context.Background(), `SELECT job_id FROM api_requests WHERE id = $1`, mustID(t, r.str("request_id"))).Scan(&jobID))
	_, err := e.river.JobCancel(context.Background(), jobID)
	require.NoError(t, err)
	got = e.do(alice, http.MethodGet, req, "", "")
	require.Equal(t, requests.Cancelled, got.str("status"))

	for state, want := range map[rivertype.JobState]string{
		rivertype.JobStateAvailable: requests.Queued, rivertype.JobStateScheduled: requests.Queued,
		rivertype.JobStatePending: requests.Queued, rivertype.JobStateRetryable: requests.Queued,
		rivertype.JobStateRunning: requests.Running, rivertype.JobStateCompleted: requests.Succeeded,
		rivertype.JobStateDiscarded: requests.Failed, rivertype.JobStateCancelled: requests.Cancelled,
	} {
		require.Equal(t, want, requests.Status(state), state)
	}
}

// A job that finds its Marquee unfunded when it runs is cancelled, and the
// request says why.
func TestJobCancelledWhenFundingLapsed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice := e.newPlayer("alice")
	marquee := e.fundedMarquee(alice)
	r := e.do(alice, http.MethodPost, "/v1/marquees/"+idStr(marquee)+"/playgrounds", "", "")
	require.Equal(t, http.StatusAccepted, r.status)
	e.clock.Add(48 * time.Hour) // the worker runs after the paid day ended
	e.startWorker()
	done := e.waitRequest(alice, r.str("request_id"))
	require.Equal(t, requests.Cancelled, done.str("status"))
	require.Contains(t, done.str("error"), enforcer.ErrNotFunded.Error())
	require.Equal(t, "provisioning", e.do(alice, http.MethodGet, "/v1/playgrounds/"+r.str("playground_id"), "", "").str("status"))
}
