package webhook_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/payments/webhook"
	"github.com/fibe-dev/billing/internal/platform/durable/durabletest"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
)

// A claim whose commit no synchronous standby confirmed (its wait was
// cancelled, as pg_auto_failover's keeper does when it turns synchronous
// replication off) is answered 503 although PostgreSQL committed it on
// the primary, so the provider redelivers. The redelivery, once commits
// are confirmed again, finds the claim and writes its count, a write
// whose commit waits for the standby and so also covers the first one:
// it is answered 200 duplicate. One row, one job, one credit.
func TestClaimNotDurableAnswers503(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		body func(e *env) []byte
		jobs int
	}{
		{"payment", func(e *env) []byte {
			o := e.order("mana_1000", "stripe")
			return providerevents.CompletedEvent("stripe", "evt_unconfirmed_payment", o.ID, o.Amount, o.Currency)
		}, 1},
		{"acknowledged only", func(*env) []byte {
			return []byte(`{"id":"evt_unconfirmed_cust","object":"event","type":"customer.created","data":{"object":{"id":"cus_1"}}}`)
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			stranded := durabletest.Strand(t, e.pool.Config().ConnString())
			cancelled := durabletest.CancelWaits(t, stranded)
			lost := httpServer(t, webhook.NewHandler(webhook.Options{Pool: stranded, River: e.river,
				Providers: intakes(secrets), Logger: discard}))
			body := tc.body(e)

			h, v := sign("stripe", body, time.Now())
			a := postTo(t, lost, "stripe", body, h, v)
			require.Equal(t, http.StatusServiceUnavailable, a.Status, a.Body)
			require.Equal(t, "unavailable", a.code())
			require.Positive(t, cancelled.Load(), a.Body)
			require.Equal(t, 1, e.events(), "PostgreSQL applied the claim locally: exactly the hole")

			// A duplicate on the stranded primary is refused the same way.
			h, v = sign("stripe", body, time.Now())
			a = postTo(t, lost, "stripe", body, h, v)
			require.Equal(t, http.StatusServiceUnavailable, a.Status, a.Body)

			a = e.deliver("stripe", body)
			require.Equal(t, http.StatusOK, a.Status, a.Body)
			require.Equal(t, "duplicate", a.status())
			require.Equal(t, 1, e.events())
			require.Equal(t, tc.jobs, e.jobs())
			require.Equal(t, 2, e.count(`SELECT duplicate_deliveries::int FROM webhook_events`),
				"the refused duplicate and the redelivery")
			if tc.jobs > 0 {
				require.Equal(t, "completed", e.waitJobs(1)[0].State)
				require.Equal(t, int64(1000), e.mana())
			}
			e.requireClean()
		})
	}
}
