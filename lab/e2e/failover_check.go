package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// FailoverReport is what a failover run adds to the report.
type FailoverReport struct {
	Faults []FaultResult
	// Operations by outcome after the unknown ones were replayed, and how
	// many were unknown before.
	OK, Failed, Resolved, LeftUnknown int
	// HooksAcked counts provider events and probe events acknowledged.
	HooksAcked, ProbesAcked int
	// NotDurable is how many commits billing refused because no standby
	// confirmed them (every process, the whole run).
	NotDurable int64
	// Rewound names the former primaries the formation had to rewind
	// because pg_auto_failover sent them to follow the new primary without
	// one (formation.Formation.Rewound).
	Rewound []string
}

// checkFailover judges a failover run on the final primary: every
// acknowledged operation is there exactly as acknowledged, no refused one
// left an effect, the balances are the model's, and the formation is
// whole again with every lost node back as a standby.
func (r *Run) checkFailover(ctx context.Context, rep *Report) error {
	fr := &FailoverReport{NotDurable: r.scrape(ctx).notDurable}
	r.fo.rejoins.Wait()
	fr.Rewound = r.fo.f.Rewound()
	r.fo.mu.Lock()
	for _, f := range r.fo.faults {
		fr.Faults = append(fr.Faults, *f)
	}
	r.fo.mu.Unlock()
	rep.Failover = fr
	ops := r.fo.history.snapshot()
	for _, o := range ops {
		switch {
		case o.outcome == OK:
			fr.OK++
		case o.outcome == Fail:
			fr.Failed++
		default:
			fr.LeftUnknown++
		}
		if o.resolved {
			fr.Resolved++
		}
	}
	rep.check(fmt.Sprintf("every operation ok or fail once its unknowns were replayed by key (%d ok, %d fail, %d resolved from unknown)",
		fr.OK, fr.Failed, fr.Resolved), fr.LeftUnknown == 0 && len(ops) > 0, fmt.Sprintf("%d still unknown", fr.LeftUnknown))
	for _, c := range []func(context.Context, *Report, []op) error{r.checkAcked, r.checkRefused} {
		if err := c(ctx, rep, ops); err != nil {
			return err
		}
	}
	for _, c := range []func(context.Context, *Report, *FailoverReport) error{r.checkEvents, r.checkValue, r.checkFaults} {
		if err := c(ctx, rep, fr); err != nil {
			return err
		}
	}
	return nil
}

// playerOf is the player whose API key authorised o.
func (r *Run) playerOf(o op) int64 {
	key := strings.TrimPrefix(o.auth, "Bearer ")
	var id int64
	r.model.with(func() {
		for pid, pm := range r.model.players {
			if pm.apiKey == key {
				id = pid
			}
		}
	})
	return id
}

// conversionLegs counts the wallet posts of the conversion keyed key.
const conversionLegs = `SELECT count(*) FROM wallet_transactions WHERE idempotency_key IN
	('api:' || $1::bigint || ':conversion:' || $2 || ':mana_debit', 'api:' || $1::bigint || ':conversion:' || $2 || ':sparks_credit')`

// checkAcked: every acknowledged operation's stored answer is, byte for
// byte, what the client was told, and its effect exists once.
func (r *Run) checkAcked(ctx context.Context, rep *Report, ops []op) error {
	var bad []string
	for _, o := range ops {
		if o.outcome != OK {
			continue
		}
		player := r.playerOf(o)
		var status string
		var code int
		var body []byte
		err := r.pool.QueryRow(ctx, `SELECT status, coalesce(response_status, 0), coalesce(response_body, '')
			FROM idempotency_keys WHERE player_id = $1 AND key = $2`, player, o.key).Scan(&status, &code, &body)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			bad = append(bad, o.String()+": acknowledged, absent from the final primary")
			continue
		case err != nil:
			return err
		case status != "completed" || code != o.status || !bytes.Equal(body, o.answer):
			bad = append(bad, fmt.Sprintf("%s: stored %s %d %q", o, status, code, truncate(body)))
			continue
		}
		if o.kind() == "POST /v1/conversions" {
			var legs int
			if err := r.pool.QueryRow(ctx, conversionLegs, player, o.key).Scan(&legs); err != nil {
				return err
			}
			if legs != 2 {
				bad = append(bad, fmt.Sprintf("%s: %d wallet legs", o, legs))
			}
		}
		if o.kind() == "POST /v1/checkouts" {
			if n, err := r.count(ctx, `SELECT count(*) FROM orders WHERE player_id = $1 AND checkout_key = $2`, player, o.key); err != nil {
				return err
			} else if n != 1 {
				bad = append(bad, fmt.Sprintf("%s: %d orders", o, n))
			}
		}
	}
	rep.check("every acknowledged API mutation is on the final primary, answered as acknowledged, its effect once",
		len(bad) == 0, strings.Join(first(bad, 10), "; "))
	return nil
}

// checkRefused: an operation refused for good left no effect.
func (r *Run) checkRefused(ctx context.Context, rep *Report, ops []op) error {
	var bad []string
	n := 0
	for _, o := range ops {
		if o.outcome != Fail {
			continue
		}
		n++
		player := r.playerOf(o)
		var legs, orders int
		if err := r.pool.QueryRow(ctx, conversionLegs, player, o.key).Scan(&legs); err != nil {
			return err
		}
		orders, err := r.count(ctx, `SELECT count(*) FROM orders WHERE player_id = $1 AND checkout_key = $2`, player, o.key)
		if err != nil {
			return err
		}
		var code int
		err = r.pool.QueryRow(ctx, `SELECT coalesce(response_status, 0) FROM idempotency_keys WHERE player_id = $1 AND key = $2`,
			player, o.key).Scan(&code)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if legs != 0 || orders != 0 || (err == nil && code != o.status) {
			bad = append(bad, fmt.Sprintf("%s: %d wallet legs, %d orders, stored answer %d", o, legs, orders, code))
		}
	}
	rep.check(fmt.Sprintf("no refused API mutation left an effect (%d refused)", n), len(bad) == 0, strings.Join(first(bad, 10), "; "))
	return nil
}

// checkEvents: every provider event and probe event some delivery got a
// 2xx for is claimed on the final primary.
func (r *Run) checkEvents(ctx context.Context, rep *Report, fr *FailoverReport) error {
	var ids []string
	r.fo.history.mu.Lock()
	for id, acked := range r.fo.history.hooks {
		if acked {
			ids = append(ids, id)
		}
	}
	r.fo.history.mu.Unlock()
	fr.HooksAcked = len(ids)
	probes := r.fo.probe.ackedEvents()
	fr.ProbesAcked = len(probes)
	ids = append(ids, probes...)
	n, err := r.count(ctx, `SELECT count(*) FROM webhook_events WHERE event_id = ANY($1)`, ids)
	if err != nil {
		return err
	}
	rep.check(fmt.Sprintf("every acknowledged delivery is claimed on the final primary (%d provider events, %d probe writes)",
		fr.HooksAcked, fr.ProbesAcked), n == len(ids) && fr.ProbesAcked > 0, fmt.Sprintf("%d of %d claimed", n, len(ids)))
	return nil
}

// checkValue: each player's wallets hold what the model says they
// acquired: Mana + Sparks - debt (at one Spark per Mana, the chaos
// processes' setting, a conversion moves no value) equals the Mana of
// their fulfilled orders, less what their refunds and disputes claw back,
// less their funding debits.
func (r *Run) checkValue(ctx context.Context, rep *Report, _ *FailoverReport) error {
	want := map[int64]int64{}
	r.model.with(func() {
		for _, om := range r.model.orders {
			if om.paid && om.correct {
				want[om.playerID] += om.mana - om.wantClawback()
			}
		}
	})
	var bad []string
	for id := range r.model.players {
		var got int64
		err := r.pool.QueryRow(ctx, `SELECT
			coalesce((SELECT sum(balance) FROM wallets WHERE player_id = $1), 0)
			- coalesce((SELECT outstanding FROM debts WHERE player_id = $1), 0)
			- coalesce((SELECT sum(amount) FROM wallet_transactions WHERE player_id = $1 AND kind = 'funding'), 0)`, id).Scan(&got)
		if err != nil {
			return err
		}
		if got != want[id] {
			bad = append(bad, fmt.Sprintf("player %d: holds %d, the model says %d", id, got, want[id]))
		}
	}
	rep.check("balances equal the model's (each player's Mana + Sparks - debt + funding = minted - clawed back)",
		len(bad) == 0, strings.Join(first(bad, 10), "; "))
	return nil
}

// checkFaults: every fault ran and writes came back after it; the cancel
// fault cancelled commits and billing refused them; the formation is
// whole again.
func (r *Run) checkFaults(ctx context.Context, rep *Report, fr *FailoverReport) error {
	failovers, cancelled := 0, 0
	var bad []string
	for _, f := range fr.Faults {
		if strings.Contains(f.Name, "FAILED") {
			bad = append(bad, f.Name)
		}
		if f.OldPrimary != f.NewPrimary && f.NewPrimary != "" {
			failovers++
		}
		cancelled += f.Cancelled
	}
	rep.check(fmt.Sprintf("every fault was followed by acknowledged writes (%d faults, %d failovers)", len(fr.Faults), failovers),
		len(bad) == 0 && failovers > 0, strings.Join(bad, "; "))
	rep.check(fmt.Sprintf("cancelled synchronous waits were refused, not acknowledged (%d cancelled, %d commits refused)", cancelled, fr.NotDurable),
		cancelled > 0 && fr.NotDurable > 0, "")
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	err := r.fo.f.WaitHealthy(wctx)
	rep.check("the formation is whole: one primary, every lost node back as its standby", err == nil, fmt.Sprint(err))
	return nil
}

func (r *Run) count(ctx context.Context, sql string, args ...any) (int, error) {
	var n int
	err := r.pool.QueryRow(ctx, sql, args...).Scan(&n)
	return n, err
}

func truncate(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "…"
	}
	return string(b)
}

// printFailover writes the failover section of the report.
func (fr *FailoverReport) print(w io.Writer) {
	row := func(k string, v any) { fmt.Fprintf(w, "  %-44s %v\n", k, v) }
	row("operations ok / fail / resolved from unknown", fmt.Sprintf("%d / %d / %d", fr.OK, fr.Failed, fr.Resolved))
	row("provider events / probe writes acknowledged", fmt.Sprintf("%d / %d", fr.HooksAcked, fr.ProbesAcked))
	row("commits refused as not durable", fr.NotDurable)
	row("diverged nodes rewound by the formation", fmt.Sprintf("%d %v", len(fr.Rewound), fr.Rewound))
	for _, f := range fr.Faults {
		fmt.Fprintf(w, "  fault: %s (%s -> %s): promoted after %v, writes back after %v, %d answered 503, rejoined in %v",
			f.Name, f.OldPrimary, f.NewPrimary, f.Promoted.Round(100*time.Millisecond),
			f.WritesBack.Round(100*time.Millisecond), f.Answered503, f.Rejoined.Round(100*time.Millisecond))
		if f.Cancelled > 0 {
			fmt.Fprintf(w, ", %d waits cancelled", f.Cancelled)
		}
		fmt.Fprintln(w)
	}
}
