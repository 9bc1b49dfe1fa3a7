package wallet

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fibe-dev/billing/internal/dbtx"
)

// Convert moves Mana to Sparks, both legs in one transaction. There is no
// reverse: Sparks never turn back into Mana. A player who owes Mana (a
// clawback's debt) may not convert: *OutstandingDebtError, checked before
// the balance. A replay answers the stored conversion whatever is owed now.
func (s *Store) Convert(ctx context.Context, p ConvertParams) (*Conversion, error) {
	start := time.Now()
	c, err := s.convert(ctx, nil, p)
	observe(KindConversion, start, c != nil && c.Replayed, err)
	return c, err
}

// ConvertTx is Convert inside the caller's transaction (under a savepoint).
func (s *Store) ConvertTx(ctx context.Context, tx pgx.Tx, p ConvertParams) (*Conversion, error) {
	start := time.Now()
	c, err := s.convert(ctx, tx, p)
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
	found, err := applyPair(ctx, s.pool, tx, debit, credit)
	if err != nil {
		return s.rescueConversion(ctx, tx, debit, credit, err)
	}
	if found[0].Replayed {
		return pairOf(found, debit, credit)
	}
	conv := &Conversion{}
	for _, t := range found {
		if t.IdempotencyKey == debit.key {
			conv.ManaDebit = t
		} else {
			conv.SparksCredit = t
		}
	}
	return conv, nil
}

// rescueConversion answers a conversion that did not apply: a concurrent
// conversion with the same parent key may have committed first.
func (s *Store) rescueConversion(ctx context.Context, tx pgx.Tx, debit, credit leg, err error) (*Conversion, error) {
	if !errors.Is(err, errKeyTaken) && !errors.Is(err, errRefused) && !errors.Is(err, ErrOverflow) {
		return nil, err
	}
	var q dbtx.DB = s.pool
	if tx != nil {
		q = tx
	}
	c, lerr := lookupPair(ctx, q, debit, credit)
	if lerr == nil && c == nil && tx != nil && errors.Is(err, errKeyTaken) { // see Store.winner
		c, lerr = lookupPair(ctx, s.pool, debit, credit)
	}
	switch {
	case lerr != nil:
		return nil, lerr
	case c != nil:
		return c, nil
	case errors.Is(err, errRefused):
		return nil, ErrInsufficientBalance
	case errors.Is(err, errKeyTaken):
		return nil, fmt.Errorf("wallet: conversion key %q taken but its legs are not visible", debit.key)
	}
	return nil, err
}

// lookupPair returns the stored pair for a conversion's legs as a replay,
// nil when neither exists, and refuses a parent key reused differently.
func lookupPair(ctx context.Context, q dbtx.DB, debit, credit leg) (*Conversion, error) {
	rows, err := q.Query(ctx, `SELECT `+txColumns+` FROM wallet_transactions WHERE idempotency_key IN ($1, $2)`,
		debit.key, credit.key)
	if err != nil {
		return nil, fmt.Errorf("wallet: look up conversion: %w", err)
	}
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*Transaction, error) { return scanTx(r) })
	if err != nil {
		return nil, fmt.Errorf("wallet: look up conversion: %w", err)
	}
	return pairOf(found, debit, credit)
}

// pairOf answers a conversion from its stored legs found (none: nil, nil)
// as a replay, and refuses a parent key reused differently.
func pairOf(found []*Transaction, debit, credit leg) (*Conversion, error) {
	c := &Conversion{Replayed: true}
	for _, t := range found {
		t.Replayed = true
		if t.IdempotencyKey == debit.key {
			c.ManaDebit = t
		} else {
			c.SparksCredit = t
		}
	}
	parent := debit.key[:len(debit.key)-len(ManaDebitSuffix)]
	switch {
	case c.ManaDebit == nil && c.SparksCredit == nil:
		return nil, nil
	case c.ManaDebit == nil || c.SparksCredit == nil:
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
