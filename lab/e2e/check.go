package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/fibe-dev/billing/wallet"
)

// churnWindow is how long a job the system enqueues by itself after the
// load (a periodic enforcer sweep every 2s, the fund_day jobs a sweep
// enqueues for Marquees whose owners lack the Sparks, the key reaper) may
// wait unworked and still count as fresh churn rather than work left
// undone: two and a half enforcer periods.
const churnWindow = 5 * time.Second

// pendingSQL counts (or lists) jobs that are work left undone at time $2:
// every job in the given states except fresh churn, a job created after the
// load ended ($1) and less than churnWindow before $2 that is still in one
// of the churn states ($4). A job the workload caused is never churn.
const pendingSQL = `FROM river_job WHERE state = ANY($3::river_job_state[])
	AND NOT (created_at >= $1 AND created_at > $2::timestamptz - make_interval(secs => $5) AND state = ANY($4::river_job_state[]))`

// settle waits until River has nothing left to do: no job available,
// running or retryable but fresh churn (a periodic sweep may flash by),
// seen three times in a row, and a few enforcer ticks have passed so
// top-ups are funded. It reports whether that happened within the settle
// window.
//
// The window is opts.Settle, stretched while River holds a retry the
// faults caused: River backs off attempt^4 seconds after each failed or
// rescued attempt, so a job whose worker was killed under it three times
// waits 81s before its next one, through no fault of billing. The
// window then ends retryGrace after the latest such retry is due, and
// never later than maxRetryWait past its own end.
func (r *Run) settle(ctx context.Context) (bool, string) {
	start := time.Now()
	deadline := start.Add(r.opts.Settle)
	hardStop := deadline.Add(maxRetryWait)
	quiet := 0
	left := "nothing looked at yet"
	for time.Now().Before(deadline) {
		if left = r.unsettled(ctx); left == "" {
			quiet++
			if quiet >= 3 {
				return true, ""
			}
		} else {
			quiet = 0
		}
		deadline = r.stretchForRetries(ctx, deadline, hardStop)
		time.Sleep(500 * time.Millisecond)
	}
	return false, fmt.Sprintf("after %v, at the last look: %s", time.Since(start).Round(time.Second), left)
}

// unsettled says what is still to be done ("" when nothing is): River
// jobs pending but fresh churn, lost webhooks not yet recovered, fewer than
// two sweeps since the load, event deliveries pending.
func (r *Run) unsettled(ctx context.Context) string {
	var busy int
	err := r.pool.QueryRow(ctx, `SELECT count(*) `+pendingSQL, r.loadEnd, time.Now(),
		[]string{"available", "running", "retryable"}, []string{"available", "running"}, churnWindow.Seconds()).Scan(&busy)
	switch {
	case err != nil:
		return "River's jobs unread: " + err.Error()
	case busy > 0:
		return fmt.Sprintf("%d River jobs available, running or retryable", busy)
	case !r.lostRecovered(ctx):
		return "a payment whose webhook was lost is not recovered yet"
	case !r.sweptTwice(ctx):
		return "fewer than two enforcer sweeps since the load ended"
	case !r.deliveriesDone(ctx):
		return "an event delivery is pending"
	}
	return ""
}

// maxRetryWait bounds how far settle stretches its window for River's
// scheduled retries: past it, a job still waiting is reported as work
// left undone. retryGrace is how long a retry has, once due, to be
// fetched and run (River polls every second; a busy machine is slow).
const (
	maxRetryWait = 5 * time.Minute
	retryGrace   = 30 * time.Second
)

// stretchForRetries returns the settle deadline moved, if need be, to
// retryGrace after the latest retry scheduled (a River job's, or an
// outgoing event delivery's next attempt, whose backoff can outlast the
// settle window), capped at hardStop, and says so in the run's output when
// it moves.
func (r *Run) stretchForRetries(ctx context.Context, deadline, hardStop time.Time) time.Time {
	what, due := r.lastRetry(ctx)
	if due == nil {
		return deadline
	}
	want := due.Add(retryGrace)
	if want.After(hardStop) {
		want = hardStop
	}
	if !want.After(deadline) {
		return deadline
	}
	fmt.Fprintf(r.opts.Out, "chaos: %s at %s; settling until %s\n", what, due.Format("15:04:05"), want.Format("15:04:05"))
	return want
}

// lastRetry is the latest retry scheduled, River's or an event
// delivery's, and what it is; nil when none is.
func (r *Run) lastRetry(ctx context.Context) (string, *time.Time) {
	var what string
	var due *time.Time
	var id int64
	var kind string
	var attempt int
	if err := r.pool.QueryRow(ctx, `SELECT id, kind, attempt, scheduled_at FROM river_job WHERE state = 'retryable'
		ORDER BY scheduled_at DESC LIMIT 1`).Scan(&id, &kind, &attempt, &due); err == nil && due != nil {
		what = fmt.Sprintf("River retries %s job %d (after attempt %d)", kind, id, attempt)
	}
	var next *time.Time
	if err := r.pool.QueryRow(ctx, `SELECT id, attempts, next_attempt_at FROM event_deliveries
		WHERE state = 'pending' AND next_attempt_at IS NOT NULL ORDER BY next_attempt_at DESC LIMIT 1`).Scan(&id, &attempt, &next); err == nil &&
		next != nil && (due == nil || next.After(*due)) {
		what, due = fmt.Sprintf("event delivery %d is tried again (after attempt %d)", id, attempt), next
	}
	return what, due
}

// sweptTwice reports whether the enforcer has swept at least twice since
// the load ended, so the last top-ups are funded (a condition, not a
// guess at the sweep period).
func (r *Run) sweptTwice(ctx context.Context) bool {
	var n int
	err := r.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'enforcer_sweep' AND state = 'completed'
		AND created_at > $1`, r.loadEnd).Scan(&n)
	return err == nil && n >= 2
}

// deliveriesDone reports whether no delivery of an event is still
// pending but fresh churn's (an event a periodic sweep wrote after the
// load, within churnWindow): the receiver's check judges every other one
// delivered.
func (r *Run) deliveriesDone(ctx context.Context) bool {
	var n int
	err := r.pool.QueryRow(ctx, `SELECT count(*) FROM event_deliveries d JOIN events v ON v.id = d.event_id
		WHERE d.state = 'pending' AND NOT (v.created_at >= $1 AND v.created_at > now() - make_interval(secs => $2))`,
		r.loadEnd, churnWindow.Seconds()).Scan(&n)
	return err == nil && n == 0
}

// lostRecovered reports whether reconciliation has claimed every payment
// whose webhook was lost.
func (r *Run) lostRecovered(ctx context.Context) bool {
	var lost []string
	r.model.with(func() { lost = append(lost, r.model.lostHooks...) })
	var n int
	err := r.pool.QueryRow(ctx, `SELECT count(*) FROM webhook_events WHERE event_id = ANY($1)`, lost).Scan(&n)
	return err == nil && n == len(lost)
}

// freeze stops the workers gracefully (running jobs finish) so the checks
// judge a state nothing changes any more, and records when: jobs the
// leader's periodic schedule enqueued just before are left available.
func (r *Run) freeze(ctx context.Context) error {
	for _, w := range r.workers {
		if w.Running() {
			if err := w.Stop(30 * time.Second); err != nil {
				r.logf("freeze: stop %s: %v", w.Name, err)
			}
		}
	}
	return r.pool.QueryRow(ctx, `SELECT now()`).Scan(&r.frozenAt)
}

// check compares the database with the model and the invariants.
func (r *Run) check(ctx context.Context, settled bool, left string) (*Report, error) {
	rep := r.newReport()
	rep.check("river settled (nothing available/running/retryable but fresh periodic churn)", settled, left)
	checks := []func(context.Context, *Report) error{
		r.checkOrders, r.checkSDKEffects, r.checkFunding, r.checkJobs, r.checkLedgerVerify, r.checkMoneyBack,
		r.checkCheckouts, r.checkSentEvents,
	}
	if r.fo != nil {
		checks = append(checks, r.checkFailover)
	}
	for _, c := range checks {
		if err := c(ctx, rep); err != nil {
			return rep, err
		}
	}
	r.reader.mu.Lock()
	v := append([]string(nil), r.reader.violations...)
	r.reader.mu.Unlock()
	rep.check(fmt.Sprintf("ledger sums zero in every REPEATABLE READ snapshot (%d reads)", r.reader.reads.Load()),
		len(v) == 0 && r.reader.reads.Load() > 0, strings.Join(v, "; "))
	return rep, nil
}

func (r *Run) checkOrders(ctx context.Context, rep *Report) error {
	rows, err := r.pool.Query(ctx, `
		SELECT o.id, o.status, o.mana,
		       count(t.id), coalesce(sum(t.amount), 0)
		FROM orders o
		LEFT JOIN wallet_transactions t ON t.idempotency_key = `+wallet.SQLFulfilmentKey("o.id")+`
		GROUP BY o.id`)
	if err != nil {
		return err
	}
	defer rows.Close()
	var bad []string
	fulfilled, rejected := 0, 0
	for rows.Next() {
		var id, mana, credits, minted int64
		var status string
		if err := rows.Scan(&id, &status, &mana, &credits, &minted); err != nil {
			return err
		}
		om := r.model.orders[id]
		switch {
		case credits > 1:
			bad = append(bad, fmt.Sprintf("order %d credited %d times", id, credits))
		case om != nil && om.paid && om.correct && (status != "fulfilled" || credits != 1 || minted != om.mana):
			bad = append(bad, fmt.Sprintf("paid order %d: status %s, %d credits, minted %d, snapshot %d", id, status, credits, minted, om.mana))
		case om != nil && om.paid && !om.correct && (status != "rejected" || credits != 0):
			bad = append(bad, fmt.Sprintf("mispaid order %d: status %s, %d credits", id, status, credits))
		case credits == 1 && minted != mana:
			bad = append(bad, fmt.Sprintf("order %d minted %d, snapshot %d", id, minted, mana))
		}
		if status == "fulfilled" {
			fulfilled++
		}
		if status == "rejected" {
			rejected++
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	rep.Orders, rep.Fulfilled, rep.Rejected = len(r.model.orders), fulfilled, rejected
	rep.check("every paid order fulfilled once with its snapshot Mana; mispaid ones minted nothing", len(bad) == 0, strings.Join(first(bad, 10), "; "))
	return nil
}

// checkCheckouts: every checkout the API acknowledged (201) carries its
// one provider checkout, provider outage or not.
func (r *Run) checkCheckouts(ctx context.Context, rep *Report) error {
	var ids []int64
	r.model.with(func() {
		for id := range r.model.orders {
			ids = append(ids, id)
		}
	})
	var missing int
	if err := r.pool.QueryRow(ctx, `SELECT count(*) FROM orders WHERE id = ANY($1) AND checkout_url IS NULL`,
		ids).Scan(&missing); err != nil {
		return err
	}
	rep.check("every acknowledged checkout has its provider checkout URL", missing == 0,
		fmt.Sprintf("%d acknowledged orders without one", missing))
	rep.check(fmt.Sprintf("every payment whose webhook was lost was recovered by reconciliation (%d)", rep.LostWebhooks),
		r.lostRecovered(ctx), "")
	unjudged := r.model.unjudged()
	rep.check("every provider event was acknowledged or is one reconciliation recovers (the model can judge its money)",
		len(unjudged) == 0, fmt.Sprintf("deliveries given up after %s: %s", r.deliveryHorizon(), strings.Join(first(unjudged, 10), ", ")))
	return nil
}

// checkSDKEffects: each acknowledged idempotent call had exactly one effect;
// an unknown call (every attempt lost) at most one.
func (r *Run) checkSDKEffects(ctx context.Context, rep *Report) error {
	var bad []string
	for id, pm := range r.model.players {
		var orders, convs, mqs, pgs int
		err := r.pool.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM orders WHERE player_id = $1),
			(SELECT count(*) FROM wallet_transactions WHERE player_id = $1 AND kind = 'conversion' AND currency = 'mana'),
			(SELECT count(*) FROM marquees WHERE player_id = $1),
			(SELECT count(*) FROM playgrounds WHERE player_id = $1)`, id).Scan(&orders, &convs, &mqs, &pgs)
		if err != nil {
			return err
		}
		for _, c := range []struct {
			what           string
			got, acked, un int
		}{
			{"checkouts", orders, pm.checkouts, pm.checkoutsUnknown},
			{"conversions", convs, len(pm.conversions), pm.conversionsUnknown},
			{"marquees", mqs, len(pm.marquees), pm.marqueesUnknown},
			{"playgrounds", pgs, len(pm.playgrounds), pm.playgroundsUnknown},
		} {
			if c.got < c.acked || c.got > c.acked+c.un {
				bad = append(bad, fmt.Sprintf("player %d %s: %d in db, %d acknowledged (+%d unknown)", id, c.what, c.got, c.acked, c.un))
			}
		}
	}
	rep.check("each idempotent SDK call had exactly one effect", len(bad) == 0, strings.Join(first(bad, 10), "; "))
	return nil
}

func (r *Run) checkFunding(ctx context.Context, rep *Report) error {
	var doubles int
	if err := r.pool.QueryRow(ctx, `SELECT count(*) FROM (
		SELECT 1 FROM wallet_transactions WHERE kind = 'funding'
		GROUP BY split_part(idempotency_key, ':', 2), (created_at AT TIME ZONE 'UTC')::date HAVING count(*) > 1) d`).Scan(&doubles); err != nil {
		return err
	}
	rep.check("at most one funding debit per Marquee per service day", doubles == 0, fmt.Sprintf("%d duplicates", doubles))
	rows, err := r.pool.Query(ctx, `
		SELECT m.id, m.status, m.daily_price, coalesce(w.balance, 0),
		       (SELECT count(*) FROM wallet_transactions t WHERE t.idempotency_key LIKE `+wallet.SQLFundingKey("m.id", "'%'")+`)
		FROM marquees m
		LEFT JOIN wallets w ON w.player_id = m.player_id AND w.currency = 'sparks'
		WHERE m.desired_state = 'running'`)
	if err != nil {
		return err
	}
	defer rows.Close()
	var bad []string
	funded := 0
	for rows.Next() {
		var id, price, sparks, debits int64
		var status string
		if err := rows.Scan(&id, &status, &price, &sparks, &debits); err != nil {
			return err
		}
		if debits > 0 {
			funded++
		}
		if debits == 0 && sparks >= price {
			bad = append(bad, fmt.Sprintf("marquee %d unfunded (%s) while its owner holds %d Sparks >= %d", id, status, sparks, price))
		}
	}
	rep.MarqueesFunded = funded
	rep.check("every Marquee whose owner has the Sparks was funded", len(bad) == 0, strings.Join(first(bad, 10), "; "))
	return rows.Err()
}

// checkJobs runs on the frozen state (workers stopped): no job is left
// running, retryable or discarded, and none available but fresh churn the
// periodic schedule enqueued after the load, shortly before the freeze.
// Every job the workload caused was finalized.
func (r *Run) checkJobs(ctx context.Context, rep *Report) error {
	args := []any{r.loadEnd, r.frozenAt, []string{"available", "running", "retryable", "discarded"}, []string{"available"}, churnWindow.Seconds()}
	rows, err := r.pool.Query(ctx, `SELECT id, kind, state::text, coalesce(errors[array_length(errors, 1)]->>'error', '')
		`+pendingSQL+` ORDER BY id LIMIT 20`, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	var left []string
	for rows.Next() {
		var id int64
		var kind, state, lastErr string
		if err := rows.Scan(&id, &kind, &state, &lastErr); err != nil {
			return err
		}
		left = append(left, fmt.Sprintf("job %d %s %s %s", id, kind, state, lastErr))
	}
	if err := rows.Err(); err != nil {
		return err
	}
	var churn int
	if err := r.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'available'
		AND created_at >= $1 AND created_at > $2::timestamptz - make_interval(secs => $3)`,
		r.loadEnd, r.frozenAt, churnWindow.Seconds()).Scan(&churn); err != nil {
		return err
	}
	rep.check(fmt.Sprintf("no River job left available/running/retryable or discarded (%d fresh periodic churn)", churn),
		len(left) == 0, strings.Join(left, "; "))
	return nil
}

func (r *Run) checkLedgerVerify(ctx context.Context, rep *Report) error {
	cmd := exec.CommandContext(ctx, r.opts.Binary, "ledger", "verify")
	cmd.Env = append(cmd.Environ(), "BILLING_DATABASE_URL="+r.dbURL)
	out, err := cmd.CombinedOutput()
	rep.check("billing ledger verify exits 0", err == nil, strings.TrimSpace(string(out)))
	return nil
}

func first(xs []string, n int) []string {
	if len(xs) > n {
		return append(xs[:n:n], "… "+strconv.Itoa(len(xs)-n)+" more")
	}
	return xs
}
