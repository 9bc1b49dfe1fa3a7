package timeline_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/ops/timeline"
	"github.com/fibe-dev/billing/internal/platform/dbtx"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
	"github.com/fibe-dev/billing/wallet"
)

// recorder is a dbtx.DB that keeps every statement run through it, with
// the arguments of its first runs.
type recorder struct {
	dbtx.DB
	mu    sync.Mutex
	stmts map[string][][]any // SQL -> the arguments of its first maxRuns runs
	order []string
}

// maxRuns is how many runs of one statement are explained.
const maxRuns = 6

func (r *recorder) keep(sql string, args []any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.stmts[sql]; !ok {
		r.order = append(r.order, sql)
	}
	if len(r.stmts[sql]) < maxRuns {
		r.stmts[sql] = append(r.stmts[sql], args)
	}
}

func (r *recorder) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	r.keep(sql, args)
	return r.DB.Exec(ctx, sql, args...)
}

func (r *recorder) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	r.keep(sql, args)
	return r.DB.Query(ctx, sql, args...)
}

func (r *recorder) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	r.keep(sql, args)
	return r.DB.QueryRow(ctx, sql, args...)
}

// Every statement a timeline, a search and the operator's lists run is
// an index lookup: its plan, generic (as a long-lived connection's cached
// statement may run it) and custom (for its arguments), has no sequential
// scan even where the planner would rather take one, because these tables
// are small here and large in production. A statement that no index can
// serve fails here at any size.
func TestEveryStatementUsesAnIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, "")
	seedHistories(t, e)
	bulk(t, e, 10_000)
	rec := &recorder{DB: e.pool, stmts: map[string][][]any{}}
	for _, o := range e.orders(t) {
		_, err := timeline.Order(ctx, rec, registry, o)
		require.NoError(t, err)
	}
	for _, id := range []string{"pi_order_1", "cs_test_order_1", "charge:ch_order_2", "ch_order_2", "evt_refund", "pi_unknown",
		"evt_pay_1", "re_none"} {
		_, err := timeline.Payment(ctx, rec, registry, "stripe", id)
		if err != nil {
			require.ErrorIs(t, err, timeline.ErrNotFound, id)
		}
	}
	for _, since := range []time.Time{{}, time.Now().Add(-time.Hour)} {
		_, err := timeline.Player(ctx, rec, registry, e.player, since)
		require.NoError(t, err)
	}
	_, err := timeline.Unapplied(ctx, rec, 100)
	require.NoError(t, err)
	_, err = timeline.OpenDebts(ctx, rec, 100)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(rec.order), 15, "the statements recorded")

	conn, err := e.pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	for i, sql := range rec.order {
		for run, args := range rec.stmts[sql] {
			for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
				requireIndexed(t, conn, fmt.Sprintf("tlplan%d_%d", i, run), mode, sql, args)
			}
		}
	}
}

// requireIndexed fails unless sql, run with args under plan_cache_mode
// mode, reads only through indexes that fit it.
func requireIndexed(t *testing.T, conn *pgxpool.Conn, name, mode, sql string, args []any) {
	t.Helper()
	plan := explain(t, conn, name, mode, sql, args)
	p := readPlan(plan)
	require.Empty(t, p.seq, "%s plan scans %v sequentially:\n%s\n%s", mode, p.seq, sql, plan)
	require.NotZero(t, p.indexed, "%s plan uses no index:\n%s\n%s", mode, sql, plan)
	require.LessOrEqual(t, p.read, float64(maxRead), "%s plan reads %.0f rows (an index that does not fit the lookup):\n%s\n%s",
		mode, p.read, sql, plan)
}

// explain prepares sql on conn, runs it with args under plan_cache_mode
// mode and returns its plan with what each node read (EXPLAIN ANALYZE:
// every statement of a timeline only reads).
func explain(t *testing.T, conn *pgxpool.Conn, name, mode, sql string, args []any) string {
	t.Helper()
	ctx := context.Background()
	desc, err := conn.Conn().Prepare(ctx, name, sql)
	require.NoError(t, err, sql)
	defer func() { _ = conn.Conn().Deallocate(ctx, name) }()
	lits := make([]string, len(args))
	for i, a := range args {
		text, err := conn.Conn().TypeMap().Encode(desc.ParamOIDs[i], pgx.TextFormatCode, a, nil)
		require.NoError(t, err)
		lits[i] = "NULL"
		if text != nil {
			lits[i] = "'" + strings.ReplaceAll(string(text), "'", "''") + "'"
		}
	}
	_, err = conn.Exec(ctx, "SET plan_cache_mode = "+mode)
	require.NoError(t, err)
	call := "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE " + name
	if len(lits) > 0 {
		call += "(" + strings.Join(lits, ", ") + ")"
	}
	var plan string
	require.NoError(t, conn.QueryRow(ctx, call).Scan(&plan), sql)
	return plan
}

// maxRead is how many rows a statement's plan may read from its tables:
// a lookup whose index fits reads about what it returns (this test's
// histories are a few dozen rows), while one that walks a broad index
// (every job of a kind, every transaction after an id) reads the bulk
// rows, whether a filter or a join then throws them away.
const maxRead = 200

// plan is what readPlan finds in an EXPLAIN (ANALYZE, FORMAT JSON).
type plan struct {
	seq     []string // relations read by a sequential scan
	indexed int      // index scans
	read    float64  // rows the scans read, filtered out ones included
}

// scanNodes read table rows; a Bitmap Index Scan's are its heap scan's.
var scanNodes = map[string]bool{"Seq Scan": true, "Index Scan": true, "Index Only Scan": true, "Bitmap Heap Scan": true}

func readPlan(text string) plan {
	var root []struct{ Plan map[string]any }
	if err := json.Unmarshal([]byte(text), &root); err != nil {
		return plan{seq: []string{"unreadable plan: " + err.Error()}}
	}
	var p plan
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		switch n["Node Type"] {
		case "Seq Scan":
			p.seq = append(p.seq, fmt.Sprint(n["Relation Name"]))
		case "Index Scan", "Index Only Scan", "Bitmap Index Scan":
			p.indexed++
		}
		if scanNodes[fmt.Sprint(n["Node Type"])] {
			loops, _ := n["Actual Loops"].(float64)
			for _, k := range []string{"Actual Rows", "Rows Removed by Filter", "Rows Removed by Index Recheck"} {
				v, _ := n[k].(float64)
				p.read += v * loops
			}
		}
		children, _ := n["Plans"].([]any)
		for _, c := range children {
			if m, ok := c.(map[string]any); ok {
				walk(m)
			}
		}
	}
	for _, r := range root {
		walk(r.Plan)
	}
	return p
}

// seedHistories gives one player every kind of line: a double charge, a
// partial refund, a refused refund, a dispute, a debt forgiven, an event
// waiting for its payment.
func seedHistories(t *testing.T, e *env) {
	t.Helper()
	ctx := context.Background()
	twice := e.open(provider.Stripe, "k1")
	require.Equal(t, "completed", e.pay(twice, "evt_pay_1"))
	require.Equal(t, "cancelled", e.deliverAndWait("stripe", "evt_second",
		providerevents.PaymentEvent("stripe", "evt_second", "pi_second", twice.ID, 999, "usd")))
	refunded := e.open(provider.Stripe, "k2")
	require.Equal(t, "completed", e.pay(refunded, "evt_pay_2"))
	charge := fmt.Sprintf("ch_order_%d", refunded.ID)
	require.Equal(t, "cancelled", e.reverse(refunded, "evt_eur", charge, fulfillment.ReversalRefund, fulfillment.StateSucceeded, 100, "eur"))
	require.Equal(t, "completed", e.reverse(refunded, "evt_refund", charge, fulfillment.ReversalRefund, fulfillment.StateSucceeded, 999, "usd"))
	ws := wallet.New(e.pool, wallet.Options{SparksPerMana: 100})
	_, err := ws.Adjust(ctx, wallet.AdjustParams{PlayerID: e.player, Currency: wallet.Mana, Amount: -800, Reason: "spent", Key: "spend"})
	require.NoError(t, err)
	require.Equal(t, "completed", e.reverse(twice, "evt_dispute", "dp_1", fulfillment.ReversalDispute, fulfillment.StateOpen, 999, "usd"))
	_, err = fulfillment.ForgiveDebt(ctx, e.pool, ws, e.player, "ticket-1", "goodwill")
	require.NoError(t, err)
	require.Equal(t, "completed", e.pay(e.open(provider.Creem, "k3"), "evt_pay_3"), "a later purchase")
	require.Equal(t, "completed", e.deliverAndWait("stripe", "evt_early", providerevents.ReversalEvent("stripe", "evt_early", "pi_unknown",
		"ch_unknown", fulfillment.ReversalRefund, fulfillment.StateSucceeded, 100, "usd")))
}

func (e *env) orders(t *testing.T) []int64 {
	t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT id FROM orders WHERE player_id = $1 ORDER BY id`, e.player)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return ids
}
