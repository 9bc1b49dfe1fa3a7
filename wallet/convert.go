package wallet

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
)

// Convert moves Mana to Sparks, both legs in one transaction. There is no
// reverse: Sparks never turn back into Mana. A player who owes Mana (a
// clawback's debt) may not convert: *OutstandingDebtError, checked before
// the balance. A replay answers the stored conversion whatever is owed now.
// Its one statement commits through durable.Do, as Post's does, with the
// observer's guard pipelined after it as Post's Sparks posts are; when
// the guard fails, or the observer has none, it is ConvertTx in a
// transaction of its own.
func (s *Store) Convert(ctx context.Context, p ConvertParams) (*Conversion, error) {
	var guard *guardStmt
	if s.observer != nil {
		if guard = s.guardFor(p.PlayerID); guard == nil {
			return s.observedConvert(ctx, p)
		}
	}
	start := time.Now()
	var c *Conversion
	debit, credit, err := s.legs(p)
	if err == nil {
		err = s.autocommit(ctx, func(on *Store) (err error) {
			on.guard = guard
			c, err = on.convertLegs(ctx, nil, debit, credit)
			return err
		})
	}
	if errors.Is(err, errGuarded) {
		return s.observedConvert(ctx, p)
	}
	if err != nil {
		c = nil
	}
	observe(KindConversion, start, c != nil && c.Replayed, err)
	return c, err
}

// observedConvert is ConvertTx in a transaction of its own.
func (s *Store) observedConvert(ctx context.Context, p ConvertParams) (*Conversion, error) {
	var c *Conversion
	err := s.observedTx(ctx, func(tx pgx.Tx) (err error) {
		c, err = s.ConvertTx(ctx, tx, p)
		return err
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// ConvertTx is Convert inside the caller's transaction (under a savepoint);
// a new conversion tells the Store's observer in tx.
func (s *Store) ConvertTx(ctx context.Context, tx pgx.Tx, p ConvertParams) (*Conversion, error) {
	start := time.Now()
	c, err := s.convert(ctx, tx, p)
	if err == nil {
		if err = s.sparksMoved(ctx, tx, c.SparksCredit); err != nil {
			c = nil
		}
	}
	observe(KindConversion, start, c != nil && c.Replayed, err)
	return c, err
}

// legs validates p and derives the two legs.
func (s *Store) legs(p ConvertParams) (debit, credit leg, err error) {
	if err := p.IdempotencyKey.check(); err != nil {
		return leg{}, leg{}, err
	}
	if len(p.IdempotencyKey.String())+len(SparksCreditSuffix) > MaxKeyLength {
		return leg{}, leg{}, ErrInvalidKey
	}
	if p.Mana <= 0 {
		return leg{}, leg{}, ErrInvalidAmount
	}
	if p.Mana > math.MaxInt64/s.sparksPerMana {
		return leg{}, leg{}, fmt.Errorf("%w: %d Mana at %d Sparks each", ErrOverflow, p.Mana, s.sparksPerMana)
	}
	base := PostParams{PlayerID: p.PlayerID, Kind: KindConversion, Reference: "conversion:" + p.IdempotencyKey.String()}
	d, c := base, base
	d.Currency, d.Direction, d.Amount, d.IdempotencyKey = Mana, Debit, p.Mana, p.IdempotencyKey.leg(ManaDebitSuffix)
	c.Currency, c.Direction, c.Amount, c.IdempotencyKey = Sparks, Credit, p.Mana*s.sparksPerMana, p.IdempotencyKey.leg(SparksCreditSuffix)
	if debit, err = newLeg(d); err != nil {
		return leg{}, leg{}, err
	}
	credit, err = newLeg(c)
	return debit, credit, err
}

func (s *Store) convert(ctx context.Context, tx pgx.Tx, p ConvertParams) (*Conversion, error) {
	debit, credit, err := s.legs(p)
	if err != nil {
		return nil, err
	}
	return s.convertLegs(ctx, tx, debit, credit)
}

// convertLegs applies a conversion's validated legs: in autocommit on
// s.pool when tx is nil, else in tx.
func (s *Store) convertLegs(ctx context.Context, tx pgx.Tx, debit, credit leg) (*Conversion, error) {
	a, err := s.apply(ctx, tx, conversionStatement, append(debit.args(), credit.args()...))
	switch {
	case err == nil && a.debt > 0:
		return nil, &OutstandingDebtError{Mana: a.debt}
	case err == nil && len(a.txs) == 0:
		err = errRefused
	}
	if err != nil {
		if a.txs, err = s.rescue(ctx, tx, []leg{debit, credit}, err); err != nil {
			return nil, err
		}
	}
	return conversionOf(a.txs, debit, credit)
}

// conversionOf answers a conversion from its legs' rows found (new, or
// stored ones flagged as replays), and refuses a parent key reused
// differently.
func conversionOf(found []*Transaction, debit, credit leg) (*Conversion, error) {
	c := &Conversion{Replayed: found[0].Replayed}
	for _, t := range found {
		if t.IdempotencyKey == debit.key {
			c.ManaDebit = t
		} else {
			c.SparksCredit = t
		}
	}
	if !c.Replayed {
		return c, nil
	}
	parent := debit.key[:len(debit.key)-len(ManaDebitSuffix)]
	if c.ManaDebit == nil || c.SparksCredit == nil {
		// Both legs commit together; a lone leg means the key was used by a
		// plain post, which is a reuse of the parent's namespace.
		return nil, &KeyReusedError{Key: parent, Field: "kind"}
	}
	if f := debit.mismatch(c.ManaDebit, true); f != "" {
		return nil, &KeyReusedError{Key: parent, Field: f}
	}
	// The Sparks amount is derived from the rate, which an operator may
	// change between attempts: the stored leg is the truth, so its amount
	// is not compared.
	if f := credit.mismatch(c.SparksCredit, false); f != "" {
		return nil, &KeyReusedError{Key: parent, Field: f}
	}
	return c, nil
}
