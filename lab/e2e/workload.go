package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fibe-dev/billing/fibe"
	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
)

// player drives one player's seeded stream of actions until ctx ends.
type player struct {
	run    *Run
	pm     *playerModel
	rng    *rand.Rand
	sdk    *fibe.Client
	seq    int
	orders []*fibe.Order
	mqs    []string
	pgs    []string
}

func (r *Run) newPlayer(pm *playerModel, seed uint64) *player {
	sdk := fibe.NewClient(r.proxyURL, pm.apiKey, append(r.sdkOptions(),
		fibe.WithMaxRetries(12), fibe.WithBackoff(20*time.Millisecond, 500*time.Millisecond),
		fibe.WithTimeout(10*time.Second), fibe.WithPollInterval(100*time.Millisecond))...)
	return &player{run: r, pm: pm, rng: rand.New(rand.NewPCG(seed, uint64(pm.id))), sdk: sdk}
}

func (p *player) loop(ctx context.Context) {
	for ctx.Err() == nil {
		switch n := p.rng.IntN(100); {
		case n < 22:
			p.buy(ctx)
		case n < 50:
			p.convert(ctx)
		case n < 58 && len(p.mqs) < 2:
			p.createMarquee(ctx)
		case n < 66 && len(p.mqs) > 0:
			p.fund(ctx)
		case n < 80 && len(p.mqs) > 0:
			p.createPlayground(ctx)
		case n < 92 && len(p.pgs) > 0:
			p.restartOrSync(ctx)
		default:
			sleepCtx(ctx, time.Duration(20+p.rng.IntN(80))*time.Millisecond)
		}
	}
}

// sdkResult classifies a finished SDK call for the model and the report.
func (p *player) sdkResult(resp *fibe.Response, err error) (acked, refused bool) {
	m := p.run.model
	m.sdkCalls.Add(1)
	if resp != nil && resp.Attempts > 1 {
		m.sdkRetried.Add(1)
	}
	if resp != nil && resp.IdempotentReplayed {
		m.sdkReplayed.Add(1)
	}
	var apiErr *fibe.APIError
	switch {
	case err == nil:
		m.sdkAcked.Add(1)
		return true, false
	case errors.As(err, &apiErr) && apiErr.StatusCode < 500 && apiErr.StatusCode != 409 || fibe.IsCode(err, "insufficient_balance") ||
		fibe.IsCode(err, "outstanding_debt"):
		m.sdkRefused.Add(1)
		return false, true
	default:
		m.sdkUnknown.Add(1)
		p.run.logf("sdk call left unknown for player %d: %v", p.pm.id, err)
		return false, false
	}
}

func (p *player) buy(ctx context.Context) {
	providers := []string{"stripe", "paddle", "creem"}
	provider := providers[p.rng.IntN(len(providers))]
	sku := []string{"mana_1000", "mana_5000"}[p.rng.IntN(2)]
	order, err := p.sdk.Checkouts.Create(ctx, fibe.CheckoutParams{SKU: sku, Provider: provider})
	acked, refused := p.sdkResult(lastResp(order, func(o *fibe.Order) *fibe.Response { return o.LastResponse }), err)
	// A call cut off by the end of the run is unknown too: the server may
	// have committed it.
	p.run.model.with(func() {
		switch {
		case acked:
			p.pm.checkouts++
		case !refused:
			p.pm.checkoutsUnknown++
		}
	})
	if !acked {
		return
	}
	id, _ := strconv.ParseInt(order.ID, 10, 64)
	om := &orderModel{id: id, playerID: p.pm.id, mana: order.Mana, amount: order.Amount, currency: order.Currency, provider: provider}
	p.run.model.with(func() { p.run.model.orders[id] = om })
	// One order in ten is paid the wrong amount: it must be rejected, minting nothing.
	correct := p.rng.IntN(10) != 0
	amount := order.Amount
	if !correct {
		amount++
	}
	p.seq++
	eventID := fmt.Sprintf("evt_%d_%d_%d", p.run.opts.Seed, p.pm.id, p.seq)
	body := providerevents.CompletedEvent(provider, eventID, id, amount, order.Currency)
	if provider != "creem" { // Creem has no event listing
		p.run.providers.AddEvent(provider, body)
		// One payment in fifteen loses its webhook for good, and so does
		// the run's first that can (a busy machine makes few payments, and
		// every run must show reconciliation): the provider has the
		// payment, only reconciliation can fulfil it.
		lose := p.rng.IntN(15) == 0
		p.run.model.with(func() {
			if lose = lose || len(p.run.model.lostHooks) == 0; lose {
				om.paid, om.correct = true, correct
				p.run.model.lostHooks = append(p.run.model.lostHooks, eventID)
			}
		})
		if lose {
			return
		}
	}
	delivered := p.run.deliver(ctx, p.rng, provider, eventID, body)
	p.run.model.paymentSent(om, eventID, provider != "creem", delivered, correct)
	// A refund of a payment billing has not yet claimed is refused (no
	// player to report it to), so money goes back only after a delivery.
	if correct && delivered {
		p.moneyBack(ctx, om)
	}
}

// moneyBack sends, at a few percent each, what makes money go back for a
// paid order: a second, distinct payment, or a refund (full or partial)
// and a dispute whose funds the provider withdrew (sometimes won later). The model records each
// once a web process acknowledged it. A double payment gets no refund or
// dispute here: whichever of the two payments is worked first is the one
// that mints, so which one a refund names would decide the clawback.
func (p *player) moneyBack(ctx context.Context, om *orderModel) {
	order := strconv.FormatInt(om.id, 10)
	payment := providerevents.OrderPaymentID(om.provider, order)
	if p.rng.IntN(100) < 4 {
		id := p.nextEvent()
		body := providerevents.PaymentEvent(om.provider, id, payment+"_double", om.id, om.amount, om.currency)
		if p.run.deliver(ctx, p.rng, om.provider, id, body) {
			p.run.model.with(func() { om.doublePaid = true })
		}
		return
	}
	if p.rng.IntN(100) < 4 {
		p.hostileReversal(ctx, om, payment)
		return
	}
	if p.rng.IntN(100) < 5 {
		refund := om.amount
		if p.rng.IntN(2) == 0 {
			refund = 1 + p.rng.Int64N(om.amount)
		}
		id := p.nextEvent()
		body := providerevents.ReversalEvent(om.provider, id, payment, "rf_"+id, fulfillment.ReversalRefund, fulfillment.StateSucceeded, refund, om.currency)
		if p.run.deliver(ctx, p.rng, om.provider, id, body) {
			p.run.model.with(func() { om.refunded = refund })
		}
	}
	if p.rng.IntN(100) < 3 {
		state := fulfillment.StateLost
		if om.provider != "paddle" { // Paddle's chargeback is already lost; the others open first
			state = fulfillment.StateOpen
		}
		id := p.nextEvent()
		body := providerevents.ReversalEvent(om.provider, id, payment, "dp_"+id, fulfillment.ReversalDispute, state, om.amount, om.currency)
		if p.run.deliver(ctx, p.rng, om.provider, id, body) {
			p.run.model.with(func() { om.disputed = om.amount })
			p.winDispute(ctx, om, payment, "dp_"+id)
		}
	}
}

// hostileReversal sends what the provider's truth must refuse or cap: a
// refund in another currency (refused: nothing moves), a refund or dispute
// above the charge (capped: everything minted goes back), or a refund in
// another currency followed by the real one under the same id (the
// refusal must not block it).
func (p *player) hostileReversal(ctx context.Context, om *orderModel, payment string) {
	other := "eur"
	if strings.EqualFold(om.currency, "eur") {
		other = "usd"
	}
	refund := func(id, reversal string, amount int64, currency string) bool {
		body := providerevents.ReversalEvent(om.provider, id, payment, reversal, fulfillment.ReversalRefund,
			fulfillment.StateSucceeded, amount, currency)
		return p.run.deliver(ctx, p.rng, om.provider, id, body)
	}
	id := p.nextEvent()
	switch p.rng.IntN(3) {
	case 0:
		if refund(id, "rf_"+id, om.amount, other) {
			p.run.model.with(func() { om.hostile++ })
		}
	case 1:
		above := om.amount + 1 + p.rng.Int64N(om.amount)
		if refund(id, "rf_"+id, above, om.currency) {
			p.run.model.with(func() { om.hostile, om.refunded = om.hostile+1, above })
		}
	default:
		real := 1 + p.rng.Int64N(om.amount)
		if refund(id, "rf_"+id, om.amount, other) {
			p.run.model.with(func() { om.hostile++ })
		}
		if next := p.nextEvent(); refund(next, "rf_"+id, real, om.currency) {
			p.run.model.with(func() { om.refunded = real })
		}
	}
}

// winDispute sends, for a third of the disputes, the event that closes
// dispute in our favour (Stripe's charge.dispute.closed as won, Paddle's
// chargeback_reverse; Creem sends none): the funds come back, and so does
// the Mana the dispute clawed back.
func (p *player) winDispute(ctx context.Context, om *orderModel, payment, dispute string) {
	if om.provider == provider.Creem || p.rng.IntN(3) != 0 {
		return
	}
	id := p.nextEvent()
	if om.provider == provider.Paddle {
		dispute = "adj_" + id // the reversal is an adjustment of its own
	}
	body := providerevents.ReversalEvent(om.provider, id, payment, dispute, fulfillment.ReversalDispute, fulfillment.StateWon, om.amount, om.currency)
	if p.run.deliver(ctx, p.rng, om.provider, id, body) {
		p.run.model.with(func() { om.disputed, om.disputeWon = 0, true })
	}
}

func (p *player) nextEvent() string {
	p.seq++
	return fmt.Sprintf("evt_%d_%d_%d", p.run.opts.Seed, p.pm.id, p.seq)
}

func (p *player) convert(ctx context.Context) {
	mana := int64(50 + p.rng.IntN(400))
	conv, err := p.sdk.Conversions.Create(ctx, fibe.ConversionParams{Mana: mana})
	acked, refused := p.sdkResult(lastResp(conv, func(c *fibe.Conversion) *fibe.Response { return c.LastResponse }), err)
	p.run.model.with(func() {
		switch {
		case acked:
			p.pm.conversions[conv.ManaDebit.ID] = mana
		case !refused:
			p.pm.conversionsUnknown++
		}
	})
}

func (p *player) createMarquee(ctx context.Context) {
	p.seq++
	mq, err := p.sdk.Marquees.Create(ctx, fibe.MarqueeParams{Name: fmt.Sprintf("mq-%d-%d", p.pm.id, p.seq), Plan: "standard"})
	acked, refused := p.sdkResult(lastResp(mq, func(m *fibe.Marquee) *fibe.Response { return m.LastResponse }), err)
	p.run.model.with(func() {
		switch {
		case acked:
			p.pm.marquees[mq.ID] = true
		case !refused:
			p.pm.marqueesUnknown++
		}
	})
	if acked {
		p.mqs = append(p.mqs, mq.ID)
	}
}

func (p *player) fund(ctx context.Context) {
	acc, err := p.sdk.Marquees.Fund(ctx, p.mqs[p.rng.IntN(len(p.mqs))])
	acked, refused := p.sdkResult(lastResp(acc, func(a *fibe.Accepted) *fibe.Response { return a.LastResponse }), err)
	p.run.model.with(func() {
		if acked {
			p.pm.funds++
		} else if !refused {
			p.pm.fundsUnknown++
		}
	})
}

func (p *player) createPlayground(ctx context.Context) {
	acc, err := p.sdk.Playgrounds.Create(ctx, p.mqs[p.rng.IntN(len(p.mqs))], fibe.PlaygroundParams{})
	acked, refused := p.sdkResult(lastResp(acc, func(a *fibe.Accepted) *fibe.Response { return a.LastResponse }), err)
	if fibe.IsCode(err, "marquee_not_funded") {
		p.run.model.gate402.Add(1)
	}
	p.run.model.with(func() {
		switch {
		case acked:
			p.pm.playgrounds[acc.PlaygroundID] = true
		case !refused:
			p.pm.playgroundsUnknown++
		}
	})
	if acked {
		p.pgs = append(p.pgs, acc.PlaygroundID)
	}
}

func (p *player) restartOrSync(ctx context.Context) {
	id := p.pgs[p.rng.IntN(len(p.pgs))]
	var acc *fibe.Accepted
	var err error
	if p.rng.IntN(2) == 0 {
		acc, err = p.sdk.Playgrounds.Restart(ctx, id)
	} else {
		acc, err = p.sdk.Playgrounds.Sync(ctx, id)
	}
	if fibe.IsCode(err, "marquee_not_funded") {
		p.run.model.gate402.Add(1)
	}
	acked, _ := p.sdkResult(lastResp(acc, func(a *fibe.Accepted) *fibe.Response { return a.LastResponse }), err)
	if acked {
		p.run.model.with(func() { p.pm.restarts++ })
	}
}

func lastResp[T any](v *T, f func(*T) *fibe.Response) *fibe.Response {
	if v == nil {
		return nil
	}
	return f(v)
}

// deliver sends one signed event 2-5 times, concurrently, to randomly chosen
// web processes, each copy retried like a provider does until it gets a 2xx.
// It reports whether any copy was acknowledged.
func (r *Run) deliver(ctx context.Context, rng *rand.Rand, provider, eventID string, body []byte) bool {
	secret := r.secrets[provider]
	copies := 2 + rng.IntN(4)
	r.model.hooksSent.Add(int64(copies))
	var wg sync.WaitGroup
	acked := make([]bool, copies)
	seeds := make([]uint64, copies)
	for i := range seeds {
		seeds[i] = rng.Uint64()
	}
	for i := range copies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			acked[i] = r.deliverOne(ctx, rand.New(rand.NewPCG(seeds[i], 1)), provider, secret, body)
		}()
	}
	wg.Wait()
	delivered := slices.Contains(acked, true)
	r.noteDelivery(eventID, delivered)
	if !delivered {
		r.logf("delivery of %s %s given up after %s", provider, eventID, r.deliveryHorizon())
		r.model.with(func() { r.model.gaveUp = append(r.model.gaveUp, eventID) })
	}
	return delivered
}

// deliveryHorizon is how long a sender keeps redelivering one event.
// Providers keep at it for days; here it outlasts the settle window and,
// in a failover run, the longest a fault may keep writes away, so a
// delivery is given up only when billing stayed down past every bound.
func (r *Run) deliveryHorizon() time.Duration {
	if r.fo != nil {
		return r.opts.Settle + faultTimeout
	}
	return r.opts.Settle
}

func (r *Run) deliverOne(ctx context.Context, rng *rand.Rand, provider, secret string, body []byte) bool {
	deadline := time.Now().Add(r.deliveryHorizon())
	for attempt := 0; time.Now().Before(deadline); attempt++ {
		webs := r.liveWebAddrs()
		if len(webs) > 0 {
			addr := webs[rng.IntN(len(webs))]
			header, value, err := providerevents.Sign(provider, secret, body, time.Now())
			if err != nil {
				r.logf("sign: %v", err)
				return false
			}
			req, _ := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodPost, "http://"+addr+"/webhooks/"+provider, bytes.NewReader(body))
			req.Header.Set(header, value)
			req.Header.Set("Content-Type", "application/json")
			resp, err := r.hc.Do(req)
			if err == nil {
				var status struct{ Status string }
				_ = decodeJSON(resp, &status)
				if resp.StatusCode/100 == 2 {
					r.model.hooksAcked.Add(1)
					if status.Status == "duplicate" {
						r.model.hooksDup.Add(1)
					}
					return true
				}
			}
		}
		r.model.hookAttemptsFailed.Add(1)
		time.Sleep(time.Duration(50+rng.IntN(200)) * time.Millisecond)
	}
	return false
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
