package wallet

// Money that goes back. A clawback takes Mana first, then Sparks at the
// conversion rate, and records the rest as the player's debt; the wallet
// never goes negative. A debt is an asset of ours on the ledger's
// receivable account: opening it is a Mana credit from receivable
// immediately taken back by the clawback's Mana debit (so the wallet nets
// to what it held and the player's receivable entries sum to minus the
// debt); a later Mana credit settles it with a debit to receivable; a
// forgiven debt is written off against bad_debt the same way, and that
// write-off is recovered first when the money behind the debt comes back
// (GiveBackTx). Every transaction keeps its two entries summing to zero.
//
// The debts row of a player is the lock that orders these posts: debts
// row, then the Mana wallet, then the Sparks wallet. Conversions lock Mana
// then Sparks and funding only Sparks, so no cycle can form.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/fibe-dev/billing/internal/platform/dbtx"
	"github.com/fibe-dev/billing/internal/platform/durable"
	"github.com/fibe-dev/billing/internal/platform/errcode"
)

var debtsOpened = promauto.NewCounter(prometheus.CounterOpts{
	Name: "billing_debts_opened_total",
	Help: "Clawbacks that left part of their Mana as the player's debt.",
})

// Kinds and accounts of the reverse path.
const (
	KindClawback         Kind = "clawback"          // Mana or Sparks taken back for a refund or dispute
	KindClawbackReversal Kind = "clawback_reversal" // Mana given back when a dispute is won
	KindDebt             Kind = "debt"              // Mana lent from receivable so a clawback can take it
	KindDebtSettlement   Kind = "debt_settlement"   // Mana a later credit pays towards the debt
	KindDebtWriteOff     Kind = "debt_write_off"    // the two legs of a forgiven debt

	AccountReceivable = "receivable" // what players owe us, minus: debt = -(sum of entries)
	AccountBadDebt    = "bad_debt"   // forgiven debts, less what give-backs recovered
	AccountClawbacks  = "clawbacks"  // Sparks taken back (Mana goes back to mana_issued)
)

// ErrOutstandingDebt is returned (as an *OutstandingDebtError) to a player
// who owes Mana and asks for something a debt forbids, such as a conversion.
var ErrOutstandingDebt = errors.New("wallet: outstanding debt")

// OutstandingDebtError carries the debt.
type OutstandingDebtError struct{ Mana int64 }

func (e *OutstandingDebtError) Error() string {
	return fmt.Sprintf("wallet: outstanding debt of %d Mana", e.Mana)
}

// Is makes errors.Is(err, ErrOutstandingDebt) true.
func (e *OutstandingDebtError) Is(target error) bool { return target == ErrOutstandingDebt }

// Answer is 409 outstanding_debt with the debt: buying Mana settles it.
func (e *OutstandingDebtError) Answer() errcode.Answer {
	return errcode.Answer{Status: http.StatusConflict, Code: "outstanding_debt",
		Detail: fmt.Sprintf("the player owes %d Mana after a refund or chargeback; a purchase settles it first", e.Mana)}
}

// ClawbackParams describe Mana to take back from a player.
type ClawbackParams struct {
	PlayerID  int64
	Mana      int64
	Key       Key // each leg's key is derived from it
	Reference string
}

// Clawback is how a clawback was taken.
type Clawback struct {
	Mana   int64 // taken from the Mana wallet
	Sparks int64 // taken from the Sparks wallet (Mana * SparksPerMana)
	Debt   int64 // Mana recorded as debt
}

// OutstandingDebt returns the Mana the player owes (0 when none).
func OutstandingDebt(ctx context.Context, q dbtx.DB, playerID int64) (int64, error) {
	var n int64
	err := q.QueryRow(ctx, `SELECT outstanding FROM debts WHERE player_id = $1`, playerID).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("wallet: read debt: %w", err)
	}
	return n, nil
}

// CheckNoDebt returns an *OutstandingDebtError when the player owes Mana.
func CheckNoDebt(ctx context.Context, q dbtx.DB, playerID int64) error {
	n, err := OutstandingDebt(ctx, q, playerID)
	if err != nil || n == 0 {
		return err
	}
	return &OutstandingDebtError{Mana: n}
}

// LockDebtTx takes the player's debts row lock (creating the row) and
// returns the debt. Every post that may open, settle or forgive debt takes
// it first.
func LockDebtTx(ctx context.Context, tx pgx.Tx, playerID int64) (int64, error) {
	var n int64
	err := tx.QueryRow(ctx, `INSERT INTO debts (player_id) VALUES ($1)
		ON CONFLICT (player_id) DO UPDATE SET player_id = EXCLUDED.player_id
		RETURNING outstanding`, playerID).Scan(&n)
	if err != nil {
		if isForeignKey(err) {
			return 0, fmt.Errorf("%w: player id %d", ErrUnknownPlayer, playerID)
		}
		return 0, fmt.Errorf("wallet: lock debt of player %d: %w", playerID, err)
	}
	return n, nil
}

func addDebt(ctx context.Context, tx pgx.Tx, playerID, delta int64) error {
	_, err := tx.Exec(ctx, `UPDATE debts SET outstanding = outstanding + $2, updated_at = now() WHERE player_id = $1`,
		playerID, delta)
	if err != nil {
		return fmt.Errorf("wallet: update debt of player %d: %w", playerID, err)
	}
	if delta > 0 {
		debtsOpened.Inc()
	}
	return nil
}

// lockBalances locks the player's Mana then Sparks wallets and returns
// their balances (0 for a wallet not created yet).
func lockBalances(ctx context.Context, tx pgx.Tx, playerID int64) (mana, sparks int64, err error) {
	rows, err := tx.Query(ctx, `SELECT currency, balance FROM wallets WHERE player_id = $1
		ORDER BY currency = 'sparks', currency FOR UPDATE`, playerID)
	if err != nil {
		return 0, 0, fmt.Errorf("wallet: lock wallets: %w", err)
	}
	var c Currency
	var b int64
	_, err = pgx.ForEachRow(rows, []any{&c, &b}, func() error {
		if c == Mana {
			mana = b
		} else {
			sparks = b
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("wallet: lock wallets: %w", err)
	}
	return mana, sparks, nil
}

// ClawbackTx takes p.Mana back inside tx: Mana first, then Sparks (whole
// Mana's worth only), the rest as debt. The caller makes the clawback
// happen once (its own row lock and record); the derived keys make a
// replayed step post nothing twice.
func (s *Store) ClawbackTx(ctx context.Context, tx pgx.Tx, p ClawbackParams) (*Clawback, error) {
	if err := p.Key.check(); err != nil {
		return nil, err
	}
	if p.Mana <= 0 {
		return nil, ErrInvalidAmount
	}
	if _, err := LockDebtTx(ctx, tx, p.PlayerID); err != nil {
		return nil, err
	}
	mana, sparks, err := lockBalances(ctx, tx, p.PlayerID)
	if err != nil {
		return nil, err
	}
	c := split(p.Mana, mana, sparks, s.sparksPerMana)
	if err := s.takeBack(ctx, tx, p, c); err != nil {
		return nil, err
	}
	return &c, nil
}

// split divides a clawback of want Mana between the wallets and debt.
func split(want, mana, sparks, rate int64) Clawback {
	c := Clawback{Mana: min(want, mana)}
	rest := want - c.Mana
	inSparks := min(rest, sparks/rate)
	c.Sparks = inSparks * rate
	c.Debt = rest - inSparks
	return c
}

func (s *Store) takeBack(ctx context.Context, tx pgx.Tx, p ClawbackParams, c Clawback) error {
	if c.Debt > 0 {
		if _, err := s.CreditTx(ctx, tx, PostParams{PlayerID: p.PlayerID, Currency: Mana, Amount: c.Debt,
			Kind: KindDebt, Reference: p.Reference, IdempotencyKey: p.Key.leg(debtSuffix), Account: AccountReceivable}); err != nil {
			return err
		}
		if err := addDebt(ctx, tx, p.PlayerID, c.Debt); err != nil {
			return err
		}
	}
	if n := c.Mana + c.Debt; n > 0 {
		if _, err := s.DebitTx(ctx, tx, PostParams{PlayerID: p.PlayerID, Currency: Mana, Amount: n,
			Kind: KindClawback, Reference: p.Reference, IdempotencyKey: p.Key.leg(clawManaSuffix), Account: AccountManaIssued}); err != nil {
			return err
		}
	}
	if c.Sparks > 0 {
		if _, err := s.DebitTx(ctx, tx, PostParams{PlayerID: p.PlayerID, Currency: Sparks, Amount: c.Sparks,
			Kind: KindClawback, Reference: p.Reference, IdempotencyKey: p.Key.leg(clawSparksSuffix), Account: AccountClawbacks}); err != nil {
			return err
		}
	}
	return nil
}

// CreditSettlingTx credits p's Mana and then settles the player's debt
// out of the wallet first, under key <p.IdempotencyKey>:settle. A replayed
// credit settles nothing again. It returns the credit and the Mana settled.
func (s *Store) CreditSettlingTx(ctx context.Context, tx pgx.Tx, p PostParams) (*Transaction, int64, error) {
	if p.Currency != Mana {
		t, err := s.CreditTx(ctx, tx, p)
		return t, 0, err
	}
	owed, err := LockDebtTx(ctx, tx, p.PlayerID)
	if err != nil {
		return nil, 0, err
	}
	t, err := s.CreditTx(ctx, tx, p)
	if err != nil || t.Replayed || owed == 0 {
		return t, 0, err
	}
	n := min(owed, t.BalanceAfter)
	if _, err := s.DebitTx(ctx, tx, PostParams{PlayerID: p.PlayerID, Currency: Mana, Amount: n,
		Kind: KindDebtSettlement, Reference: p.Reference, IdempotencyKey: p.IdempotencyKey.Settlement(),
		Account: AccountReceivable}); err != nil {
		return nil, 0, err
	}
	return t, n, addDebt(ctx, tx, p.PlayerID, -n)
}

// Forgiveness is the answer of ForgiveDebt.
type Forgiveness struct {
	PlayerID int64
	Mana     int64 // forgiven by this key (0: there was nothing to forgive)
	Replayed bool
	// Key is the forgiveness's own key as stored (debt_forgiveness.key,
	// OperatorKey(OperatorForgive, key)): what reports it are keyed on it.
	Key string
}

// ForgiveDebt writes the player's whole debt off under the operator's key
// (stored as OperatorKey(OperatorForgive, key)): a Mana credit from
// bad_debt then a debit to receivable, the wallet unchanged. The key is
// spent whatever the outcome (0 Mana when nothing was owed): the same key
// again answers the first result and moves nothing. It commits through
// durable.Commit; ForgiveDebtTx is the same inside the caller's
// transaction.
func (s *Store) ForgiveDebt(ctx context.Context, playerID int64, key, reason string) (*Forgiveness, error) {
	k := OperatorKey(OperatorForgive, key)
	if err := k.check(); err != nil {
		return nil, err // it names the key and the package once, like every post's
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("wallet: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	f, err := s.forgive(ctx, tx, playerID, k, reason)
	if err != nil {
		return nil, err
	}
	return f, durable.Commit(ctx, tx)
}

// ForgiveDebtTx is ForgiveDebt inside tx, for a caller that writes what
// reports the forgiveness (its event) in the same transaction: the key is
// spent, and the debt written off, when tx commits. A replay (the key
// already spent) answers Replayed and writes nothing. After an error, tx
// is to be rolled back.
func (s *Store) ForgiveDebtTx(ctx context.Context, tx pgx.Tx, playerID int64, key, reason string) (*Forgiveness, error) {
	k := OperatorKey(OperatorForgive, key)
	if err := k.check(); err != nil {
		return nil, err
	}
	return s.forgive(ctx, tx, playerID, k, reason)
}

func (s *Store) forgive(ctx context.Context, tx pgx.Tx, playerID int64, key Key, reason string) (*Forgiveness, error) {
	owed, err := LockDebtTx(ctx, tx, playerID)
	if err != nil {
		return nil, err
	}
	if done, err := forgiven(ctx, tx, key.String()); err != nil || done != nil {
		if done != nil && done.PlayerID != playerID {
			return nil, &KeyReusedError{Key: key.String(), Field: "player"}
		}
		return done, err
	}
	if owed > 0 {
		if err := s.writeOff(ctx, tx, playerID, owed, key, reason); err != nil {
			return nil, err
		}
	}
	f := &Forgiveness{PlayerID: playerID, Mana: owed, Key: key.String()}
	return f, recordForgiveness(ctx, tx, playerID, owed, key.String(), reason)
}

// writeOff moves owed Mana from bad_debt to receivable through the wallet
// and clears it from the debts row.
func (s *Store) writeOff(ctx context.Context, tx pgx.Tx, playerID, owed int64, key Key, reason string) error {
	ref := "forgiven: " + reason
	if _, err := s.CreditTx(ctx, tx, PostParams{PlayerID: playerID, Currency: Mana, Amount: owed,
		Kind: KindDebtWriteOff, Reference: ref, IdempotencyKey: key.leg(writeOffSuffix), Account: AccountBadDebt}); err != nil {
		return err
	}
	if _, err := s.DebitTx(ctx, tx, PostParams{PlayerID: playerID, Currency: Mana, Amount: owed,
		Kind: KindDebtWriteOff, Reference: ref, IdempotencyKey: key.leg(receivableSuffix), Account: AccountReceivable}); err != nil {
		return err
	}
	return addDebt(ctx, tx, playerID, -owed)
}

// recordForgiveness spends key on this outcome, 0 Mana included, so a
// replay answers it and never forgives a later debt. The debts row lock
// serialises one player's calls; the primary key referees the same key
// sent for two players at once.
func recordForgiveness(ctx context.Context, tx pgx.Tx, playerID, mana int64, key, reason string) error {
	tag, err := tx.Exec(ctx, `INSERT INTO debt_forgiveness (key, player_id, mana, reason)
		VALUES ($1, $2, $3, $4) ON CONFLICT (key) DO NOTHING`, key, playerID, mana, reason)
	if err != nil {
		return fmt.Errorf("wallet: record forgiveness %q: %w", key, err)
	}
	if tag.RowsAffected() == 0 {
		return &KeyReusedError{Key: key, Field: "player"}
	}
	return nil
}

// forgiven returns the forgiveness already recorded under key, or nil.
func forgiven(ctx context.Context, tx pgx.Tx, key string) (*Forgiveness, error) {
	f := &Forgiveness{Replayed: true, Key: key}
	err := tx.QueryRow(ctx, `SELECT player_id, mana FROM debt_forgiveness WHERE key = $1`, key).Scan(&f.PlayerID, &f.Mana)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("wallet: look up forgiveness %q: %w", key, err)
	}
	return f, nil
}

// Debt is a player's open debt.
type Debt struct {
	PlayerID  int64
	Mana      int64
	UpdatedAt time.Time
}

// Debts lists every open debt, largest first.
func (s *Store) Debts(ctx context.Context) ([]Debt, error) {
	rows, err := s.pool.Query(ctx, `SELECT player_id, outstanding, updated_at FROM debts
		WHERE outstanding > 0 ORDER BY outstanding DESC, player_id`)
	if err != nil {
		return nil, fmt.Errorf("wallet: list debts: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Debt])
	if err != nil {
		return nil, fmt.Errorf("wallet: list debts: %w", err)
	}
	return out, nil
}

func isForeignKey(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23503"
}
