package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/events"
	"github.com/fibe-dev/billing/internal/kit/testdb"
	"github.com/fibe-dev/billing/internal/ops/audit"
	"github.com/fibe-dev/billing/internal/ops/audit/audittest"
	"github.com/fibe-dev/billing/wallet"
)

// balanceEvent is one wallet.low_balance or wallet.balance_recovered as
// stored.
type balanceEvent struct {
	ID   string
	Type string
	Data events.BalanceData
}

// lowEnv is a database, a player and a wallet store telling
// events.LowBalance (3 days) of every Sparks movement.
type lowEnv struct {
	t      *testing.T
	ctx    context.Context
	pool   *pgxpool.Pool
	wallet *wallet.Store
	keys   int
}

func newLowEnv(t *testing.T) *lowEnv {
	pool := testdb.New(t)
	e := &lowEnv{t: t, ctx: context.Background(), pool: pool,
		wallet: wallet.New(pool, wallet.Options{SparksPerMana: 10, Observer: events.LowBalance{Days: 3}})}
	t.Cleanup(func() {
		if !t.Failed() {
			audittest.RequireClean(t, pool, audit.Options{})
		}
	})
	return e
}

func (e *lowEnv) player() int64 {
	var id int64
	require.NoError(e.t, e.pool.QueryRow(e.ctx, `INSERT INTO players (name) VALUES ('p') RETURNING id`).Scan(&id))
	return id
}

// marquee starts a running Marquee of player costing perDay Sparks a day.
func (e *lowEnv) marquee(player, perDay int64) int64 {
	var id int64
	require.NoError(e.t, e.pool.QueryRow(e.ctx, `INSERT INTO marquees (player_id, name, plan, daily_price)
		VALUES ($1, 'm', 'standard', $2) RETURNING id`, player, perDay).Scan(&id))
	return id
}

// post moves amount (signed) of currency c through Adjust, under a new
// key, and returns the key.
func (e *lowEnv) post(player int64, c wallet.Currency, amount int64) string {
	e.keys++
	key := fmt.Sprintf("lb-%d", e.keys)
	e.postKey(player, c, amount, key)
	return key
}

func (e *lowEnv) postKey(player int64, c wallet.Currency, amount int64, key string) *wallet.Transaction {
	t, err := e.wallet.Adjust(e.ctx, wallet.AdjustParams{PlayerID: player, Currency: c, Amount: amount, Reason: "test", Key: key})
	require.NoError(e.t, err)
	return t
}

// events returns the player's balance events in sequence order.
func (e *lowEnv) events(player int64) []balanceEvent {
	rows, err := e.pool.Query(e.ctx, `SELECT id, type, payload->'data' FROM events
		WHERE player_id = $1 AND type IN ($2, $3) ORDER BY sequence`, player, events.WalletLowBalance, events.WalletBalanceRecovered)
	require.NoError(e.t, err)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (balanceEvent, error) {
		var ev balanceEvent
		var data []byte
		if err := r.Scan(&ev.ID, &ev.Type, &data); err != nil {
			return ev, err
		}
		return ev, json.Unmarshal(data, &ev.Data)
	})
	require.NoError(e.t, err)
	return out
}

func low(player, crossing int64, d events.BalanceData) balanceEvent {
	return balanceEvent{ID: events.ID(events.WalletLowBalance, events.LowBalanceKey(player, crossing)),
		Type: events.WalletLowBalance, Data: d}
}

func recovered(player, crossing int64, d events.BalanceData) balanceEvent {
	return balanceEvent{ID: events.ID(events.WalletBalanceRecovered, events.BalanceRecoveredKey(player, crossing)),
		Type: events.WalletBalanceRecovered, Data: d}
}

func data(balance, perDay, days int64) events.BalanceData {
	return events.BalanceData{SparksBalance: balance, SparksPerDay: perDay, DaysCovered: days, ThresholdDays: 3}
}

// TestLowBalanceTransitions walks one player across the threshold (3 days
// of one Marquee at 100 Sparks) by every kind of Sparks movement: each
// crossing makes one event, under a new id; movements on the same side,
// replays and Mana movements make none.
func TestLowBalanceTransitions(t *testing.T) {
	t.Parallel()
	e := newLowEnv(t)
	p := e.player()
	e.post(p, wallet.Sparks, 1000) // no Marquee: never low, first state not low
	e.marquee(p, 100)
	want := []balanceEvent{}
	steps := []struct {
		name  string
		move  func()
		event *balanceEvent
	}{
		{"a debit on the same side", func() { e.post(p, wallet.Sparks, -650) }, nil}, // 350: 3 days
		{"a debit across", func() { e.post(p, wallet.Sparks, -100) }, ptr(low(p, 1, data(250, 100, 2)))},
		{"more debits below", func() { e.post(p, wallet.Sparks, -10); e.post(p, wallet.Sparks, -40) }, nil}, // 200
		{"a Mana movement", func() { e.post(p, wallet.Mana, 50) }, nil},
		{"a credit still below", func() { e.post(p, wallet.Sparks, 50) }, nil}, // 250
		{"a conversion across", func() {
			_, err := e.wallet.Convert(e.ctx, wallet.ConvertParams{PlayerID: p, Mana: 5, IdempotencyKey: wallet.CallerKey("conv-1")})
			require.NoError(t, err)
		}, ptr(recovered(p, 2, data(300, 100, 3)))},
		{"a replayed conversion", func() {
			c, err := e.wallet.Convert(e.ctx, wallet.ConvertParams{PlayerID: p, Mana: 5, IdempotencyKey: wallet.CallerKey("conv-1")})
			require.NoError(t, err)
			require.True(t, c.Replayed)
		}, nil},
		{"a clawback across", func() { e.clawback(p) }, ptr(low(p, 3, data(250, 100, 2)))}, // 45 Mana, then 50 Sparks
		{"a credit across", func() { e.postKey(p, wallet.Sparks, 50, "again") }, ptr(recovered(p, 4, data(300, 100, 3)))},
		{"a replayed credit", func() { require.True(t, e.postKey(p, wallet.Sparks, 50, "again").Replayed) }, nil},
		{"below again", func() { e.post(p, wallet.Sparks, -1) }, ptr(low(p, 5, data(299, 100, 2)))},
		{"every Marquee stopped: nothing runs, never low", func() {
			_, err := e.pool.Exec(e.ctx, `UPDATE marquees SET desired_state = 'stopped' WHERE player_id = $1`, p)
			require.NoError(t, err)
			e.post(p, wallet.Sparks, -9)
		}, ptr(recovered(p, 6, data(290, 0, 0)))},
	}
	for _, s := range steps {
		s.move()
		if s.event != nil {
			want = append(want, *s.event)
		}
		require.Equal(t, want, e.events(p), "after %s", s.name)
	}
	var lowNow bool
	var crossings int64
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT low, crossings FROM low_balance_state WHERE player_id = $1`, p).
		Scan(&lowNow, &crossings))
	require.False(t, lowNow)
	require.EqualValues(t, 6, crossings)
}

// clawback takes 50 Mana back from p, more than its Mana wallet holds, so
// the rest comes out of its Sparks.
func (e *lowEnv) clawback(p int64) {
	tx, err := e.pool.Begin(e.ctx)
	require.NoError(e.t, err)
	defer func() { _ = tx.Rollback(e.ctx) }()
	c, err := e.wallet.ClawbackTx(e.ctx, tx, wallet.ClawbackParams{PlayerID: p, Mana: 50, Key: wallet.CallerKey("claw-1"), Reference: "test"})
	require.NoError(e.t, err)
	require.Positive(e.t, c.Sparks)
	require.NoError(e.t, tx.Commit(e.ctx))
}

func ptr[T any](v T) *T { return &v }

// TestLowBalanceFirstState: a player whose first judged movement leaves
// them low gets a wallet.low_balance (a crossing from "not low"); a player
// with no running Marquee never does, however low.
func TestLowBalanceFirstState(t *testing.T) {
	t.Parallel()
	e := newLowEnv(t)
	p := e.player()
	e.marquee(p, 100)
	e.post(p, wallet.Sparks, 120)
	require.Equal(t, []balanceEvent{low(p, 1, data(120, 100, 1))}, e.events(p))

	idle := e.player()
	e.post(idle, wallet.Sparks, 10)
	e.post(idle, wallet.Sparks, -10)
	require.Empty(t, e.events(idle))
}

// TestLowBalanceAuditFindsAMissingEvent: the events audit flags a counted
// crossing without its event, a state that disagrees with its count, and
// an event beyond the crossings counted.
func TestLowBalanceAuditFindsAMissingEvent(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ctx := context.Background()
	s := wallet.New(pool, wallet.Options{Observer: events.LowBalance{Days: 3}})
	e := &lowEnv{t: t, ctx: ctx, pool: pool, wallet: s}
	p := e.player()
	e.marquee(p, 100)
	e.post(p, wallet.Sparks, 100)
	e.post(p, wallet.Sparks, 300) // low (1), then recovered (2)
	audit := func() []string {
		vs, err := events.Audit(ctx, pool)
		require.NoError(t, err)
		var checks []string
		for _, v := range vs {
			checks = append(checks, v.Check)
		}
		return checks
	}
	require.Empty(t, audit())

	_, err := pool.Exec(ctx, `UPDATE low_balance_state SET crossings = 3 WHERE player_id = $1`, p)
	require.NoError(t, err)
	require.Equal(t, []string{"crossing_without_event", "crossing_without_event"}, audit(),
		"crossing 3 has no event, and low=false after 3 crossings")

	_, err = pool.Exec(ctx, `UPDATE low_balance_state SET crossings = 0 WHERE player_id = $1`, p)
	require.NoError(t, err)
	require.Equal(t, []string{"balance_event_without_crossing", "balance_event_without_crossing"}, audit())
}

// TestLowBalanceGuardJudgesAsTheObserver: two players make the same
// seeded walk of Sparks credits, debits, conversions, replays and Marquee
// starts and stops, one through the autocommit forms (Post, Convert: the
// guard's one-statement path, and the observer only when the guard fails)
// and one through PostTx and ConvertTx in a transaction of the test's
// (the observer every time). Both end with the same crossings and events,
// step by step.
func TestLowBalanceGuardJudgesAsTheObserver(t *testing.T) {
	t.Parallel()
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			e := newLowEnv(t)
			guarded, told := e.player(), e.player()
			rng := rand.New(rand.NewPCG(seed, 7))
			e.post(guarded, wallet.Mana, 1000)
			e.post(told, wallet.Mana, 1000)
			type move func(p int64, key string, inTx bool)
			sparks := func(amount int64) move {
				return func(p int64, key string, inTx bool) {
					dir := wallet.Credit
					if amount < 0 {
						dir = wallet.Debit
					}
					pp := wallet.PostParams{PlayerID: p, Currency: wallet.Sparks, Direction: dir, Amount: max(amount, -amount),
						Kind: wallet.KindAdjustment, IdempotencyKey: wallet.CallerKey(key)}
					e.inTx(inTx, func(tx pgx.Tx) error {
						var err error
						if tx == nil {
							_, err = e.wallet.Post(e.ctx, pp)
						} else {
							_, err = e.wallet.PostTx(e.ctx, tx, pp)
						}
						if errors.Is(err, wallet.ErrInsufficientBalance) {
							return nil
						}
						return err
					})
				}
			}
			convert := func(p int64, key string, inTx bool) {
				cp := wallet.ConvertParams{PlayerID: p, Mana: 3, IdempotencyKey: wallet.CallerKey(key)}
				e.inTx(inTx, func(tx pgx.Tx) error {
					var err error
					if tx == nil {
						_, err = e.wallet.Convert(e.ctx, cp)
					} else {
						_, err = e.wallet.ConvertTx(e.ctx, tx, cp)
					}
					return err
				})
			}
			state := func(desired string) move {
				return func(p int64, _ string, _ bool) {
					_, err := e.pool.Exec(e.ctx, `WITH one AS (SELECT id FROM marquees WHERE player_id = $1 ORDER BY id LIMIT 1)
						UPDATE marquees SET desired_state = $2 WHERE id IN (SELECT id FROM one)`, p, desired)
					require.NoError(t, err)
				}
			}
			start := func(p int64, _ string, _ bool) { e.marquee(p, 40) }
			moves := []move{sparks(30), sparks(-30), sparks(90), sparks(-70), convert, start, state("stopped"), state("running")}
			var keys []string
			for step := range 120 {
				key := fmt.Sprintf("walk-%d", step)
				if len(keys) > 0 && rng.IntN(6) == 0 {
					key = keys[rng.IntN(len(keys))] // a replay (or a key reused with other terms: refused alike)
				}
				keys = append(keys, key)
				m := moves[rng.IntN(len(moves))]
				m(guarded, "g-"+key, false)
				m(told, "t-"+key, true)
				require.Equal(t, e.crossings(told), e.crossings(guarded), "step %d", step)
				require.Equal(t, len(e.events(told)), len(e.events(guarded)), "step %d", step)
			}
			g, o := e.events(guarded), e.events(told)
			for i := range o {
				require.Equal(t, o[i].Type, g[i].Type)
				require.Equal(t, o[i].Data, g[i].Data)
			}
			require.NotEmpty(t, o, "the walk crossed the threshold")
		})
	}
}

// inTx runs f in a transaction of the test's when inTx, else with a nil
// tx (f uses the autocommit forms). A refused key (reused with other
// terms) is not an error of the walk's.
func (e *lowEnv) inTx(inTx bool, f func(tx pgx.Tx) error) {
	ok := func(err error) bool {
		return err == nil || errors.Is(err, wallet.ErrIdempotencyKeyReused) || errors.Is(err, wallet.ErrInsufficientBalance)
	}
	if !inTx {
		require.True(e.t, ok(f(nil)))
		return
	}
	tx, err := e.pool.Begin(e.ctx)
	require.NoError(e.t, err)
	defer func() { _ = tx.Rollback(e.ctx) }()
	err = f(tx)
	require.True(e.t, ok(err), "%v", err)
	require.NoError(e.t, tx.Commit(e.ctx))
}

// crossings is the player's low-balance state: low, and crossings so far
// (no row: not low, none).
func (e *lowEnv) crossings(p int64) [2]int64 {
	var lowNow bool
	var n int64
	err := e.pool.QueryRow(e.ctx, `SELECT low, crossings FROM low_balance_state WHERE player_id = $1`, p).Scan(&lowNow, &n)
	if errors.Is(err, pgx.ErrNoRows) {
		return [2]int64{0, 0}
	}
	require.NoError(e.t, err)
	l := int64(0)
	if lowNow {
		l = 1
	}
	return [2]int64{l, n}
}
