package fulfillment_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/drivers"
	"github.com/fibe-dev/billing/wallet"
)

// auditBase is a clean history to break: a mana_1000 order paid with
// Stripe's session cs_a (PaymentIntent pi_a) and refunded 500 of 999.
type auditBase struct {
	*reversalEnv
	order   *fulfillment.Order
	payment fulfillment.Payment
}

func newAuditBase(t *testing.T) *auditBase {
	e := newReversalEnv(t)
	o := checkout(t, e.pool, e.player, "mana_1000", "stripe")
	require.NoError(t, tryPayArgs(e.pool, e.client, fulfillment.FulfillOrderArgs{OrderID: o.ID, EventID: "evt_paid",
		Provider: "stripe", PaidAmount: 999, PaidCurrency: "usd", PaymentID: "cs_a", Aliases: []string{"pi_a"}}))
	require.Equal(t, "completed", waitJobs(t, e.pool, 1)[0].State)
	require.Equal(t, "completed", e.refund("evt_refund", "pi_a", 500, "usd").State)
	ps, err := fulfillment.ListPayments(context.Background(), e.pool, fulfillment.ListPaymentsParams{OrderID: o.ID})
	require.NoError(t, err)
	require.Len(t, ps, 1)
	requireClean(t, e.pool)
	return &auditBase{reversalEnv: e, order: o, payment: ps[0]}
}

func (b *auditBase) exec(sql string, args ...any) {
	b.t.Helper()
	_, err := b.pool.Exec(context.Background(), sql, args...)
	require.NoError(b.t, err, sql)
}

// dropCheck removes the CHECK constraint of table whose definition
// mentions column, to plant a state the schema would refuse (the audit
// exists for the day a constraint or the code that keeps it is lost).
func (b *auditBase) dropCheck(table, like string) {
	b.t.Helper()
	var name string
	require.NoError(b.t, b.pool.QueryRow(context.Background(), `SELECT conname FROM pg_constraint
		WHERE conrelid = $1::regclass AND contype = 'c' AND pg_get_constraintdef(oid) LIKE $2 LIMIT 1`,
		table, "%"+like+"%").Scan(&name))
	b.exec(fmt.Sprintf(`ALTER TABLE %s DROP CONSTRAINT %q`, table, name))
}

// auditBreaks plants, for each check of invariants 5 and 7-10, the
// violation it exists to find.
var auditBreaks = map[string]func(b *auditBase){
	"fulfilled_without_its_credit": func(b *auditBase) {
		b.exec(`UPDATE orders SET wallet_transaction_id = wallet_transaction_id + 1000 WHERE id = $1`, b.order.ID)
	},
	"credit_without_fulfilled_order": func(b *auditBase) {
		b.exec(`UPDATE orders SET status = 'pending', fulfilled_at = NULL, wallet_transaction_id = NULL WHERE id = $1`, b.order.ID)
	},
	"purchase_outside_an_order": func(b *auditBase) {
		b.exec(`UPDATE wallet_transactions SET idempotency_key = 'gift:' || idempotency_key WHERE kind = 'purchase'`)
	},
	"fulfilled_without_matching_payment": func(b *auditBase) {
		b.exec(`UPDATE webhook_events SET paid_amount = 1 WHERE order_id = $1`, b.order.ID)
	},
	"applied_payments_per_order": func(b *auditBase) {
		b.exec(`INSERT INTO payments (provider, payment_id, order_id, player_id, event_id, amount, currency, mana_minted, status)
			SELECT provider, 'cs_b', order_id, player_id, 'evt_b', amount, currency, mana_minted, status FROM payments WHERE id = $1`,
			b.payment.ID)
	},
	"applied_payment_vs_order": func(b *auditBase) {
		b.exec(`UPDATE payments SET mana_minted = 999 WHERE id = $1`, b.payment.ID)
	},
	"unapplied_payment_minted": func(b *auditBase) {
		b.exec(`UPDATE payments SET status = 'unapplied', mana_minted = 0, clawed_back_mana = 0, reason = 'x' WHERE id = $1`, b.payment.ID)
	},
	"unapplied_payment_with_mana": func(b *auditBase) {
		b.dropCheck("payments", "mana_minted > 0")
		b.dropCheck("payments", "reason IS NULL")
		b.exec(`INSERT INTO payments (provider, payment_id, order_id, player_id, event_id, amount, currency, mana_minted, status, reason)
			SELECT provider, 'cs_b', order_id, player_id, 'evt_b', amount, currency, 5, 'unapplied', 'double' FROM payments WHERE id = $1`,
			b.payment.ID)
	},
	"clawed_back_over_minted": func(b *auditBase) {
		b.dropCheck("payments", "clawed_back_mana <= mana_minted")
		b.exec(`UPDATE payments SET clawed_back_mana = 1001 WHERE id = $1`, b.payment.ID)
	},
	"order_clawback_vs_payment": func(b *auditBase) {
		b.exec(`UPDATE orders SET clawed_back_mana = 7 WHERE id = $1`, b.order.ID)
	},
	"clawback_mana_over_minted": func(b *auditBase) {
		ctx := context.Background()
		tx, err := b.pool.Begin(ctx)
		require.NoError(b.t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = wallet.New(b.pool, wallet.Options{}).ClawbackTx(ctx, tx, wallet.ClawbackParams{PlayerID: b.player,
			Mana: 999, Key: wallet.ReversalKey(b.payment.ID, 99, "rogue"), Reference: "rogue"})
		require.NoError(b.t, err)
		require.NoError(b.t, tx.Commit(ctx))
	},
	"give_back_vs_forgiveness": func(b *auditBase) { b.giveBackIgnoringForgiveness() },
	"debt_vs_receivable": func(b *auditBase) {
		b.exec(`INSERT INTO debts (player_id, outstanding) VALUES ($1, 5)
			ON CONFLICT (player_id) DO UPDATE SET outstanding = debts.outstanding + 5`, b.player)
	},
	"reversal_event_undecided": func(b *auditBase) {
		b.exec(`UPDATE reversal_events SET status = 'pending', reason = NULL, payment = NULL, decided_at = NULL`)
	},
	"reversal_event_wrongly_refused": func(b *auditBase) {
		b.exec(`UPDATE reversal_events SET status = 'refused', reason = 'above the charge'`)
	},
	"reversal_event_wrongly_accepted": func(b *auditBase) {
		b.exec(`INSERT INTO reversal_events (provider, event_id, reversal_id, payment_ref, kind, state, amount, currency,
			status, payment, decided_at) VALUES ('stripe', 'evt_eur', 'charge:ch_pi_a', 'pi_a', 'refund', 'succeeded', 999,
			'eur', 'accepted', $1, now())`, b.payment.ID)
	},
	"reversal_fact_vs_events": func(b *auditBase) {
		b.exec(`UPDATE payment_reversals SET amount = 0`)
	},
	"clawback_vs_facts": func(b *auditBase) {
		b.exec(`UPDATE payments SET clawed_back_mana = 0 WHERE id = $1`, b.payment.ID)
		b.exec(`UPDATE orders SET clawed_back_mana = 0 WHERE id = $1`, b.order.ID)
	},
	"reversal_event_state_vs_payload": func(b *auditBase) {
		b.exec(`UPDATE webhook_events SET event_type = 'charge.dispute.closed', payload = convert_to(
			'{"id":"evt_refund","type":"charge.dispute.closed","data":{"object":{"status":"under_review"}}}', 'UTF8')
			WHERE event_id = 'evt_refund'`)
	},
	"payments_per_provider_object": func(b *auditBase) {
		b.exec(`UPDATE webhook_events SET payload = convert_to('{"data":{"object":{"id":"cs_a"}}}', 'UTF8')
			WHERE event_id = 'evt_paid'`)
		b.exec(`INSERT INTO webhook_events (provider, event_id, event_type, order_id, paid_amount, paid_currency, payload)
			VALUES ('stripe', 'evt_async', 'checkout.session.async_payment_succeeded', $1, 999, 'usd',
			convert_to('{"data":{"object":{"id":"cs_a","payment_intent":"pi_a"}}}', 'UTF8'))`, b.order.ID)
		b.exec(`INSERT INTO payments (provider, payment_id, order_id, player_id, event_id, amount, currency, status, reason)
			SELECT provider, 'pi_a2', order_id, player_id, 'evt_async', amount, currency, 'unapplied', 'double'
			FROM payments WHERE id = $1`, b.payment.ID)
	},
}

// auditBreaksOtherWay plants, for each check that can fail in more than
// one direction, the violations auditBreaks does not: a check weakened to
// see only too little (or only too much) is caught. (The other checks have
// one direction, or their second one is a check of its own:
// reversal_event_wrongly_refused and _accepted; give_back_vs_forgiveness
// and reversal_event_state_vs_payload are tested both ways below.)
var auditBreaksOtherWay = map[string][]func(b *auditBase){
	"clawback_vs_facts": { // too much clawed back for the facts (501 is right)
		func(b *auditBase) {
			b.exec(`UPDATE payments SET clawed_back_mana = 1000 WHERE id = $1`, b.payment.ID)
			b.exec(`UPDATE orders SET clawed_back_mana = 1000 WHERE id = $1`, b.order.ID)
		},
		func(b *auditBase) { // a refund the worker never saw: the facts call for more
			b.exec(`UPDATE reversal_events SET amount = 999`)
			b.exec(`UPDATE payment_reversals SET amount = 999`)
		},
	},
	"clawed_back_over_minted": {func(b *auditBase) {
		b.dropCheck("payments", "clawed_back_mana >= 0")
		b.exec(`UPDATE payments SET clawed_back_mana = -1 WHERE id = $1`, b.payment.ID)
	}},
	"order_clawback_vs_payment": {func(b *auditBase) {
		b.exec(`UPDATE orders SET clawed_back_mana = 900 WHERE id = $1`, b.order.ID)
	}},
	"reversal_fact_vs_events": {
		func(b *auditBase) { b.exec(`UPDATE payment_reversals SET amount = amount + 1`) },
		func(b *auditBase) { b.exec(`DELETE FROM payment_reversals`) },
		func(b *auditBase) {
			b.exec(`INSERT INTO payment_reversals (provider, reversal_id, payment_id, payment, kind, state, amount, currency)
				VALUES ('stripe', 'dp_ghost', 'cs_a', $1, 'dispute', 'lost', 999, 'usd')`, b.payment.ID)
		},
		func(b *auditBase) { b.exec(`UPDATE payment_reversals SET kind = 'dispute', state = 'won'`) },
	},
	"applied_payment_vs_order": {func(b *auditBase) {
		b.exec(`UPDATE payments SET mana_minted = 1001 WHERE id = $1`, b.payment.ID)
	}},
	"fulfilled_without_matching_payment": {func(b *auditBase) {
		b.exec(`UPDATE webhook_events SET paid_amount = 100000 WHERE order_id = $1`, b.order.ID)
	}},
	"debt_vs_receivable": {func(b *auditBase) { // a receivable entry the debts row does not show
		b.inTx(func(ctx context.Context, tx pgx.Tx, ws *wallet.Store) {
			_, err := ws.CreditTx(ctx, tx, wallet.PostParams{PlayerID: b.player, Currency: wallet.Mana, Amount: 5,
				Kind: wallet.KindDebt, Reference: "plant", IdempotencyKey: wallet.CallerKey("plant-debt"),
				Account: wallet.AccountReceivable})
			require.NoError(b.t, err)
		})
	}},
}

// Each check that can fail more than one way reports each of them.
func TestAuditChecksFindTheirViolationEveryWay(t *testing.T) {
	t.Parallel()
	for check, plants := range auditBreaksOtherWay {
		require.Contains(t, fulfillment.AuditCheckNames(), check)
		for i, plant := range plants {
			t.Run(fmt.Sprintf("%s/%d", check, i), func(t *testing.T) {
				t.Parallel()
				b := newAuditBase(t)
				plant(b)
				found := auditFindings(t, b)
				require.Contains(t, found, check, "the audit reported %v", found)
			})
		}
	}
}

// Every check of invariants 5 and 7-10 reports the violation it exists
// for, on a history that was clean before.
func TestAuditChecksFindTheirViolation(t *testing.T) {
	t.Parallel()
	require.ElementsMatch(t, fulfillment.AuditCheckNames(), keys(auditBreaks), "every check has its break here")
	for check, plant := range auditBreaks {
		t.Run(check, func(t *testing.T) {
			t.Parallel()
			b := newAuditBase(t)
			plant(b)
			found := auditFindings(t, b)
			require.Contains(t, found, check, "the audit reported %v", found)
		})
	}
}

func auditFindings(t *testing.T, b *auditBase) []string {
	t.Helper()
	ctx := context.Background()
	var found []string
	for _, audit := range []func(context.Context, fulfillment.DB, ...provider.Facts) ([]fulfillment.Violation, error){
		func(ctx context.Context, db fulfillment.DB, _ ...provider.Facts) ([]fulfillment.Violation, error) {
			return fulfillment.Audit(ctx, db)
		}, fulfillment.AuditPayments} {
		vs, err := audit(ctx, b.pool, drivers.Facts()...)
		require.NoError(t, err)
		for _, v := range vs {
			found = append(found, v.Check)
		}
	}
	return found
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// stripePayload stores, as the payload of event eventID, Stripe's envelope
// of typ whose object has status.
func (e *reversalEnv) stripePayload(eventID, typ, status string) {
	e.t.Helper()
	body := fmt.Sprintf(`{"id":%q,"type":%q,"data":{"object":{"id":"dp_s","status":%q}}}`, eventID, typ, status)
	_, err := e.pool.Exec(context.Background(), `UPDATE webhook_events SET event_type = $2, payload = convert_to($3, 'UTF8')
		WHERE event_id = $1`, eventID, typ, body)
	require.NoError(e.t, err)
}

// Issue 28, finding 3: invariant 10 reads each event's state from the
// payload the provider sent, through the drivers' tables, and finds a
// worker that misread it in both directions: a dispute the payload says
// was lost taken as won (too little clawed back), and one it says was won
// taken as lost (too much).
func TestAuditReadsStatesFromPayloads(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ stored, sent, mana string }{
		{fulfillment.StateWon, "lost", "too little"},
		{fulfillment.StateLost, "won", "too much"},
	} {
		t.Run(c.mana, func(t *testing.T) {
			t.Parallel()
			e := newReversalEnv(t)
			e.buy("pi_s")
			waitJobs(t, e.pool, 1)
			require.Equal(t, "completed", e.reverse("d_open", "pi_s", "dp_s", fulfillment.ReversalDispute, fulfillment.StateOpen, 999, "usd").State)
			require.Equal(t, "completed", e.reverse("d_close", "pi_s", "dp_s", fulfillment.ReversalDispute, c.stored, 999, "usd").State)
			e.stripePayload("d_open", "charge.dispute.created", "needs_response")
			e.stripePayload("d_close", "charge.dispute.closed", c.stored)
			requireClean(t, e.pool) // the payloads say what was stored

			e.stripePayload("d_close", "charge.dispute.closed", c.sent)
			vs, err := fulfillment.AuditPayments(context.Background(), e.pool, drivers.Facts()...)
			require.NoError(t, err)
			var found []string
			for _, v := range vs {
				found = append(found, v.Check)
			}
			require.Contains(t, found, "reversal_event_state_vs_payload", vs)
			require.Contains(t, found, "reversal_fact_vs_events", vs)
			require.Contains(t, found, "clawback_vs_facts", vs)
		})
	}
}

// inTx runs f in a committed transaction.
func (b *auditBase) inTx(f func(ctx context.Context, tx pgx.Tx, ws *wallet.Store)) {
	b.t.Helper()
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	require.NoError(b.t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	f(ctx, tx, wallet.New(b.pool, wallet.Options{}))
	require.NoError(b.t, tx.Commit(ctx))
}

// clawIntoDebt claws 600 Mana back for the base's payment: its 499 Mana
// and 101 as debt.
func (b *auditBase) clawIntoDebt() {
	b.t.Helper()
	b.inTx(func(ctx context.Context, tx pgx.Tx, ws *wallet.Store) {
		c, err := ws.ClawbackTx(ctx, tx, wallet.ClawbackParams{PlayerID: b.player, Mana: 600,
			Key: wallet.ReversalKey(b.payment.ID, 90, "plant"), Reference: "plant"})
		require.NoError(b.t, err)
		require.Equal(b.t, int64(101), c.Debt)
	})
}

// giveBackIgnoringForgiveness plants what finding 1 did: a debt forgiven,
// then the Mana given back in full to the player.
func (b *auditBase) giveBackIgnoringForgiveness() {
	b.t.Helper()
	b.clawIntoDebt()
	_, err := fulfillment.ForgiveDebt(context.Background(), b.pool, wallet.New(b.pool, wallet.Options{}), b.player, "plant", "plant")
	require.NoError(b.t, err)
	b.inTx(func(ctx context.Context, tx pgx.Tx, ws *wallet.Store) {
		_, _, err := ws.CreditSettlingTx(ctx, tx, wallet.PostParams{PlayerID: b.player, Currency: wallet.Mana, Amount: 600,
			Kind: wallet.KindClawbackReversal, Reference: "plant", IdempotencyKey: wallet.ReversalKey(b.payment.ID, 91, "plant").GivenBack(),
			Account: wallet.AccountManaIssued})
		require.NoError(b.t, err)
	})
}

// give_back_vs_forgiveness in both directions: a give-back that ignored a
// forgiveness (the player keeps both), and one that recovered a write-off
// no forgiveness made (the player loses Mana); the right recovery passes.
func TestAuditGiveBackVsForgiveness(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		plant func(b *auditBase)
		found bool
	}{
		"too little recovered": {func(b *auditBase) { b.giveBackIgnoringForgiveness() }, true},
		"too much recovered": {func(b *auditBase) {
			b.clawIntoDebt() // never forgiven
			b.inTx(func(ctx context.Context, tx pgx.Tx, ws *wallet.Store) {
				key := wallet.ReversalKey(b.payment.ID, 91, "plant").GivenBack()
				_, err := ws.CreditTx(ctx, tx, wallet.PostParams{PlayerID: b.player, Currency: wallet.Mana, Amount: 600,
					Kind: wallet.KindClawbackReversal, Reference: "plant", IdempotencyKey: key, Account: wallet.AccountManaIssued})
				require.NoError(b.t, err)
				_, err = ws.DebitTx(ctx, tx, wallet.PostParams{PlayerID: b.player, Currency: wallet.Mana, Amount: 101,
					Kind: wallet.KindDebtWriteOff, Reference: "plant", IdempotencyKey: wallet.ReversalKey(b.payment.ID, 91, "plant:back:write_off"),
					Account: wallet.AccountBadDebt})
				require.NoError(b.t, err)
			})
		}, true},
		"recovered as forgiven": {func(b *auditBase) {
			b.clawIntoDebt()
			_, err := fulfillment.ForgiveDebt(context.Background(), b.pool, wallet.New(b.pool, wallet.Options{}), b.player, "plant", "plant")
			require.NoError(b.t, err)
			b.inTx(func(ctx context.Context, tx pgx.Tx, ws *wallet.Store) {
				g, err := ws.GiveBackTx(ctx, tx, wallet.GiveBackParams{PlayerID: b.player, Mana: 600,
					Key: wallet.ReversalKey(b.payment.ID, 91, "plant"), Reference: "plant", Clawbacks: wallet.ReversalPrefix(b.payment.ID)})
				require.NoError(b.t, err)
				require.Equal(b.t, int64(101), g.Recovered)
			})
		}, false},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := newAuditBase(t)
			c.plant(b)
			found := auditFindings(t, b)
			if c.found {
				require.Contains(t, found, "give_back_vs_forgiveness")
			} else {
				require.NotContains(t, found, "give_back_vs_forgiveness")
			}
		})
	}
}
