package webhook_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/payments/webhook"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
)

// Each check of invariants 6 and 11 reports the violation it exists for,
// planted behind the intake's back on a history that was clean: a claimed
// payment with no outcome whose job is cancelled, a job whose claim is
// gone, and an event with two jobs.
func TestAuditChecksFindTheirViolation(t *testing.T) {
	t.Parallel()
	breaks := map[string]string{
		"event_without_outcome": `UPDATE webhook_events SET outcome = NULL, outcome_ref = NULL, outcome_at = NULL;
			UPDATE river_job SET state = 'cancelled' WHERE kind = 'fulfill_order'`,
		"job_without_claimed_event": `DELETE FROM webhook_events`,
		"event_with_several_jobs": `INSERT INTO river_job (kind, args, queue, state, max_attempts, finalized_at)
			SELECT kind, args, queue, 'completed', max_attempts, now() FROM river_job WHERE kind = 'fulfill_order'`,
	}
	require.ElementsMatch(t, webhook.AuditCheckNames(), keys(breaks), "every check has its break here")
	for check, sql := range breaks {
		t.Run(check, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			o := e.order("mana_1000", "stripe")
			require.Equal(t, "claimed", e.deliver("stripe", providerevents.CompletedEvent("stripe", "evt_a", o.ID, 999, "usd")).status())
			require.Equal(t, "completed", e.waitJobs(1)[0].State)
			e.requireClean()
			_, err := e.pool.Exec(context.Background(), sql)
			require.NoError(t, err)
			vs, err := webhook.Audit(context.Background(), e.pool, webhook.AuditOptions{Since: time.Unix(0, 0)})
			require.NoError(t, err)
			var found []string
			for _, v := range vs {
				found = append(found, v.Check)
			}
			require.Contains(t, found, check, "%v", vs)
		})
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
