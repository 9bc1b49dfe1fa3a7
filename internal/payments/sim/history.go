// Package sim is the simulator: a seeded generator of whole histories of
// what providers, players and operators do to payments, run against the
// real intake handlers and the real fulfilment workers (harness.go) and
// judged against a model of the books written apart from the code
// (model.go), which imports nothing of billing. It is lab code: only its
// own tests run it, and nothing in cmd/billing or a service package may
// import it. docs/simulator.md says how to run it and replay a seed.
package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
)

// Letter is a class of the alphabet; each can be switched off
// (-sim.off=...) to measure which class finds what.
type Letter string

// The alphabet's classes.
const (
	LPay        Letter = "pay"        // a completed payment, and its duplicates under the same event id
	LAsync      Letter = "async"      // Stripe: completed unpaid, then async_payment_succeeded
	LAlias      Letter = "alias"      // Stripe payments that carry no PaymentIntent (refunds wait for the alias)
	LRedeliver  Letter = "redeliver"  // any earlier event again, same or new event id
	LDistinct   Letter = "distinct"   // a second, distinct payment for an order
	LRefund     Letter = "refund"     // refunds (Stripe cumulative, Paddle adjustments, Creem refunds)
	LDispute    Letter = "dispute"    // disputes, inquiries and chargebacks, opened and closed
	LCloseOther Letter = "closeother" // a Stripe dispute closed in an open, prevented, legacy or undocumented status
	LWrap       Letter = "wrap"       // amounts near 2^63, whose sum wraps int64
	LMalformed  Letter = "malformed"  // a signed refund with a negative, non-integer amount or no id
	LCurrency   Letter = "currency"   // a refund or dispute in another currency
	LHold       Letter = "hold"       // the event's job cancelled or discarded in River before it runs, the event redelivered later
	LBurst      Letter = "burst"      // 2-3 refunds and open or lost disputes of one payment, all delivered at once
	LConvert    Letter = "convert"    // Mana -> Sparks
	LFund       Letter = "fund"       // a Marquee's day funded out of Sparks
	LFundAhead  Letter = "fundahead"  // a Marquee's day funded the day before it comes: paid only once the day before it is
	LAdjust     Letter = "adjust"     // an operator's adjustment
	LForgive    Letter = "forgive"    // an operator forgives the debt
	LIgnored    Letter = "ignored"    // events that move no money (Paddle pending/rejected, dispute updated)
	LGhost      Letter = "ghost"      // a refund naming a payment that does not exist
	LEndpoint   Letter = "endpoint"   // an operator adds the history's event endpoint (twice: idempotent), disables, enables it or rotates its secret
	LResend     Letter = "resend"     // an operator resends an event billing sent
)

// weights are each class's share of the generated steps.
var weights = []struct {
	l Letter
	w int
}{
	{LPay, 14}, {LAsync, 3}, {LRedeliver, 8}, {LDistinct, 4}, {LRefund, 14}, {LDispute, 11}, {LCloseOther, 3},
	{LBurst, 4}, {LWrap, 2}, {LMalformed, 3}, {LCurrency, 3}, {LConvert, 6}, {LFund, 4}, {LAdjust, 6}, {LForgive, 5},
	{LIgnored, 2}, {LGhost, 2},
}

// The events' operator actions are drawn apart, from a stream of their
// own between the other steps, so that adding them left every history's
// other steps as they were: eventsRate is each one's chance, in percent,
// after a step.
var eventsRate = map[Letter]int{LEndpoint: 6, LResend: 4}

// aheadRate is, likewise from a stream of its own, the chance in percent
// that a fund step is funded ahead (its day still to come), that a fund
// step is followed by its Marquee's next day funded ahead, and that a
// conversion is followed by funding ahead (fundAfterConvert).
const aheadRate = 35

// Letters lists every class.
func Letters() []Letter {
	out := []Letter{LAlias, LHold, LEndpoint, LResend, LFundAhead}
	for _, w := range weights {
		out = append(out, w.l)
	}
	return out
}

// Ops of a step.
const (
	OpPay           = "pay"       // a completed payment of payment Payment of order Order
	OpUnpaid        = "unpaid"    // Stripe's completed session, not paid yet (moves nothing)
	OpRefund        = "refund"    // a refund fact's event
	OpDispute       = "dispute"   // a dispute fact's event (State as the provider says it)
	OpBad           = "bad"       // a malformed signed refund (Bad says how)
	OpIgnored       = "ignored"   // an event that moves no money
	OpGhost         = "ghost"     // a refund of a payment that does not exist
	OpAgain         = "again"     // event Again delivered again (NewID: under a new event id)
	OpConvert       = "convert"   // Player converts Amount Mana
	OpFund          = "fund"      // Player's Marquee funded for a new day (Ahead: while it is still the day before)
	OpAdjust        = "adjust"    // operator adjusts Player's Currency by Amount
	OpForgive       = "forgive"   // operator forgives Player's debt
	OpEndpointAdd   = "ep-add"    // operator adds the history's endpoint, Copies+1 times at once
	OpEndpointOff   = "ep-off"    // operator disables it
	OpEndpointOn    = "ep-on"     // operator enables it
	OpEndpointRot   = "ep-rotate" // operator rotates its secret
	OpResend        = "resend"    // operator resends event Amount (mod the history's events) to every endpoint
	CurMana         = "mana"      // in-app currencies, for OpAdjust
	CurSparks       = "sparks"    //
	OperatorRedrive = "redrive"   // billing webhooks redrive
	OperatorClose   = "close"     // billing webhooks close
	HoldCancel      = "cancel"    // the job is cancelled through River's client
	HoldDrop        = "discard"   // the job is discarded (as after its last attempt)
	stripeName      = "stripe"    //
	paddleName      = "paddle"    //
	creemName       = "creem"     //
	usd             = "usd"       //
	maxInt64        = 1<<63 - 1   //
	nearMax         = 1<<63 - 808 //
)

// Order is one order of a history: its player, provider and price.
type Order struct {
	Player   int
	Provider string
	SKU      string
}

// Step is one thing done, in the model's terms.
type Step struct {
	Op     string
	Class  Letter
	Event  int // the event's number (its id is derived from the seed and it); -1 for no event
	Order  int
	Pay    int  // 0: the order's own payment; k > 0: its k-th distinct payment
	Alias  bool // Stripe: the payment event carries the PaymentIntent
	Async  bool // Stripe: async_payment_succeeded
	Fact   int  // the refund or dispute's number within the payment
	State  string
	Amount int64
	Cur    string
	Bad    string // negative, fraction, noid
	Drain  bool   // OpAdjust: the operator debits the whole balance
	Ahead  bool   // OpFund: the step's day is funded while it is still the day before it
	Hold   string // HoldCancel or HoldDrop: the job is stopped before it runs
	// Operator, on the step that follows up a held event: instead of the
	// provider's redelivery, an operator re-drives it or closes it.
	Operator string
	Again    int // the step whose event OpAgain delivers again
	NewID    bool
	Player   int
	Copies   int // deliveries at once, over the two intake servers
	Burst    int // this step and the next Burst ones are delivered at once
}

// History is one seeded history.
type History struct {
	Seed    uint64
	Players int
	Orders  []Order
	Steps   []Step
}

// EventID is the provider event id of event n of h.
func (h *History) EventID(n int) string { return fmt.Sprintf("evt_sim%d_%d", h.Seed, n) }

// String prints the history, one step a line, for a failure report.
func (h *History) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d players, orders:", h.Seed, h.Players)
	for i, o := range h.Orders {
		fmt.Fprintf(&b, " o%d=p%d/%s/%s", i, o.Player, o.Provider, o.SKU)
	}
	for i, s := range h.Steps {
		fmt.Fprintf(&b, "\n  %2d %s", i, s)
	}
	return b.String()
}

func (s Step) String() string {
	out := fmt.Sprintf("%-8s", s.Op)
	switch s.Op {
	case OpEndpointAdd, OpEndpointOff, OpEndpointOn, OpEndpointRot:
		return out + fmt.Sprintf(" x%d", s.Copies)
	case OpResend:
		return out + fmt.Sprintf(" event #%d", s.Amount)
	case OpConvert, OpFund, OpAdjust, OpForgive:
		if s.Ahead {
			return out + fmt.Sprintf(" p%d ahead", s.Player)
		}
		if s.Drain {
			return out + fmt.Sprintf(" p%d %s all", s.Player, s.Cur)
		}
		return out + fmt.Sprintf(" p%d %s %d", s.Player, s.Cur, s.Amount)
	case OpAgain:
		if s.Operator != "" {
			return out + fmt.Sprintf(" ev%d of step %d by operator %s x%d", s.Event, s.Again, s.Operator, s.Copies)
		}
		return out + fmt.Sprintf(" ev%d of step %d newid=%v x%d", s.Event, s.Again, s.NewID, s.Copies)
	}
	out += fmt.Sprintf(" ev%d o%d pay%d", s.Event, s.Order, s.Pay)
	switch s.Op {
	case OpPay:
		out += fmt.Sprintf(" alias=%v async=%v", s.Alias, s.Async)
	case OpRefund, OpDispute, OpBad, OpGhost:
		out += fmt.Sprintf(" fact%d %s %d %s %s", s.Fact, s.State, s.Amount, s.Cur, s.Bad)
	}
	if s.Hold != "" {
		out += " hold=" + s.Hold
	}
	if s.Burst > 0 {
		out += fmt.Sprintf(" burst(with the next %d)", s.Burst)
	}
	return out + fmt.Sprintf(" x%d", s.Copies)
}

// gen builds histories from a seed.
type gen struct {
	rng      *rand.Rand
	evRng    *rand.Rand // the events' operator actions' own stream
	aheadRng *rand.Rand // funding ahead's own stream
	main     int        // steps drawn from rng
	on       map[Letter]bool
	h        *History
	event    int
	facts    map[[2]int]int // facts per (order, payment)
	dups     map[int]int    // distinct payments per order
	held     []int          // steps whose job was stopped and whose redelivery is still due
	disputes []Step         // the disputes opened so far (not Creem's: they never close)
	noHold   bool           // while a burst is generated: its jobs are not stopped
	endpoint bool           // the history's endpoint was added
}

// Generate returns the history of seed with the classes in off switched off.
func Generate(seed uint64, off map[Letter]bool) *History {
	g := &gen{rng: rand.New(rand.NewPCG(seed, 0x51a1)), evRng: rand.New(rand.NewPCG(seed, 0xe7e5)),
		aheadRng: rand.New(rand.NewPCG(seed, 0xa4ead)), on: map[Letter]bool{}, facts: map[[2]int]int{}, dups: map[int]int{}}
	for _, l := range Letters() {
		g.on[l] = !off[l]
	}
	g.h = &History{Seed: seed, Players: 1 + g.rng.IntN(2)}
	for p := range g.h.Players {
		for range 1 + g.rng.IntN(2) {
			g.h.Orders = append(g.h.Orders, Order{Player: p, Provider: []string{stripeName, paddleName, creemName}[g.rng.IntN(3)],
				SKU: []string{"mana_1000", "mana_1000", "mana_5000"}[g.rng.IntN(3)]})
		}
	}
	n := 10 + g.rng.IntN(31)
	for g.main < n {
		g.step()
		if len(g.held) > 0 && g.rng.IntN(3) == 0 {
			g.redeliverHeld()
		}
	}
	for len(g.held) > 0 {
		g.redeliverHeld()
	}
	return g.h
}

func (g *gen) pick() Letter {
	total := 0
	for _, w := range weights {
		if g.on[w.l] {
			total += w.w
		}
	}
	n := g.rng.IntN(total)
	for _, w := range weights {
		if !g.on[w.l] {
			continue
		}
		if n < w.w {
			return w.l
		}
		n -= w.w
	}
	return LPay
}

func (g *gen) add(s Step) {
	s.Copies = 1 + g.rng.IntN(3)
	if s.Op != OpAgain && s.Event >= 0 {
		s.Event = g.event
		g.event++
	}
	if s.Hold == "" && !g.noHold && g.on[LHold] && s.Event >= 0 && s.Op != OpAgain && s.Op != OpUnpaid && s.Op != OpIgnored &&
		s.Op != OpBad && g.rng.IntN(8) == 0 {
		s.Hold = []string{HoldCancel, HoldDrop}[g.rng.IntN(2)]
		s.Class = LHold
		g.held = append(g.held, len(g.h.Steps))
	}
	g.h.Steps = append(g.h.Steps, s)
	g.main++
	if !g.noHold {
		g.operateEvents()
	}
}

// operateEvents may add an operator's action on events after a step (not
// inside a burst, whose steps are delivered together).
func (g *gen) operateEvents() {
	n := g.evRng.IntN(100)
	switch {
	case g.on[LEndpoint] && n < eventsRate[LEndpoint]:
		op := OpEndpointAdd
		if g.endpoint {
			op = []string{OpEndpointAdd, OpEndpointOff, OpEndpointOn, OpEndpointRot}[g.evRng.IntN(4)]
		}
		g.endpoint = true
		g.h.Steps = append(g.h.Steps, Step{Op: op, Class: LEndpoint, Event: -1, Copies: 1 + g.evRng.IntN(3)})
	case g.on[LResend] && n >= 100-eventsRate[LResend]:
		g.h.Steps = append(g.h.Steps, Step{Op: OpResend, Class: LResend, Event: -1, Copies: 1, Amount: int64(g.evRng.IntN(1000))})
	}
}

func (g *gen) redeliverHeld() {
	i := g.rng.IntN(len(g.held))
	at := g.held[i]
	g.held = slices.Delete(g.held, i, i+1)
	op := []string{"", "", OperatorRedrive, OperatorClose}[g.rng.IntN(4)]
	g.add(Step{Op: OpAgain, Class: LHold, Event: g.h.Steps[at].Event, Again: at, Operator: op})
}

func (g *gen) order() int { return g.rng.IntN(len(g.h.Orders)) }

func (g *gen) step() {
	switch l := g.pick(); l {
	case LPay:
		g.add(g.pay(l, g.order(), 0))
	case LAsync:
		o := g.order()
		if g.h.Orders[o].Provider != stripeName {
			g.add(g.pay(LPay, o, 0))
			return
		}
		pay := g.payOf(o)
		g.add(Step{Op: OpUnpaid, Class: l, Order: o, Pay: pay})
		s := g.pay(l, o, pay)
		s.Async = true
		g.add(s)
	case LDistinct:
		o := g.order()
		g.dups[o]++
		g.add(g.pay(l, o, g.dups[o]))
	case LRedeliver:
		g.again(l)
	case LBurst:
		g.burst()
	case LRefund, LDispute, LCloseOther, LWrap, LCurrency:
		g.reversal(l)
	case LMalformed:
		s := g.refund(l, g.order())
		s.Op, s.Bad = OpBad, []string{"negative", "fraction", "noid"}[g.rng.IntN(3)]
		g.add(s)
	case LIgnored:
		o := g.order()
		g.add(Step{Op: OpIgnored, Class: l, Order: o, Pay: g.payOf(o)})
	case LGhost:
		s := g.refund(l, g.order())
		s.Op = OpGhost
		g.add(s)
	default:
		g.wallet(l)
	}
}

// payOf picks one of order o's payments, its own mostly.
func (g *gen) payOf(o int) int {
	if g.dups[o] > 0 && g.rng.IntN(3) == 0 {
		return 1 + g.rng.IntN(g.dups[o])
	}
	return 0
}

func (g *gen) pay(l Letter, o, pay int) Step {
	return Step{Op: OpPay, Class: l, Order: o, Pay: pay, Alias: !g.on[LAlias] || g.rng.IntN(2) == 0}
}

func (g *gen) again(l Letter) {
	var evs []int
	for i, s := range g.h.Steps {
		if s.Event >= 0 && s.Op != OpAgain && s.Hold == "" {
			evs = append(evs, i)
		}
	}
	if len(evs) == 0 {
		g.add(g.pay(LPay, g.order(), 0))
		return
	}
	at := evs[g.rng.IntN(len(evs))]
	s := Step{Op: OpAgain, Class: l, Event: g.h.Steps[at].Event, Again: at, NewID: g.rng.IntN(2) == 0}
	if s.NewID {
		s.Event = g.event
		g.event++
	}
	g.add(s)
}

// amounts are refund and dispute amounts around the prices (999, 3999).
var amounts = []int64{0, 1, 100, 300, 500, 998, 999, 1000, 2000, 3998, 3999, 5000}

func (g *gen) amount(l Letter) int64 {
	if l == LWrap {
		return []int64{maxInt64, nearMax, 1 << 62}[g.rng.IntN(3)]
	}
	return amounts[g.rng.IntN(len(amounts))]
}

// fact picks a refund or dispute of payment (o, pay): an earlier one
// again, or a new one.
func (g *gen) fact(o, pay int) int {
	k := [2]int{o, pay}
	if g.facts[k] > 0 && g.rng.IntN(2) == 0 {
		return g.rng.IntN(g.facts[k])
	}
	g.facts[k]++
	return g.facts[k] - 1
}

func (g *gen) refund(l Letter, o int) Step {
	pay := g.payOf(o)
	s := Step{Op: OpRefund, Class: l, Order: o, Pay: pay, State: "succeeded", Amount: g.amount(l), Cur: usd}
	if g.h.Orders[o].Provider != stripeName { // Stripe's refund fact is the charge's
		s.Fact = g.fact(o, pay)
	}
	return s
}

func (g *gen) reversal(l Letter) {
	o := g.order()
	p := g.h.Orders[o].Provider
	dispute := l == LCloseOther || (l == LDispute) || (l != LRefund && g.rng.IntN(2) == 0)
	if l == LCloseOther && p != stripeName {
		l, dispute = LDispute, true
	}
	s := g.refund(l, o)
	if dispute {
		s.Op, s.Fact, s.State = OpDispute, g.fact(s.Order, s.Pay), g.disputeState(l, p)
		if p == paddleName {
			s.Fact = 0 // Paddle's chargeback is the transaction's
		}
	}
	if l == LCurrency {
		s.Cur = []string{"eur", "EUR", "gbp"}[g.rng.IntN(3)]
	}
	if s.Op == OpDispute && p != creemName {
		g.disputes = append(g.disputes, s)
	}
	g.add(s)
}

// burst is 2-3 events of one payment that only take money back (refunds,
// open or lost disputes), delivered at once: their clawbacks add up in
// any order, so the model needs no order between them.
func (g *gen) burst() {
	o := g.order()
	pay, p := g.payOf(o), g.h.Orders[o].Provider
	n := 2 + g.rng.IntN(2)
	first := len(g.h.Steps)
	g.noHold = true
	for range n {
		s := Step{Op: OpRefund, Class: LBurst, Order: o, Pay: pay, State: "succeeded", Amount: g.amount(LRefund), Cur: usd}
		if p != stripeName {
			s.Fact = g.fact(o, pay)
		}
		if g.rng.IntN(2) == 0 {
			s.Op, s.Fact = OpDispute, g.fact(o, pay)
			s.State = map[string]string{stripeName: []string{"open", "inquiry", "lost"}[g.rng.IntN(3)],
				paddleName: "lost", creemName: "open"}[p]
			if p == paddleName {
				s.Fact = 0
			} else if p == stripeName {
				g.disputes = append(g.disputes, s)
			}
		}
		g.add(s)
	}
	g.noHold = false
	g.h.Steps[first].Burst = n - 1
}

// owe brings the player into debt as a player who spent everything and
// then saw a dispute would: the operator drains both wallets, then a
// dispute of one of its orders opens.
func (g *gen) owe(player int) {
	for _, cur := range []string{CurMana, CurSparks} {
		g.add(Step{Op: OpAdjust, Class: LForgive, Event: -1, Player: player, Cur: cur, Drain: true})
	}
	var orders []int
	for o, ord := range g.h.Orders {
		if ord.Player == player && ord.Provider != creemName {
			orders = append(orders, o)
		}
	}
	if len(orders) == 0 {
		return
	}
	o := orders[g.rng.IntN(len(orders))]
	s := Step{Op: OpDispute, Class: LForgive, Order: o, Fact: g.fact(o, 0), State: "open", Amount: 999, Cur: usd}
	if g.h.Orders[o].Provider == paddleName {
		s.Fact, s.State = 0, "lost"
	}
	g.disputes = append(g.disputes, s)
	g.add(s)
}

// closeWon often follows a forgiveness: a dispute of the player's closed
// in our favour, so that Mana given back meets a write-off.
func (g *gen) closeWon(player int) {
	var mine []Step
	for _, d := range g.disputes {
		if g.h.Orders[d.Order].Player == player {
			mine = append(mine, d)
		}
	}
	if len(mine) == 0 || g.rng.IntN(4) == 0 {
		return
	}
	s := mine[g.rng.IntN(len(mine))]
	s.Class, s.State, s.Hold, s.Cur = LDispute, "won", "", usd
	if g.h.Orders[s.Order].Provider == stripeName && g.rng.IntN(2) == 0 {
		s.State = "warning_closed"
	}
	g.add(s)
}

// disputeState is what the provider says of a dispute: Stripe's created
// (open, or an inquiry) and closed statuses, Paddle's chargeback (lost)
// and its reverse (won), Creem's created (open).
func (g *gen) disputeState(l Letter, p string) string {
	switch {
	case l == LCloseOther:
		return []string{"under_review", "prevented", "charge_refunded", "needs_response", "garbage"}[g.rng.IntN(5)]
	case p == paddleName:
		return []string{"lost", "lost", "won"}[g.rng.IntN(3)]
	case p == creemName:
		return "open"
	}
	return []string{"open", "open", "inquiry", "won", "lost", "lost", "warning_closed"}[g.rng.IntN(7)]
}

// fund adds fund step s: funded on its day, or ahead of it; and, as often,
// its Marquee's next day funded ahead right after it, which is due exactly
// when s paid its day. Its draws come from their own stream, so that
// funding ahead left every history's other steps as they were.
func (g *gen) fund(s Step) {
	ahead := g.on[LFundAhead] && g.aheadRng.IntN(100) < aheadRate
	next := g.on[LFundAhead] && g.aheadRng.IntN(100) < aheadRate
	if ahead {
		s.Ahead, s.Class = true, LFundAhead
	}
	g.add(s)
	if next {
		g.h.Steps = append(g.h.Steps, Step{Op: OpFund, Class: LFundAhead, Event: -1, Player: s.Player, Ahead: true, Copies: 1})
	}
}

// fundAfterConvert may follow a conversion, which leaves the player
// Sparks to pay with, by a day funded ahead of an unpaid one (refused
// however rich the player), or by a day funded then the next day ahead
// (paid when the first day was).
func (g *gen) fundAfterConvert(player int) {
	if !g.on[LFundAhead] {
		return
	}
	fund := Step{Op: OpFund, Class: LFundAhead, Event: -1, Player: player, Copies: 1}
	switch n := g.aheadRng.IntN(100); {
	case n < aheadRate/2:
		g.h.Steps = append(g.h.Steps, fund)
		fund.Ahead = true
		g.h.Steps = append(g.h.Steps, fund)
	case n < aheadRate:
		fund.Ahead = true
		g.h.Steps = append(g.h.Steps, fund)
	}
}

func (g *gen) wallet(l Letter) {
	s := Step{Class: l, Event: -1, Player: g.rng.IntN(g.h.Players)}
	switch l {
	case LConvert:
		s.Op, s.Amount = OpConvert, []int64{1, 50, 100, 400, 1000, 3000}[g.rng.IntN(6)]
		g.add(s)
		g.fundAfterConvert(s.Player)
		return
	case LFund:
		s.Op = OpFund
		g.fund(s)
		return
	case LAdjust:
		s.Op, s.Cur = OpAdjust, []string{CurMana, CurSparks}[g.rng.IntN(2)]
		s.Amount = []int64{-1000, -300, -10, 10, 300, 700, 2500}[g.rng.IntN(7)]
		if s.Cur == CurSparks {
			s.Amount *= 10
		}
		s.Drain = g.rng.IntN(3) == 0
	default:
		s.Op = OpForgive
		if g.rng.IntN(2) == 0 {
			g.owe(s.Player)
		}
		g.add(s)
		g.closeWon(s.Player)
		return
	}
	g.add(s)
}
