package httpapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fibe-dev/billing/wallet"
)

// transactionView is a wallet transaction as the API shows it.
type transactionView struct {
	ID           int64     `json:"id,string"`
	Currency     string    `json:"currency"`
	Amount       int64     `json:"amount"`
	Kind         string    `json:"kind"`
	Reference    string    `json:"reference"`
	BalanceAfter int64     `json:"balance_after"`
	CreatedAt    time.Time `json:"created_at"`
}

func viewTransaction(t *wallet.Transaction) *transactionView {
	if t == nil {
		return nil
	}
	return &transactionView{ID: t.ID, Currency: string(t.Currency), Amount: t.Amount, Kind: string(t.Kind),
		Reference: t.Reference, BalanceAfter: t.BalanceAfter, CreatedAt: t.CreatedAt}
}

type balanceView struct {
	Balance int64 `json:"balance"`
}

func (a *api) getWallets(w http.ResponseWriter, r *http.Request, player int64) error {
	b, err := a.wallets.Balances(r.Context(), player)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]balanceView{
		string(wallet.Mana): {b[wallet.Mana]}, string(wallet.Sparks): {b[wallet.Sparks]},
	})
}

// maxPage bounds ?limit=.
const maxPage = 100

func (a *api) listTransactions(w http.ResponseWriter, r *http.Request, player int64) error {
	currency := wallet.Currency(r.PathValue("currency"))
	if currency != wallet.Mana && currency != wallet.Sparks {
		return errNotFound
	}
	limit, before := 50, int64(0)
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxPage {
			return badRequest(CodeInvalidRequest, "limit must be 1 to 100")
		}
		limit = n
	}
	if v := r.URL.Query().Get("before"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return badRequest(CodeInvalidRequest, "before must be a transaction id")
		}
		before = n
	}
	txs, err := a.wallets.Transactions(r.Context(), player, currency, wallet.ListParams{Limit: limit + 1, BeforeID: before})
	if err != nil {
		return err
	}
	page := struct {
		Data       []*transactionView `json:"data"`
		HasMore    bool               `json:"has_more"`
		NextBefore string             `json:"next_before,omitempty"`
	}{Data: []*transactionView{}}
	for i := range txs {
		if i == limit {
			page.HasMore = true
			break
		}
		page.Data = append(page.Data, viewTransaction(&txs[i]))
	}
	if page.HasMore {
		page.NextBefore = strconv.FormatInt(page.Data[len(page.Data)-1].ID, 10)
	}
	return writeJSON(w, http.StatusOK, page)
}

// createConversion converts Mana into Sparks, one way. The wallet's key is
// derived from the request's Idempotency-Key, so both legs happen once. The
// wallet refuses a player who owes Mana (*wallet.OutstandingDebtError,
// before the balance), and that error declares its answer.
func (a *api) createConversion(w http.ResponseWriter, r *http.Request, tx pgx.Tx, player int64) error {
	var body struct {
		Mana int64 `json:"mana"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	if body.Mana <= 0 {
		return badRequest(CodeInvalidAmount, "mana must be a positive integer")
	}
	conv, err := a.wallets.ConvertTx(r.Context(), tx, wallet.ConvertParams{
		PlayerID: player, Mana: body.Mana, IdempotencyKey: derivedKey(r, player, "conversion"),
	})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, map[string]*transactionView{
		"mana_debit": viewTransaction(conv.ManaDebit), "sparks_credit": viewTransaction(conv.SparksCredit),
	})
}
