package events

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/fibe-dev/billing/wallet"
)

// DefaultLowBalanceDays is the low-balance threshold when none is set.
const DefaultLowBalanceDays = 3

// LowBalance is the wallet's SparksObserver that sends wallet.low_balance
// and wallet.balance_recovered: once per crossing of the threshold, in the
// transaction that moved the Sparks across it.
//
// A player is low when their running Marquees (desired state running)
// cost something per service day (the sum of their daily prices, what the
// enforcer debits) and their Sparks pay for fewer than Days whole days of
// it. A player with no running Marquee is never low. The state is judged
// only where Sparks move: starting or stopping a Marquee is seen at the
// player's next Sparks movement.
//
// Each player's last state is a low_balance_state row: low, and the
// number of crossings so far (odd exactly while low); no row means not
// low, no crossing. The row is upserted after the post, while the post's
// transaction holds the player's Sparks wallet row, so movements of one
// player are judged one at a time in commit order: concurrent posts, a
// retried job, overlapping sweeps or a replay (which moves nothing and is
// never observed) cannot make a second event for one crossing.
//
// LowBalance is also the wallet's SparksGuard: an autocommit post runs the
// same judgement as a guard beside its statement, and is made again with
// the observer only when the verdict differs from the recorded state, so
// a movement that crosses nothing costs no transaction of its own. The event's key is the crossing,
// event:low_balance/<player>/<n> or event:balance_recovered/<player>/<n>,
// so even a second run of the same crossing would find its event.
//
// The first judgement of a player has nothing before it: it counts as a
// crossing from "not low", so a player whose first Sparks movement (or the
// first after their first Marquee started) leaves them low gets a
// wallet.low_balance.
type LowBalance struct {
	// Days is the threshold in service days; 0 means DefaultLowBalanceDays.
	Days int64
}

var (
	_ wallet.SparksObserver = LowBalance{}
	_ wallet.SparksGuard    = LowBalance{}
	_ wallet.SparksQueuer   = LowBalance{}
)

// The players a statement judges: $1 as one bigint, or as an array. A
// post's statement judges one player, and with a scalar PostgreSQL keeps
// one generic plan for the prepared statement; over an array (whose
// length a generic plan cannot know) it plans every execution anew, which
// costs more than running it. A batch pays that once for all its players.
const (
	onePlayer   = `(SELECT $1::bigint) AS i(player_id)`
	manyPlayers = `unnest($1::bigint[]) AS i(player_id)`
)

// verdictSQL judges each player of players against $2 days: their Sparks
// balance, what their running Marquees cost per day, and whether that
// leaves them low. The observer's statement and the guard share it, so
// the guard judges exactly as the observer does.
func verdictSQL(players string) string {
	return `WITH judged AS (
	SELECT i.player_id,
		coalesce((SELECT w.balance FROM wallets w WHERE w.player_id = i.player_id AND w.currency = 'sparks'), 0) AS balance,
		coalesce((SELECT sum(m.daily_price)::bigint FROM marquees m
			WHERE m.player_id = i.player_id AND m.desired_state = 'running'), 0) AS per_day
	FROM ` + players + `
), verdict AS (
	SELECT *, coalesce(balance / nullif(per_day, 0) < $2::bigint, false) AS low FROM judged
)`
}

// observerSQL records a change in low_balance_state (a row lock whether
// it changed or not, in player order) and answers the players that
// crossed. A player's first row is a crossing only when it is low.
func observerSQL(players string) string {
	return verdictSQL(players) + `, state AS (
	INSERT INTO low_balance_state AS s (player_id, low, crossings)
	SELECT player_id, low, low::int FROM verdict ORDER BY player_id
	ON CONFLICT (player_id) DO UPDATE SET low = excluded.low, crossings = s.crossings + 1
	WHERE s.low <> excluded.low
	RETURNING player_id, low, crossings
)
SELECT s.player_id, s.low, s.crossings, v.balance, v.per_day FROM state s JOIN verdict v USING (player_id)
WHERE s.crossings > 0 ORDER BY s.player_id`
}

// guardSQL fails (wallet.GuardSQLState) for a player whose verdict differs
// from their recorded state (no row: not low), the only case in which the
// observer's statement sends an event, and writes nothing. A player
// without a row who is not low gets no row from the guard's path; that
// row would say "not low, no crossing", which is what no row means.
func guardSQL(players string) string {
	return verdictSQL(players) + `
SELECT ` + wallet.SQLGuardFailed(`'low-balance crossing of player ' || v.player_id`) + `
FROM verdict v LEFT JOIN low_balance_state s USING (player_id)
WHERE v.low <> coalesce(s.low, false)`
}

var (
	observerOne, observerMany = observerSQL(onePlayer), observerSQL(manyPlayers)
	guardOne, guardMany       = guardSQL(onePlayer), guardSQL(manyPlayers)
)

// forPlayers picks the one-player or the array form of a statement and
// its first argument.
func forPlayers(players []int64, one, many string) (string, any) {
	if len(players) == 1 {
		return one, players[0]
	}
	return many, players
}

// SparksGuardSQL is the guard an autocommit post runs with its statement
// (wallet.SparksGuard): it passes when SparksMovedTx would send nothing.
func (l LowBalance) SparksGuardSQL(players []int64) (string, []any) {
	sql, arg := forPlayers(players, guardOne, guardMany)
	return sql, []any{arg, l.days()}
}

func (l LowBalance) days() int64 {
	if l.Days <= 0 {
		return DefaultLowBalanceDays
	}
	return l.Days
}

// SparksMovedTx judges players in tx after their Sparks moved and emits
// an event for each one that crossed the threshold.
func (l LowBalance) SparksMovedTx(ctx context.Context, tx pgx.Tx, players []int64) error {
	b := &pgx.Batch{}
	finish := l.QueueSparksMoved(b, players)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("events: low balance: %w", err)
	}
	return finish(ctx, tx)
}

// QueueSparksMoved is SparksMovedTx's judgement queued on b
// (wallet.SparksQueuer); finish emits the crossings' events.
func (l LowBalance) QueueSparksMoved(b *pgx.Batch, players []int64) func(context.Context, pgx.Tx) error {
	days := l.days()
	sql, arg := forPlayers(players, observerOne, observerMany)
	var evs []Event
	read := false
	b.Queue(sql, arg, days).Query(func(rows pgx.Rows) error {
		var player, crossing, balance, perDay int64
		var low bool
		_, err := pgx.ForEachRow(rows, []any{&player, &low, &crossing, &balance, &perDay}, func() error {
			evs = append(evs, balanceEvent(player, low, crossing, BalanceData{SparksBalance: balance,
				SparksPerDay: perDay, DaysCovered: daysCovered(balance, perDay), ThresholdDays: days}))
			return nil
		})
		read = err == nil
		return err
	})
	return func(ctx context.Context, tx pgx.Tx) error {
		if !read {
			return fmt.Errorf("events: the low-balance judgement of %d players was queued but not sent", len(players))
		}
		_, err := EmitManyTx(ctx, tx, evs)
		return err
	}
}

// daysCovered is the whole service days balance pays for; 0 when nothing
// runs (there is nothing to cover, and the player is not low).
func daysCovered(balance, perDay int64) int64 {
	if perDay <= 0 {
		return 0
	}
	return balance / perDay
}

func balanceEvent(player int64, low bool, crossing int64, d BalanceData) Event {
	if low {
		return Event{Type: WalletLowBalance, Key: LowBalanceKey(player, crossing), PlayerID: player, Data: d}
	}
	return Event{Type: WalletBalanceRecovered, Key: BalanceRecoveredKey(player, crossing), PlayerID: player, Data: d}
}

// LowBalanceKey is the key of wallet.low_balance: the player's crossing
// (odd: crossings alternate, the first one into low).
func LowBalanceKey(playerID, crossing int64) string {
	return lowBalancePrefix + strconv.FormatInt(playerID, 10) + "/" + strconv.FormatInt(crossing, 10)
}

// BalanceRecoveredKey is the key of wallet.balance_recovered: the player's
// crossing (even).
func BalanceRecoveredKey(playerID, crossing int64) string {
	return balanceRecoveredPrefix + strconv.FormatInt(playerID, 10) + "/" + strconv.FormatInt(crossing, 10)
}

const (
	lowBalancePrefix       = "event:low_balance/"
	balanceRecoveredPrefix = "event:balance_recovered/"
)

// sqlCrossingID is the id of the event of crossing k of player (bigint
// SQL expressions): wallet.low_balance when k is odd, else
// wallet.balance_recovered.
func sqlCrossingID(player, k string) string {
	suffix := ` || ` + player + ` || '/' || ` + k
	return `CASE WHEN ` + k + ` % 2 = 1 THEN ` + idSQL(WalletLowBalance, `'`+lowBalancePrefix+`'`+suffix) +
		` ELSE ` + idSQL(WalletBalanceRecovered, `'`+balanceRecoveredPrefix+`'`+suffix) + ` END`
}
