package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/ops/timeline"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/drivers"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
	"github.com/fibe-dev/billing/wallet"
)

// send delivers the event and waits for its job.
func (tb *timelineBench) send(ctx context.Context, provider, eventID string, body []byte) error {
	if err := tb.deliver(provider, body); err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		var done bool
		err := tb.env.Pool.QueryRow(ctx, `SELECT finalized_at IS NOT NULL FROM river_job
			WHERE args ->> 'event_id' = $1 AND args ->> 'provider' = $2 AND kind IN ('fulfill_order', 'reverse_payment')`,
			eventID, provider).Scan(&done)
		if err == nil && done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench timeline: the job of %s never finished (%v)", eventID, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pay sends the order's one completed payment.
func (tb *timelineBench) pay(ctx context.Context, o *fulfillment.Order) error {
	evt := fmt.Sprintf("evt_tlb_pay_%d", o.ID)
	return tb.send(ctx, o.Provider, evt, providerevents.CompletedEvent(o.Provider, evt, o.ID, o.Amount, o.Currency))
}

// reverse sends a refund or dispute of the order's payment.
func (tb *timelineBench) reverse(ctx context.Context, o *fulfillment.Order, tag, id, kind, state string, amount int64) error {
	evt := fmt.Sprintf("evt_tlb_%s_%d", tag, o.ID)
	payment := providerevents.OrderPaymentID(o.Provider, strconv.FormatInt(o.ID, 10))
	return tb.send(ctx, o.Provider, evt, providerevents.ReversalEvent(o.Provider, evt, payment, id, kind, state, amount, o.Currency))
}

// history opens an order through provider, pays it and runs then on it.
func (tb *timelineBench) history(ctx context.Context, provider string, then func(*fulfillment.Order) error) error {
	o, err := tb.order(ctx, provider)
	if err != nil {
		return err
	}
	if err := tb.pay(ctx, o); err != nil {
		return err
	}
	tb.orders, tb.subjects = append(tb.orders, o.ID), append(tb.subjects, o.PlayerID)
	return then(o)
}

// doubleCharge: a second Checkout Session paid for the order.
func (tb *timelineBench) doubleCharge(ctx context.Context, _ int) error {
	return tb.history(ctx, provider.Stripe, func(o *fulfillment.Order) error {
		pi, evt := fmt.Sprintf("pi_tlb_second_%d", o.ID), fmt.Sprintf("evt_tlb_second_%d", o.ID)
		tb.intents = append(tb.intents, pi)
		return tb.send(ctx, "stripe", evt, providerevents.PaymentEvent("stripe", evt, pi, o.ID, o.Amount, o.Currency))
	})
}

// partialRefunds: 3.00 then 5.00 USD of one charge.
func (tb *timelineBench) partialRefunds(ctx context.Context, _ int) error {
	return tb.history(ctx, provider.Stripe, func(o *fulfillment.Order) error {
		charge := fmt.Sprintf("ch_tlb_%d", o.ID)
		if err := tb.reverse(ctx, o, "refund1", charge, fulfillment.ReversalRefund, fulfillment.StateSucceeded, 300); err != nil {
			return err
		}
		return tb.reverse(ctx, o, "refund2", charge, fulfillment.ReversalRefund, fulfillment.StateSucceeded, 500)
	})
}

// chargeback: a Paddle chargeback, then its reversal.
func (tb *timelineBench) chargeback(ctx context.Context, _ int) error {
	return tb.history(ctx, provider.Paddle, func(o *fulfillment.Order) error {
		cb, cbr := fmt.Sprintf("adj_cb_%d", o.ID), fmt.Sprintf("adj_cbr_%d", o.ID)
		if err := tb.reverse(ctx, o, "cb", cb, fulfillment.ReversalDispute, fulfillment.StateLost, o.Amount); err != nil {
			return err
		}
		return tb.reverse(ctx, o, "cbr", cbr, fulfillment.ReversalDispute, fulfillment.StateWon, o.Amount)
	})
}

// debt: Mana spent, a full refund, the debt forgiven every other time.
func (tb *timelineBench) debt(ctx context.Context, i int) error {
	ws := tb.env.Wallet
	return tb.history(ctx, provider.Creem, func(o *fulfillment.Order) error {
		if _, err := ws.Adjust(ctx, wallet.AdjustParams{PlayerID: o.PlayerID, Currency: wallet.Mana, Amount: -600,
			Reason: "bench spend", Key: fmt.Sprintf("tlb-spend-%d", o.ID)}); err != nil {
			return err
		}
		if err := tb.reverse(ctx, o, "refund", fmt.Sprintf("rf_tlb_%d", o.ID), fulfillment.ReversalRefund, fulfillment.StateSucceeded, o.Amount); err != nil {
			return err
		}
		if i%2 == 1 {
			return nil
		}
		_, err := fulfillment.ForgiveDebt(ctx, tb.env.Pool, ws, o.PlayerID, fmt.Sprintf("tlb-forgive-%d", o.ID), "bench")
		return err
	})
}

// background delivers n other paid orders, every fifth refunded, eight
// at a time, and waits for them.
func (tb *timelineBench) background(ctx context.Context, n int) error {
	ids := make([]*fulfillment.Order, n)
	for i := range ids {
		o, err := tb.order(ctx, provider.Stripe)
		if err != nil {
			return err
		}
		ids[i] = o
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 8)
	for i, o := range ids {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			errs <- tb.backgroundOrder(o, i%5 == 0)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return tb.settle(ctx)
}

func (tb *timelineBench) backgroundOrder(o *fulfillment.Order, refund bool) error {
	evt := fmt.Sprintf("evt_tlb_bg_%d", o.ID)
	if err := tb.deliver(o.Provider, providerevents.CompletedEvent(o.Provider, evt, o.ID, o.Amount, o.Currency)); err != nil || !refund {
		return err
	}
	pi := providerevents.OrderPaymentID(o.Provider, strconv.FormatInt(o.ID, 10))
	evt = fmt.Sprintf("evt_tlb_bgr_%d", o.ID)
	return tb.deliver(o.Provider, providerevents.ReversalEvent(o.Provider, evt, pi, fmt.Sprintf("ch_tlb_bg_%d", o.ID),
		fulfillment.ReversalRefund, fulfillment.StateSucceeded, o.Amount, o.Currency))
}

// measure times each kind of timeline for the bench's duration; whale,
// when set, is a player with a long history (bounded by the timeline's
// MaxWalletLines).
func (tb *timelineBench) measure(ctx context.Context, whale int64) (*timelineStep, error) {
	st := &timelineStep{LoadAverage: loadAverage()}
	if err := tb.env.Pool.QueryRow(ctx, `SELECT count(*) FROM wallet_transactions`).Scan(&st.Transactions); err != nil {
		return nil, err
	}
	tb.env.Progressf("timeline: measuring at %d transactions (load %s)", st.Transactions, st.LoadAverage)
	pool, reg := tb.env.Pool, drivers.New(nil)
	st.Order = Load(ctx, "order", tb.env.Clients, tb.env.Duration, pick(tb.orders, func(ctx context.Context, id int64) error {
		_, err := timeline.Order(ctx, pool, reg, id)
		return err
	}))
	st.Payment = Load(ctx, "payment", tb.env.Clients, tb.env.Duration, pick(tb.intents, func(ctx context.Context, pi string) error {
		_, err := timeline.Payment(ctx, pool, reg, "stripe", pi)
		return err
	}))
	st.Player = Load(ctx, "player", tb.env.Clients, tb.env.Duration, pick(tb.subjects, func(ctx context.Context, id int64) error {
		_, err := timeline.Player(ctx, pool, reg, id, time.Time{})
		return err
	}))
	if whale != 0 {
		st.Whale = Load(ctx, "whale_player", tb.env.Clients, tb.env.Duration, pick([]int64{whale}, func(ctx context.Context, id int64) error {
			_, err := timeline.Player(ctx, pool, reg, id, time.Time{})
			return err
		}))
	}
	return st, nil
}

// pick is an Op that runs f on a random element of from.
func pick[T any](from []T, f func(context.Context, T) error) Op {
	return func(ctx context.Context, _ int, _ int64) error { return f(ctx, from[rand.IntN(len(from))]) }
}
