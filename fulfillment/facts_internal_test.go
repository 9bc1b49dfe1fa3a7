package fulfillment

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/kit/testdb"
)

// A reversal job reads the events of its own payment through the ref
// indexes, whatever the number of the provider's other events: among
// 50,000 events of other payments, the two that name an alias of the
// payment (one by its payment ref, one by its other ref) are found, and
// the read touches a handful of pages, not the table (the statement it
// replaced read every event of the provider on each call).
func TestEventsOfReadsOnlyThePaymentsEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	var payment int64
	require.NoError(t, pool.QueryRow(ctx, `WITH p AS (INSERT INTO players (name) VALUES ('r') RETURNING id),
		o AS (INSERT INTO orders (player_id, sku, provider, amount, currency, mana)
			SELECT id, 'mana_1000', 'stripe', 999, 'usd', 1000 FROM p RETURNING id, player_id)
		INSERT INTO payments (provider, payment_id, order_id, player_id, event_id, amount, currency, mana_minted, status)
		SELECT 'stripe', 'pi_mine', o.id, o.player_id, 'evt_pay', 999, 'usd', 1000, 'applied' FROM o RETURNING id`).Scan(&payment))
	_, err := pool.Exec(ctx, `INSERT INTO payment_aliases (provider, alias, payment)
		SELECT 'stripe', a, $1 FROM unnest(array['pi_mine', 'cs_mine']) a`, payment)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO reversal_events (provider, event_id, reversal_id, payment_ref, other_ref, kind, state, amount, currency)
		SELECT 'stripe', 'evt_other_' || g, 'ch_other_' || g, 'pi_other_' || g, CASE WHEN g % 2 = 0 THEN 'cs_other_' || g END,
			'refund', 'succeeded', 1, 'usd' FROM generate_series(1, 50000) g;
		INSERT INTO reversal_events (provider, event_id, reversal_id, payment_ref, other_ref, kind, state, amount, currency)
		VALUES ('stripe', 'evt_by_ref', 'ch_a', 'pi_mine', NULL, 'refund', 'succeeded', 1, 'usd'),
			('stripe', 'evt_by_other', 'ch_b', 'ch_b', 'cs_mine', 'refund', 'succeeded', 1, 'usd'),
			('paddle', 'evt_other_provider', 'adj_c', 'pi_mine', NULL, 'refund', 'succeeded', 1, 'usd');
		ANALYZE reversal_events, payment_aliases`)
	require.NoError(t, err)

	tx := testdb.Begin(t, pool)
	events, err := eventsOf(ctx, tx, &Payment{ID: payment, Provider: "stripe"})
	require.NoError(t, err)
	var ids []string
	for _, e := range events {
		ids = append(ids, e.eventID)
	}
	require.Equal(t, []string{"evt_by_ref", "evt_by_other"}, ids)

	var raw []byte
	require.NoError(t, tx.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) `+eventsOfSQL, "stripe", payment).Scan(&raw))
	var plan []struct {
		Plan struct {
			Hit  int64 `json:"Shared Hit Blocks"`
			Read int64 `json:"Shared Read Blocks"`
		}
	}
	require.NoError(t, json.Unmarshal(raw, &plan))
	require.Len(t, plan, 1)
	require.Less(t, plan[0].Plan.Hit+plan[0].Plan.Read, int64(100), "pages read for 2 of 50,000 events:\n%s", raw)
}
