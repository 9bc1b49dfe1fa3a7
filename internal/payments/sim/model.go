package sim

import "strconv"

// The model: where the books must be after a history, written from the
// contract (docs/contract.md, "The provider's truth") and the team's
// rules, sharing no code with billing (this file imports nothing of it, on
// purpose: a model that called the code it judges could not disagree with
// it). It reads the history one step at a time, as the harness delivers
// it (each step's jobs are finished before the next step starts), and
// keeps each player's wallets, debt and write-offs, each order's money and
// each payment's facts.
//
// The rules it encodes:
//   - one payment per provider object; the first one worked mints the
//     order's Mana (settling debt first); a distinct one mints nothing and
//     is refunded for what the provider's own accepted refunds leave;
//   - a refund or dispute event counts (is accepted) when it is well
//     formed, in the payment's currency and in a documented state; any
//     other is refused and changes nothing; it waits while its payment is
//     not known (Stripe's name the PaymentIntent, known once a payment
//     event carried it);
//   - a fact's amount is the largest of its accepted events, a dispute's
//     state the furthest of open < lost < won;
//   - money gone = min(paid, sum of refund facts and open or lost dispute
//     facts, each first capped at paid); Mana clawed back =
//     ceil(minted x gone / paid), at most minted;
//   - a clawback takes Mana, then Sparks (whole Mana's worth), the rest is
//     debt; Mana given back first recovers what was forgiven, then settles
//     debt, then reaches the player; every Mana credit settles debt first;
//   - a conversion is refused while a debt is open (before the balance),
//     a debit (conversion, funding, a negative adjustment) is refused
//     rather than going negative;
//   - a job stopped in River before it ran takes effect when its event is
//     delivered again under the same id, once.

// The model's own price list and rates, restated from the fixtures (the
// test catalogue, the default plan, the harness's conversion rate).
var prices = map[string]struct{ paid, mana int64 }{"mana_1000": {999, 1000}, "mana_5000": {3999, 5000}}

const (
	sparksPerMana = 10
	dayPrice      = 100
)

// Books are the balances, orders and payments of one history.
type Books struct {
	Players  []PlayerBooks
	Orders   []OrderBooks
	Payments map[string]string // PayKey -> status
	Refunds  map[string]int64  // PayKey -> amount we asked the provider to refund
}

// PlayerBooks are one player's wallets and debt.
type PlayerBooks struct{ Mana, Sparks, Debt int64 }

// OrderBooks are what an order says of its money.
type OrderBooks struct {
	Status           string
	Refunded, Clawed int64
}

// PayKey names payment pay of order o in Books.
func PayKey(o, pay int) string { return "o" + strconv.Itoa(o) + "/pay" + strconv.Itoa(pay) }

// mPlayer is a player's wallet, and its Marquee's last paid day (the
// number of the step that paid it).
type mPlayer struct {
	mana, sparks, debt, forgiven int64
	funded                       bool
	paidDay                      int
}

type mPayment struct {
	order, pay     int
	alias, applied bool
	status         string
	clawed         int64
}

type mEvent struct {
	order, pay int
	kind       string // refund or dispute
	fact       int
	state      string // succeeded, open, lost, won
	amount     int64
}

// Model is the model's state over one history.
type Model struct {
	h        *History
	players  []mPlayer
	applied  map[int]int // order -> the payment that minted
	pays     map[[2]int]*mPayment
	events   []mEvent // accepted events, pending or not
	held     map[int]bool
	refunds  map[string]int64
	Outcomes map[int]bool // wallet steps: true when they moved money
	// Recovered is the forgiven Mana given-back Mana recovered (a measure
	// of how often a history reaches that rule).
	Recovered int64
}

// NewModel starts the model of h: nothing paid, empty wallets.
func NewModel(h *History) *Model {
	return &Model{h: h, players: make([]mPlayer, h.Players), applied: map[int]int{}, pays: map[[2]int]*mPayment{},
		held: map[int]bool{}, refunds: map[string]int64{}, Outcomes: map[int]bool{}}
}

// Step applies step i of the history.
func (m *Model) Step(i int) {
	s := m.h.Steps[i]
	switch {
	case s.Hold != "":
		m.held[s.Event] = true // claimed, its job stopped: no effect yet
	case s.Op == OpAgain && !s.NewID:
		// A redelivery or an operator's redrive re-enqueues the stopped
		// work, once; an operator's close ends it with no effect.
		if m.held[s.Event] {
			delete(m.held, s.Event)
			if s.Operator != "close" {
				m.event(m.h.Steps[s.Again])
			}
		}
	case s.Op == OpAgain:
		m.event(m.h.Steps[s.Again])
	case s.Event >= 0:
		m.event(s)
	default:
		m.Outcomes[i] = m.wallet(i, s)
	}
}

// event is what one provider event does once it is worked.
func (m *Model) event(s Step) {
	switch s.Op {
	case OpPay:
		m.payment(s)
	case OpRefund, OpDispute:
		if e, ok := m.accepted(s); ok {
			m.events = append(m.events, e)
			m.settle(s.Order, s.Pay)
		}
	}
	// OpUnpaid, OpIgnored move nothing; OpBad is refused; OpGhost names a
	// payment that never comes.
}

// accepted says whether the provider's event counts, and as what.
func (m *Model) accepted(s Step) (mEvent, bool) {
	if s.Cur != usd && s.Cur != "USD" {
		return mEvent{}, false
	}
	e := mEvent{order: s.Order, pay: s.Pay, kind: s.Op, fact: s.Fact, state: "succeeded", amount: s.Amount}
	if s.Op == OpRefund {
		return e, true
	}
	switch s.State {
	case "open", "inquiry":
		e.state = "open"
	case "lost", "prevented", "charge_refunded":
		// Stripe closes a dispute prevented by a refund to the customer
		// (prevented, and the legacy charge_refunded) with the money gone,
		// as a lost one.
		e.state = "lost"
	case "won", "warning_closed":
		e.state = "won"
	default: // a close in an open status, or an undocumented one, is refused
		return mEvent{}, false
	}
	return e, true
}

func (m *Model) payment(s Step) {
	k := [2]int{s.Order, s.Pay}
	stripe := m.h.Orders[s.Order].Provider == stripeName
	if p := m.pays[k]; p != nil {
		if s.Alias && !p.alias {
			p.alias = true
			m.settle(s.Order, s.Pay)
		}
		return
	}
	p := &mPayment{order: s.Order, pay: s.Pay, alias: s.Alias || !stripe}
	m.pays[k] = p
	price := prices[m.h.Orders[s.Order].SKU]
	if _, paid := m.applied[s.Order]; !paid {
		m.applied[s.Order], p.applied, p.status = s.Pay, true, "applied"
		m.credit(m.h.Orders[s.Order].Player, price.mana)
		m.settle(s.Order, s.Pay)
		return
	}
	// A distinct payment: refunded for what the provider's accepted
	// refunds leave.
	refunded, _, _ := m.gone(p, price.paid)
	p.status = "refunded"
	if left := price.paid - refunded; left > 0 {
		m.refunds[PayKey(s.Order, s.Pay)] = left
	}
}

// known says whether payment (o, pay) is known to the events naming it.
func (m *Model) known(o, pay int) *mPayment {
	p := m.pays[[2]int{o, pay}]
	if p == nil || !p.alias {
		return nil
	}
	return p
}

type factKey struct {
	kind string
	n    int
}

// gone folds p's accepted events into facts and returns what went back:
// refunds, refunds and open or lost disputes (each fact capped at paid,
// the totals at paid), and whether a dispute is open or lost.
func (m *Model) gone(p *mPayment, paid int64) (refunded, total int64, disputed bool) {
	if !p.alias { // Stripe's refunds and disputes wait for the PaymentIntent
		return 0, 0, false
	}
	amount, state := map[factKey]int64{}, map[factKey]int{}
	rank := map[string]int{"succeeded": 0, "open": 1, "lost": 2, "won": 3}
	for _, e := range m.events {
		if e.order != p.order || e.pay != p.pay {
			continue
		}
		k := factKey{e.kind, e.fact}
		amount[k] = max(amount[k], min(e.amount, paid))
		state[k] = max(state[k], rank[e.state])
	}
	for k, a := range amount {
		switch {
		case k.kind == OpRefund:
			refunded += a
			total += a
		case state[k] < rank["won"]:
			total += a
			disputed = true
		}
	}
	return min(paid, refunded), min(paid, total), disputed
}

// settle brings payment (o, pay)'s clawback to what its facts imply.
func (m *Model) settle(o, pay int) {
	p := m.known(o, pay)
	if p == nil || !p.applied {
		return
	}
	price := prices[m.h.Orders[o].SKU]
	_, total, _ := m.gone(p, price.paid)
	target := min(price.mana, (price.mana*total+price.paid-1)/price.paid)
	player := m.h.Orders[o].Player
	switch d := target - p.clawed; {
	case d > 0:
		m.claw(player, d)
	case d < 0:
		m.giveBack(player, -d)
	}
	p.clawed = target
}

func (m *Model) credit(player int, n int64) {
	w := &m.players[player]
	settled := min(w.debt, n)
	w.debt -= settled
	w.mana += n - settled
}

func (m *Model) claw(player int, n int64) {
	w := &m.players[player]
	fromMana := min(n, w.mana)
	w.mana -= fromMana
	rest := n - fromMana
	inSparks := min(rest, w.sparks/sparksPerMana)
	w.sparks -= inSparks * sparksPerMana
	w.debt += rest - inSparks
}

// giveBack: a write-off is recovered first.
func (m *Model) giveBack(player int, n int64) {
	w := &m.players[player]
	recovered := min(n, w.forgiven)
	w.forgiven -= recovered
	m.Recovered += recovered
	m.credit(player, n-recovered)
}

// wallet applies step i, a player's or an operator's; false when refused.
func (m *Model) wallet(i int, s Step) bool {
	w := &m.players[s.Player]
	switch s.Op {
	case OpConvert:
		if w.debt > 0 || w.mana < s.Amount {
			return false
		}
		w.mana -= s.Amount
		w.sparks += s.Amount * sparksPerMana
	case OpFund:
		// Step i funds day i of the player's Marquee. Funded ahead (on day
		// i-1), it is paid only when day i-1 is: paying it over an unpaid
		// day would let that day run unpaid.
		if s.Ahead && !(w.funded && w.paidDay == i-1) {
			return false
		}
		if w.sparks < dayPrice {
			return false
		}
		w.sparks -= dayPrice
		w.funded, w.paidDay = true, i
	case OpAdjust:
		return m.adjust(s)
	case OpForgive:
		w.forgiven += w.debt
		w.debt = 0
	case OpEndpointAdd, OpEndpointOff, OpEndpointOn, OpEndpointRot, OpResend:
		return false // the events' operator actions move no money
	}
	return true
}

func (m *Model) adjust(s Step) bool {
	w := &m.players[s.Player]
	bal := &w.mana
	if s.Cur == CurSparks {
		bal = &w.sparks
	}
	amount := s.Amount
	if s.Drain {
		amount = -*bal
	}
	switch {
	case amount == 0:
		return false
	case amount < 0 && *bal < -amount:
		return false
	case amount < 0:
		*bal += amount
	case s.Cur == CurMana:
		m.credit(s.Player, amount)
	default:
		*bal += amount
	}
	return true
}

// Books returns where the model says the books are.
func (m *Model) Books() Books {
	b := Books{Payments: map[string]string{}, Refunds: m.refunds}
	for _, w := range m.players {
		b.Players = append(b.Players, PlayerBooks{Mana: w.mana, Sparks: w.sparks, Debt: w.debt})
	}
	for o, ord := range m.h.Orders {
		ob := OrderBooks{Status: "pending"}
		if pay, ok := m.applied[o]; ok {
			p := m.pays[[2]int{o, pay}]
			refunded, _, disputed := m.gone(p, prices[ord.SKU].paid)
			ob.Refunded, ob.Clawed = refunded, p.clawed
			switch {
			case disputed:
				ob.Status = "disputed"
			case refunded >= prices[ord.SKU].paid:
				ob.Status = "refunded"
			case refunded > 0:
				ob.Status = "partially_refunded"
			default:
				ob.Status = "fulfilled"
			}
		}
		b.Orders = append(b.Orders, ob)
	}
	for k, p := range m.pays {
		b.Payments[PayKey(k[0], k[1])] = p.status
	}
	return b
}
