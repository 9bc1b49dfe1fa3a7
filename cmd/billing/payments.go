package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/fibe-dev/billing/config"
	"github.com/fibe-dev/billing/fulfillment"
)

func newPaymentsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "payments",
		Short: "Inspect provider payments (applied, unapplied, refunded)",
	}
	cmd.AddCommand(newPaymentsListCmd(), newPaymentsMarkRefundedCmd(), newPaymentsDecidePendingCmd())
	return cmd
}

func newPaymentsMarkRefundedCmd() *cobra.Command {
	var payment int64
	var refundID string
	var asJSON bool
	c := &cobra.Command{
		Use:   "mark-refunded --payment ID --refund-id R [--json]",
		Short: "Record that an unapplied payment was refunded by hand at the provider",
		Long: `mark-refunded records that the unapplied payment with row id --payment (id=
in 'billing payments list --unapplied', "id" with --json) was refunded in
the provider's dashboard, under the provider's refund id, and sends
payment.refunded. It moves no money (an unapplied payment minted nothing);
the payment leaves the --unapplied list. Run it after the refund, never instead of it. Replay-safe:
the same payment and refund id again change nothing; another refund id for
a payment already marked, or a payment that minted its order's Mana (whose
refunds arrive as the provider's webhooks), is refused.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool, _ *config.Config) error {
				// The mark (and its payment.refunded) is reported done only once
				// a synchronous standby has it; on ErrNotDurable the same command
				// again is the retry.
				p, changed, err := fulfillment.MarkRefunded(ctx, pool, payment, refundID)
				if err != nil {
					return err
				}
				text := "marked " + paymentLine(*p)
				if !changed {
					text = "already marked, nothing changed: " + paymentLine(*p)
				}
				return printResult(cmd.OutOrStdout(), asJSON, struct {
					paymentJSON
					Changed bool `json:"changed"`
				}{viewPayment(*p), changed}, text)
			})
		},
	}
	c.Flags().Int64Var(&payment, "payment", 0, "the payment's row id (required)")
	c.Flags().StringVar(&refundID, "refund-id", "", "the provider's refund id (required)")
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON object")
	for _, f := range []string{"payment", "refund-id"} {
		_ = c.MarkFlagRequired(f)
	}
	return c
}

func newPaymentsDecidePendingCmd() *cobra.Command {
	var asJSON bool
	grace := fulfillment.UnknownPaymentGrace
	c := &cobra.Command{
		Use:   "decide-pending [--json]",
		Short: "Decide the refund and dispute events still pending for payments that are known",
		Long: `decide-pending decides every refund, dispute or chargeback event that is
still pending although its payment is known (ledger verify reports them as
reversal_event_undecided): accepted or refused against the payment, folded
into its facts, and the payment's clawback brought to what they imply, one
payment at a time under the same locks as the workers. After the upgrade to
migration 00010 it decides the refunds the old code had refused for exceeding
their payment. Then it refuses every event still waiting for a payment that
is not known after --grace (72h, the reconciliation window: a payment whose
webhook was lost is recovered within it): "unknown payment after its grace
period", recorded on the event and as its outcome (invariant 11). Safe to
run at any time, and again: a decided event is never decided twice.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool, cfg *config.Config) error {
				w := fulfillment.NewReverseWorker(fulfillment.WorkerOptions{Pool: pool, Wallet: newWallet(pool, cfg),
					Logger: newLogger(cfg, cmd.ErrOrStderr())})
				n, err := w.DecidePending(ctx)
				if err != nil {
					return err
				}
				refused, err := w.RefuseUnknown(ctx, grace)
				if err != nil {
					return err
				}
				if refused == nil {
					refused = []fulfillment.EventKey{}
				}
				return printResult(cmd.OutOrStdout(), asJSON, struct {
					Payments int                    `json:"payments"`
					Refused  []fulfillment.EventKey `json:"refused_unknown_payment"`
				}{n, refused}, fmt.Sprintf("decided the pending events of %s; refused %s waiting longer than %s for an unknown payment",
					count(n, "payment"), count(len(refused), "event"), grace))
			})
		},
	}
	c.Flags().DurationVar(&grace, "grace", grace, "how long an event naming an unknown payment waits before it is refused")
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON object")
	return c
}

func newPaymentsListCmd() *cobra.Command {
	var unapplied, asJSON bool
	var order int64
	c := &cobra.Command{
		Use:   "list [--unapplied] [--order ID] [--json]",
		Short: "List recorded payments, oldest first",
		Long: `list prints every recorded provider payment: the order it paid, amount,
currency, the Mana it minted, what was refunded and its status, as the API
shows it (GET /v1/orders/{id}). applied minted the order's Mana;
partially_refunded is an applied payment whose refunds at the provider cover
part of it; unapplied is money received that minted nothing (a second,
distinct payment for an order already paid, or a payment the order refused)
and must be refunded; refunded is a payment whose refunds cover all of it, or
an unapplied payment refunded through the provider's API (or marked refunded
by hand: billing payments mark-refunded). --unapplied lists only the ones
still to refund. id is the row id that mark-refunded takes. With --json each
payment also lists its refunds and disputes ("reversals").`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool, _ *config.Config) error {
				ps, err := fulfillment.PaymentViews(ctx, pool, fulfillment.PaymentViewParams{UnappliedOnly: unapplied, OrderID: order})
				if err != nil {
					return err
				}
				return printPaymentViews(cmd.OutOrStdout(), ps, asJSON)
			})
		},
	}
	c.Flags().BoolVar(&unapplied, "unapplied", false, "only unapplied payments (to refund)")
	c.Flags().Int64Var(&order, "order", 0, "only this order's payments")
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	return c
}

func printPaymentViews(out io.Writer, ps []fulfillment.PaymentView, asJSON bool) error {
	if asJSON {
		views := make([]paymentViewJSON, len(ps))
		for i, p := range ps {
			views[i] = viewPaymentView(p)
		}
		return printList(out, views, true, nil, "")
	}
	return printList(out, ps, false, paymentViewLine, count(len(ps), "payment"))
}

// paymentViewLine is paymentLine with the shown status and what went back.
func paymentViewLine(v fulfillment.PaymentView) string {
	p := v.Payment
	p.Status = v.Status
	s := paymentLine(p)
	if v.RefundedAmount > 0 {
		s += fmt.Sprintf(" refunded=%d", v.RefundedAmount)
	}
	for _, f := range v.Reversals {
		s += fmt.Sprintf(" %s=%s:%s:%d", f.Kind, f.ReversalID, f.State, f.Amount)
	}
	return s
}

func paymentLine(p fulfillment.Payment) string {
	s := fmt.Sprintf("id=%d %s %s order=%d player=%d %d %s minted=%d clawed_back=%d %s", p.ID, p.Provider, p.PaymentID, p.OrderID,
		p.PlayerID, p.Amount, p.Currency, p.ManaMinted, p.ClawedBackMana, p.Status)
	if p.RefundID != "" {
		s += " refund=" + p.RefundID
	}
	if p.Reason != "" {
		s += fmt.Sprintf(" reason=%q", p.Reason)
	}
	return s
}

// paymentViewJSON is a payments list --json item: the payment with its
// shown status (fulfillment.PaymentView), what went back, and its facts.
type paymentViewJSON struct {
	paymentJSON
	RefundedAmount int64          `json:"refunded_amount"`
	Reversals      []reversalJSON `json:"reversals"`
}

type reversalJSON struct {
	ID        string    `json:"id"`
	Kind      string    `json:"kind"`
	State     string    `json:"state"`
	Amount    int64     `json:"amount"`
	Currency  string    `json:"currency"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

func viewPaymentView(v fulfillment.PaymentView) paymentViewJSON {
	out := paymentViewJSON{paymentJSON: viewPayment(v.Payment), RefundedAmount: v.RefundedAmount,
		Reversals: make([]reversalJSON, len(v.Reversals))}
	out.Status = v.Status
	for i, f := range v.Reversals {
		out.Reversals[i] = reversalJSON{ID: f.ReversalID, Kind: f.Kind, State: f.State, Amount: f.Amount,
			Currency: f.Currency, CreatedAt: f.CreatedAt, UpdatedAt: f.UpdatedAt}
	}
	return out
}
