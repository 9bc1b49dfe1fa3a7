package sim

// The harness: it plays a history against the real system and reads the
// books back. Two intake handlers (webhook.NewHandler) behind real HTTP
// servers take every provider event, each delivered 1-3 times at once
// over both; a real River client works the real fulfil_order and
// reverse_payment workers; players and operators act through the wallet
// and the enforcer. Nothing here decides what the books should be: that is
// the model's (model.go).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/fulfillment/fulfillmenttest"
	"github.com/fibe-dev/billing/internal/domain/players"
	"github.com/fibe-dev/billing/internal/events"
	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/kit/testkit"
	"github.com/fibe-dev/billing/internal/payments/webhook"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/drivers"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
	"github.com/fibe-dev/billing/wallet"
)

// jobDeadline bounds every wait for a job: generous, for a loaded machine
// under the race detector.
const jobDeadline = 60 * time.Second

// Env is the system the histories run against: one database, one worker,
// two web processes. It plays one history at a time (Run), so that the
// audit after a history judges ended histories only; lanes of histories
// at once each have an Env of their own.
type Env struct {
	Pool     *pgxpool.Pool
	playing  sync.Mutex // held by Run
	worker   *river.Client[pgx.Tx]
	srvs     [2]*httptest.Server
	wallet   *wallet.Store
	refunder *refunder
	held     sync.Map // event id -> true: its job is inserted scheduled, to be stopped
	// claimer is what billing webhooks redrive runs on.
	claimer *webhook.Claimer
	// receiver is the endpoint of every history's events (events.go).
	receiver *receiver
}

// NewEnv starts the system for t, wired as cmd/billing wires it: the web
// processes insert jobs through an insert-only River client, the worker
// works them with the fulfilment workers over the one wallet store.
func NewEnv(t testing.TB) *Env {
	t.Helper()
	pool := testdb.New(t)
	// The wallet tells the low-balance judge as every process's does, so
	// each history's audit also checks its crossings have their events.
	ws := wallet.New(pool, wallet.Options{SparksPerMana: 10, Observer: events.LowBalance{Days: events.DefaultLowBalanceDays}})
	e := &Env{Pool: pool, wallet: ws, refunder: &refunder{asked: map[string]int64{}}}
	e.worker = fulfillmenttest.StartRiver(t, pool, fulfillment.WorkerOptions{Wallet: e.wallet,
		Refunders: map[string]fulfillment.Refunder{provider.Stripe: e.refunder, provider.Paddle: e.refunder, provider.Creem: e.refunder}})
	web, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: testkit.Quiet, TestOnly: true,
		Middleware: []rivertype.Middleware{river.JobInsertMiddlewareFunc(e.hold)}})
	require.NoError(t, err)
	opts := map[string]provider.Options{}
	for name, s := range testkit.WebhookSecrets() {
		opts[name] = provider.Options{WebhookSecrets: s}
	}
	intakes := provider.Select[webhook.Intake](drivers.New(opts))
	for i := range e.srvs {
		e.srvs[i] = httptest.NewServer(webhook.NewHandler(webhook.Options{Pool: pool, River: web, Providers: intakes,
			Logger: testkit.Quiet}))
		t.Cleanup(e.srvs[i].Close)
	}
	e.claimer = webhook.NewClaimer(webhook.Options{Pool: pool, River: web, Providers: intakes, Logger: testkit.Quiet})
	e.receiver = newReceiver(t)
	startDeliveries(t, pool)
	return e
}

// hold inserts the job of a held event scheduled an hour ahead, so the
// harness can stop it through River before any worker runs it.
func (e *Env) hold(ctx context.Context, params []*rivertype.JobInsertParams,
	inner func(context.Context) ([]*rivertype.JobInsertResult, error)) ([]*rivertype.JobInsertResult, error) {
	for _, p := range params {
		var a struct {
			EventID string `json:"event_id"`
		}
		if json.Unmarshal(p.EncodedArgs, &a) == nil {
			if _, ok := e.held.Load(a.EventID); ok {
				at := time.Now().Add(time.Hour)
				p.ScheduledAt, p.State = &at, rivertype.JobStateScheduled
			}
		}
	}
	return inner(ctx)
}

// refunder is the providers' refund API: it refunds what it is asked and
// remembers the first amount asked per payment.
type refunder struct {
	mu    sync.Mutex
	asked map[string]int64
}

func (r *refunder) Refund(_ context.Context, req provider.RefundRequest) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.asked[req.PaymentID]; !ok {
		r.asked[req.PaymentID] = req.Amount
	}
	return "re_sim_" + req.IdempotencyKey, nil
}

// run is one history being played.
type run struct {
	e        *Env
	h        *History
	m        *Model
	players  []int64
	marquees []int64
	orders   []*fulfillment.Order
	bodies   map[int][]byte // event number -> the bytes first sent
	killed   map[int64]bool // jobs the harness stopped
	endpoint int64          // the history's event endpoint, once added
	// funds funds the history's Marquees on its own clock, now: the day
	// of the fund step being played (fund).
	funds    *enforcer.Service
	now      atomic.Int64
	mu       sync.Mutex // guards problems
	problems []string
}

func (r *run) problem(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
}

// Run plays h against the system, step by step beside the model, and
// returns every way the books differ from the model's (none: it passed).
// Runs on one Env wait for one another.
func (e *Env) Run(ctx context.Context, h *History) []string {
	e.playing.Lock()
	defer e.playing.Unlock()
	r := &run{e: e, h: h, m: NewModel(h), bodies: map[int][]byte{}, killed: map[int64]bool{}}
	r.funds = enforcer.New(e.Pool, e.wallet, enforcer.Options{Logger: testkit.Quiet,
		Now: func() time.Time { return time.Unix(0, r.now.Load()).UTC() }})
	if err := r.setup(ctx); err != nil {
		return []string{err.Error()}
	}
	for i := 0; i < len(h.Steps); i += 1 + h.Steps[i].Burst {
		n := 1 + h.Steps[i].Burst
		for j := i; j < i+n; j++ {
			r.m.Step(j)
		}
		var err error
		if n > 1 {
			err = r.burst(ctx, i, n)
		} else {
			err = r.step(ctx, i)
		}
		if err != nil {
			r.problem("step %d: %v", i, err)
			return r.problems
		}
	}
	if err := r.compare(ctx); err != nil {
		r.problem("%v", err)
	}
	if err := r.checkEvents(ctx); err != nil {
		r.problem("events: %v", err)
	}
	return r.problems
}

func (r *run) setup(ctx context.Context) error {
	for range r.h.Players {
		p, _, err := players.Create(ctx, r.e.Pool, "sim")
		if err != nil {
			return err
		}
		m, err := enforcer.CreateMarquee(ctx, r.e.Pool, enforcer.DefaultPlans(),
			enforcer.CreateParams{PlayerID: p.ID, Name: "sim", Plan: "standard"})
		if err != nil {
			return err
		}
		r.players, r.marquees = append(r.players, p.ID), append(r.marquees, m.ID)
	}
	for _, o := range r.h.Orders {
		ord, err := fulfillment.CreateCheckout(ctx, r.e.Pool, testkit.Catalogue(),
			fulfillment.CheckoutParams{PlayerID: r.players[o.Player], SKU: o.SKU, Provider: o.Provider})
		if err != nil {
			return err
		}
		r.orders = append(r.orders, ord)
	}
	return nil
}

func (r *run) step(ctx context.Context, i int) error {
	s := r.h.Steps[i]
	if s.Event < 0 {
		return r.walletStep(ctx, i, s)
	}
	ev := r.h.EventID(s.Event)
	body, err := r.body(s)
	if err != nil {
		return err
	}
	if s.Hold != "" {
		r.e.held.Store(ev, true)
	} else {
		r.e.held.Delete(ev) // a held event's redelivery is worked
	}
	if s.Operator != "" {
		return r.operate(ctx, r.h.Orders[r.stepOf(s).Order].Provider, ev, s)
	}
	r.deliver(ctx, r.h.Orders[r.stepOf(s).Order].Provider, ev, body, s.Copies)
	if s.Hold != "" {
		return r.stop(ctx, ev, s.Hold)
	}
	return r.await(ctx, ev)
}

// operate is an operator's answer to a held event (billing webhooks redrive
// or close), Copies times at once: the claim referees them as it does
// deliveries.
func (r *run) operate(ctx context.Context, name, ev string, s Step) error {
	var wg sync.WaitGroup
	errs := make([]error, s.Copies)
	for i := range s.Copies {
		wg.Go(func() {
			if s.Operator == OperatorRedrive {
				_, errs[i] = r.e.claimer.Redrive(ctx, name, ev)
			} else {
				_, errs[i] = webhook.Close(ctx, r.e.Pool, name, ev, "sim: closed by an operator")
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("%s %s: %w", s.Operator, ev, err)
		}
	}
	return r.await(ctx, ev)
}

// stepOf is the step whose event s carries.
func (r *run) stepOf(s Step) Step {
	if s.Op == OpAgain {
		return r.h.Steps[s.Again]
	}
	return s
}

// body is the event s sends: the same bytes again under the same id, or
// its original rendered anew.
func (r *run) body(s Step) ([]byte, error) {
	if b, ok := r.bodies[s.Event]; ok {
		return b, nil
	}
	b, err := r.render(r.stepOf(s), r.h.EventID(s.Event))
	if err != nil {
		return nil, err
	}
	r.bodies[s.Event] = b
	return b, nil
}

// deliver posts body n times at once, alternating the two servers; every
// answer must be 2xx (a refused event is answered 2xx and recorded).
func (r *run) deliver(ctx context.Context, name, ev string, body []byte, n int) {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for c := range n {
		wg.Go(func() { errs[c] = r.post(ctx, r.e.srvs[(int(r.h.Seed)+c)%2], name, body) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			r.problem("event %s: %v", ev, err)
			return
		}
	}
}

// burst delivers the events of steps i..i+n-1 all at once, then waits for
// every job of them.
func (r *run) burst(ctx context.Context, i, n int) error {
	bodies := make([][]byte, n)
	for j := range n {
		var err error
		if bodies[j], err = r.body(r.h.Steps[i+j]); err != nil {
			return err
		}
	}
	var wg sync.WaitGroup
	for j := range n {
		s := r.h.Steps[i+j]
		wg.Go(func() { r.deliver(ctx, r.h.Orders[s.Order].Provider, r.h.EventID(s.Event), bodies[j], s.Copies) })
	}
	wg.Wait()
	for j := range n {
		if err := r.await(ctx, r.h.EventID(r.h.Steps[i+j].Event)); err != nil {
			return err
		}
	}
	return nil
}

func (r *run) post(ctx context.Context, srv *httptest.Server, name string, body []byte) error {
	secret := testkit.WebhookSecrets()[name][0]
	h, v, err := providerevents.Sign(name, secret, body, time.Now())
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/webhooks/"+name, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(h, v)
	res, err := srv.Client().Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("answered %d: %s", res.StatusCode, bytes.TrimSpace(raw))
	}
	return nil
}

type jobState struct {
	id     int64
	state  string
	errors int
	last   string // the last attempt's error
}

func (r *run) jobs(ctx context.Context, ev string) ([]jobState, error) {
	rows, err := r.e.Pool.Query(ctx, `SELECT id, state::text, coalesce(array_length(errors, 1), 0),
			coalesce(errors[array_length(errors, 1)]->>'error', '') FROM river_job
		WHERE kind IN ('fulfill_order', 'reverse_payment') AND args->>'event_id' = $1 ORDER BY id`, ev)
	if err != nil {
		return nil, fmt.Errorf("read jobs of %s: %w", ev, err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (jobState, error) {
		var j jobState
		return j, row.Scan(&j.id, &j.state, &j.errors, &j.last)
	})
}

func finalized(state string) bool {
	return state == string(rivertype.JobStateCompleted) || state == string(rivertype.JobStateCancelled) ||
		state == string(rivertype.JobStateDiscarded)
}

// await waits until every job of event ev has ended.
func (r *run) await(ctx context.Context, ev string) error {
	deadline := time.Now().Add(jobDeadline)
	for {
		js, err := r.jobs(ctx, ev)
		if err != nil {
			return err
		}
		done := true
		for _, j := range js {
			done = done && finalized(j.state)
			// A job that failed twice on a well-formed history is a defect:
			// report it now rather than wait out River's backoff.
			if j.state == string(rivertype.JobStateRetryable) && j.errors >= 2 {
				return fmt.Errorf("job %d of event %s failed %d times: %s", j.id, ev, j.errors, j.last)
			}
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("jobs of event %s not finished after %s: %+v", ev, jobDeadline, js)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop stops the held job of ev before it runs: cancelled through River's
// client, or discarded as a job out of attempts is.
func (r *run) stop(ctx context.Context, ev, how string) error {
	js, err := r.jobs(ctx, ev)
	if err != nil {
		return err
	}
	if len(js) == 0 && r.decidedAtClaim(ctx, ev) {
		return nil // refused or ignored at its claim: no job to stop
	}
	if len(js) != 1 || js[0].state != string(rivertype.JobStateScheduled) {
		return fmt.Errorf("held event %s: want one scheduled job, have %+v", ev, js)
	}
	id := js[0].id
	r.killed[id] = true
	if how == HoldCancel {
		_, err = r.e.worker.JobCancel(ctx, id)
	} else {
		_, err = r.e.Pool.Exec(ctx, `UPDATE river_job SET state = 'discarded', finalized_at = now(),
			errors = array_append(errors, '{"error":"sim: discarded before it ran"}'::jsonb) WHERE id = $1`, id)
	}
	if err != nil {
		return fmt.Errorf("stop job %d of %s: %w", id, ev, err)
	}
	return r.await(ctx, ev)
}

func (r *run) walletStep(ctx context.Context, i int, s Step) error {
	player := r.players[s.Player]
	key := fmt.Sprintf("sim-%d-%d", r.h.Seed, i)
	var err error
	moved := true
	switch s.Op {
	case OpConvert:
		_, err = r.e.wallet.Convert(ctx, wallet.ConvertParams{PlayerID: player, Mana: s.Amount, IdempotencyKey: wallet.CallerKey(key)})
	case OpFund:
		moved, err = r.fund(ctx, i, s)
	case OpAdjust:
		cur := wallet.Mana
		if s.Cur == CurSparks {
			cur = wallet.Sparks
		}
		moved, err = r.adjust(ctx, player, cur, s, key)
	case OpForgive:
		_, err = fulfillment.ForgiveDebt(ctx, r.e.Pool, r.e.wallet, player, key, "sim")
	case OpEndpointAdd, OpEndpointOff, OpEndpointOn, OpEndpointRot, OpResend:
		moved, err = false, r.eventsStep(ctx, i, s)
	}
	if errors.Is(err, wallet.ErrInsufficientBalance) || errors.Is(err, wallet.ErrOutstandingDebt) {
		moved, err = false, nil
	}
	if err != nil {
		return err
	}
	if moved != r.m.Outcomes[i] {
		r.problem("step %d %s: moved money %v, model says %v", i, s, moved, r.m.Outcomes[i])
	}
	return nil
}

// fund funds day i of the player's Marquee (days from 1 January 2030) at
// noon of that day, or of the day before when s funds it ahead.
func (r *run) fund(ctx context.Context, i int, s Step) (bool, error) {
	day := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, i)
	now := day.Add(12 * time.Hour)
	if s.Ahead {
		now = now.AddDate(0, 0, -1)
	}
	r.now.Store(now.UnixNano())
	res, err := r.funds.FundDay(ctx, enforcer.FundDayArgs{MarqueeID: r.marquees[s.Player], Day: day.Format(time.DateOnly)})
	return err == nil && res.Outcome == enforcer.OutcomeFunded, err
}

// adjust is the operator's adjustment of s; a drain debits the whole
// balance as the system has it.
func (r *run) adjust(ctx context.Context, player int64, cur wallet.Currency, s Step, key string) (bool, error) {
	amount := s.Amount
	if s.Drain {
		bal, err := r.e.wallet.Balances(ctx, player)
		if err != nil {
			return false, err
		}
		amount = -bal[cur]
	}
	if amount == 0 {
		return false, nil
	}
	_, err := r.e.wallet.Adjust(ctx, wallet.AdjustParams{PlayerID: player, Currency: cur, Amount: amount, Reason: "sim", Key: key})
	return err == nil, err
}

// books reads what the system says.
func (r *run) books(ctx context.Context) (Books, error) {
	b := Books{Payments: map[string]string{}, Refunds: map[string]int64{}}
	for _, p := range r.players {
		bal, err := r.e.wallet.Balances(ctx, p)
		if err != nil {
			return b, err
		}
		debt, err := wallet.OutstandingDebt(ctx, r.e.Pool, p)
		if err != nil {
			return b, err
		}
		b.Players = append(b.Players, PlayerBooks{Mana: bal[wallet.Mana], Sparks: bal[wallet.Sparks], Debt: debt})
	}
	keys := r.payKeys()
	for i, o := range r.orders {
		got, err := fulfillment.GetOrder(ctx, r.e.Pool, o.PlayerID, o.ID)
		if err != nil {
			return b, err
		}
		b.Orders = append(b.Orders, OrderBooks{Status: got.Status, Refunded: got.RefundedAmount, Clawed: got.ClawedBackMana})
		pays, err := fulfillment.ListPayments(ctx, r.e.Pool, fulfillment.ListPaymentsParams{OrderID: o.ID})
		if err != nil {
			return b, err
		}
		for _, p := range pays {
			k, ok := keys[p.PaymentID]
			if !ok {
				k = "unknown payment " + p.PaymentID + " of o" + strconv.Itoa(i)
			}
			b.Payments[k] = p.Status
		}
	}
	r.e.refunder.mu.Lock()
	defer r.e.refunder.mu.Unlock()
	for id, k := range keys {
		if n, ok := r.e.refunder.asked[id]; ok {
			b.Refunds[k] = n
		}
	}
	return b, nil
}

// compare checks the books against the model's, and invariant 11 on the
// history's events.
func (r *run) compare(ctx context.Context) error {
	got, err := r.books(ctx)
	if err != nil {
		return err
	}
	want := r.m.Books()
	for i := range want.Players {
		if got.Players[i] != want.Players[i] {
			r.problems = append(r.problems, fmt.Sprintf("player p%d: have %+v, model %+v", i, got.Players[i], want.Players[i]))
		}
	}
	for i := range want.Orders {
		if got.Orders[i] != want.Orders[i] {
			r.problems = append(r.problems, fmt.Sprintf("order o%d: have %+v, model %+v", i, got.Orders[i], want.Orders[i]))
		}
	}
	r.diff("payment status", got.Payments, want.Payments)
	r.diff("refund asked", got.Refunds, want.Refunds)
	return r.outcomes(ctx)
}

func (r *run) diff(what string, got, want any) {
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if !bytes.Equal(g, w) {
		r.problems = append(r.problems, fmt.Sprintf("%s: have %s, model %s", what, g, w))
	}
}

// outcomes checks invariant 11 for every event whose job the harness
// stopped: the event still took effect, through another job of it that
// ran (its redelivery re-enqueued the work).
func (r *run) outcomes(ctx context.Context) error {
	closed := map[int]bool{} // events an operator closed: no job may run them
	for _, s := range r.h.Steps {
		if s.Operator == OperatorClose {
			closed[s.Event] = true
		}
	}
	for _, s := range r.h.Steps {
		if s.Hold == "" {
			continue
		}
		ev := r.h.EventID(s.Event)
		if closed[s.Event] {
			r.requireClosed(ctx, ev)
			continue
		}
		js, err := r.jobs(ctx, ev)
		if err != nil {
			return err
		}
		ran := len(js) == 0 && r.decidedAtClaim(ctx, ev)
		for _, j := range js {
			ran = ran || (!r.killed[j.id] && (j.state == string(rivertype.JobStateCompleted) || j.state == string(rivertype.JobStateCancelled)))
		}
		if !ran {
			r.problems = append(r.problems, fmt.Sprintf("invariant 11: event %s was claimed, its job stopped, "+
				"and no job of it ran after its redelivery: %+v", ev, js))
		}
	}
	return r.everyEventHasAnOutcome(ctx)
}

// requireClosed: ev, closed by an operator, is recorded refused and no job
// of it ran.
func (r *run) requireClosed(ctx context.Context, ev string) {
	var outcome string
	err := r.e.Pool.QueryRow(ctx, `SELECT coalesce(outcome, '') FROM webhook_events WHERE event_id = $1`, ev).Scan(&outcome)
	if err != nil || outcome != "refused" {
		r.problems = append(r.problems, fmt.Sprintf("event %s closed by an operator: outcome %q (%v), want refused", ev, outcome, err))
	}
}

// decidedAtClaim: ev was refused or ignored by its claim, with no job.
func (r *run) decidedAtClaim(ctx context.Context, ev string) bool {
	var outcome string
	err := r.e.Pool.QueryRow(ctx, `SELECT coalesce(outcome, '') FROM webhook_events WHERE event_id = $1`, ev).Scan(&outcome)
	return err == nil && (outcome == "refused" || outcome == "ignored")
}

// everyEventHasAnOutcome is invariant 11 read from the claims themselves,
// once every job of the history has ended: no claimed event lacks an
// outcome.
func (r *run) everyEventHasAnOutcome(ctx context.Context) error {
	prefix := fmt.Sprintf("evt_sim%d_", r.h.Seed) // histories share the database: this one's events
	rows, err := r.e.Pool.Query(ctx, `SELECT provider || '/' || event_id FROM webhook_events
		WHERE outcome IS NULL AND starts_with(event_id, $1) ORDER BY 1`, prefix)
	if err != nil {
		return fmt.Errorf("read outcomes: %w", err)
	}
	missing, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("read outcomes: %w", err)
	}
	for _, ev := range missing {
		r.problems = append(r.problems, "invariant 11: event "+ev+" has no outcome after every job ended")
	}
	return nil
}
