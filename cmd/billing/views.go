package main

import (
	"strconv"
	"time"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/domain/players"
	"github.com/fibe-dev/billing/wallet"
)

// The --json shapes of the operator commands: the domain's structs carry
// no JSON of their own, so each command's output is a contract stated here.

type paymentJSON struct {
	ID             int64     `json:"id,string"`
	Provider       string    `json:"provider"`
	PaymentID      string    `json:"payment_id"`
	OrderID        int64     `json:"order_id,string"`
	PlayerID       int64     `json:"player_id,string"`
	EventID        string    `json:"event_id"`
	Amount         int64     `json:"amount"`
	Currency       string    `json:"currency"`
	ManaMinted     int64     `json:"mana_minted"`
	Status         string    `json:"status"`
	Reason         string    `json:"reason,omitempty"`
	ClawedBackMana int64     `json:"clawed_back_mana"`
	RefundID       string    `json:"refund_id,omitempty"`
	CreatedAt      time.Time `json:"created_at"`
}

func viewPayment(p fulfillment.Payment) paymentJSON {
	return paymentJSON{ID: p.ID, Provider: p.Provider, PaymentID: p.PaymentID, OrderID: p.OrderID, PlayerID: p.PlayerID,
		EventID: p.EventID, Amount: p.Amount, Currency: p.Currency, ManaMinted: p.ManaMinted, Status: p.Status,
		Reason: p.Reason, ClawedBackMana: p.ClawedBackMana, RefundID: p.RefundID, CreatedAt: p.CreatedAt}
}

type transactionJSON struct {
	ID             int64     `json:"id,string"`
	PlayerID       int64     `json:"player_id,string"`
	WalletID       int64     `json:"wallet_id,string"`
	Currency       string    `json:"currency"`
	Amount         int64     `json:"amount"` // signed: positive credit, negative debit
	Kind           string    `json:"kind"`
	Reference      string    `json:"reference"`
	IdempotencyKey string    `json:"idempotency_key"`
	BalanceAfter   int64     `json:"balance_after"`
	CreatedAt      time.Time `json:"created_at"`
	Replayed       bool      `json:"replayed"`
}

func viewTransaction(t *wallet.Transaction) transactionJSON {
	return transactionJSON{ID: t.ID, PlayerID: t.PlayerID, WalletID: t.WalletID, Currency: string(t.Currency),
		Amount: t.Amount, Kind: string(t.Kind), Reference: t.Reference, IdempotencyKey: t.IdempotencyKey,
		BalanceAfter: t.BalanceAfter, CreatedAt: t.CreatedAt, Replayed: t.Replayed}
}

type debtJSON struct {
	PlayerID  int64     `json:"player_id,string"`
	Mana      int64     `json:"mana"`
	UpdatedAt time.Time `json:"updated_at"`
}

type forgivenessJSON struct {
	PlayerID int64 `json:"player_id,string"`
	Mana     int64 `json:"mana"` // forgiven by this key (0: there was nothing to forgive)
	Replayed bool  `json:"replayed"`
}

type apiKeyJSON struct {
	ID           int64      `json:"id,string"`
	PlayerID     int64      `json:"player_id,string"`
	Hint         string     `json:"hint"`  // "bk_…1a2b": the key's last four characters, never the key
	State        string     `json:"state"` // active, expiring, expired, revoked
	CreatedAt    time.Time  `json:"created_at"`
	ExpiresAt    *time.Time `json:"expires_at"`
	RevokedAt    *time.Time `json:"revoked_at"`
	RevokeReason string     `json:"revoke_reason,omitempty"`
	RotatedFrom  string     `json:"rotated_from,omitempty"` // the key id this one replaced
	RotatedTo    string     `json:"rotated_to,omitempty"`   // the key id that replaced this one
}

func viewAPIKey(k players.Key) apiKeyJSON {
	return apiKeyJSON{ID: k.ID, PlayerID: k.PlayerID, Hint: k.Masked(), State: k.State, CreatedAt: k.CreatedAt,
		ExpiresAt: k.ExpiresAt, RevokedAt: k.RevokedAt, RevokeReason: k.RevokeReason,
		RotatedFrom: idOrEmpty(k.RotatedFrom), RotatedTo: idOrEmpty(k.RotatedTo)}
}

// newAPIKeyJSON is what prints a new key, the only time it is shown.
type newAPIKeyJSON struct {
	PlayerID string `json:"player_id"`
	KeyID    string `json:"key_id"`
	APIKey   string `json:"api_key"`
	// The rotated key, and when it stops working (rotate only).
	RotatedFrom  string     `json:"rotated_from,omitempty"`
	OldExpiresAt *time.Time `json:"old_expires_at,omitempty"`
}

func idOrEmpty(id int64) string {
	if id == 0 {
		return ""
	}
	return strconv.FormatInt(id, 10)
}
