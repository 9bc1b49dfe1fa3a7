package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/fibe-dev/billing/config"
	"github.com/fibe-dev/billing/internal/ops/timeline"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/drivers"
)

func newExplainCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "explain",
		Short: `Answer "what happened to my payment?": one timeline of an order, a provider payment or a player`,
		Long: `explain prints one timeline across every layer, oldest first: the checkout
(its Idempotency-Key and provider key), every provider delivery (claimed once
per event id, with how many duplicate deliveries followed and when), the
fulfilment and reversal jobs (state, attempts, each attempt's error, the job's
River UI path), the payments (applied, unapplied, refunded) and their aliases,
every refund and dispute event as the provider sent it (accepted, refused and
why, pending), the facts they add up to, every wallet transaction with its
ledger entries and balance_after, the debts they opened and how they were
settled or forgiven, and operator adjustments with their reason. Each line
names the key that made it happen once. A verdict in plain words comes first.

The same timeline is the operator page of billing web (/timeline/). --json
prints it as one object (see docs/operations.md, "billing explain").
Something unknown is an error (exit 1).`,
	}
	cmd.AddCommand(newExplainOrderCmd(), newExplainPaymentCmd(), newExplainPlayerCmd())
	return cmd
}

func newExplainOrderCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "order ID [--json]",
		Short: "The timeline of one order: its checkout, payments, events, jobs, refunds, disputes and wallet transactions",
		Args:  usageArgs(1, 1, "billing explain order ID [--json]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || id <= 0 {
				return fmt.Errorf("explain order: %q is not an order id (a positive number)", args[0])
			}
			return explain(cmd, asJSON, func(ctx context.Context, pool *pgxpool.Pool) (*timeline.Timeline, error) {
				return timeline.Order(ctx, pool, drivers.New(nil), id)
			})
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the timeline as one JSON object")
	return c
}

func newExplainPaymentCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "payment [PROVIDER] ID [--json]",
		Short: "The timeline of the order a provider id belongs to (payment, PaymentIntent, charge, refund, dispute, event, checkout)",
		Long: `payment finds the order behind any id the provider gave: Stripe's Checkout
Session (cs_), PaymentIntent (pi_), charge (ch_), the refund fact of a charge
(charge:ch_...), a dispute (dp_ / du_), the refund of an unapplied payment
(re_); Paddle's transaction (txn_), refund adjustment (adj_) or chargeback
(chargeback:txn_...); Creem's order (ord_), checkout (ch_), refund or
dispute; and any provider event id (evt_...). A refund or dispute whose
payment is not recorded yet gets a timeline of its own events.

PROVIDER (stripe, paddle or creem) may be left out when the id's prefix
names one provider; an id whose prefix names none (an event id, evt_) or
several (ch_ is a Stripe charge or a Creem checkout) needs it.`,
		Args: usageArgs(1, 2, "billing explain payment [PROVIDER] ID [--json]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, id, err := paymentArgs(args)
			if err != nil {
				return err
			}
			return explain(cmd, asJSON, func(ctx context.Context, pool *pgxpool.Pool) (*timeline.Timeline, error) {
				return timeline.Payment(ctx, pool, drivers.New(nil), name, id)
			})
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the timeline as one JSON object")
	return c
}

// paymentArgs reads explain payment's [PROVIDER] ID: without a provider,
// the one the id's prefix names.
func paymentArgs(args []string) (name, id string, err error) {
	const usage = "usage: billing explain payment [PROVIDER] ID"
	names := strings.Join(provider.Names(), ", ")
	if len(args) == 2 {
		name = strings.ToLower(args[0])
		if !provider.Known(name) {
			return "", "", fmt.Errorf("explain payment: unknown provider %q (%s)", args[0], names)
		}
		return name, args[1], nil
	}
	id = args[0]
	if provider.Known(strings.ToLower(id)) {
		return "", "", fmt.Errorf("explain payment: the id is missing after the provider; %s", usage)
	}
	if err := timeline.ValidID(id); err != nil {
		return "", "", fmt.Errorf("explain payment: %w", err)
	}
	switch ps := drivers.New(nil).ProvidersOf(id); len(ps) {
	case 1:
		return ps[0], id, nil
	case 0:
		return "", "", fmt.Errorf("explain payment: the prefix of %q names no provider: name it (%s); %s", id, names, usage)
	default:
		return "", "", fmt.Errorf("explain payment: %q may be a %s id: name the provider; %s", id, strings.Join(ps, " or "), usage)
	}
}

// usageArgs accepts lo to hi arguments, else says how the command is
// used (rather than cobra's bare "accepts 2 arg(s)").
func usageArgs(lo, hi int, usage string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < lo || len(args) > hi {
			return fmt.Errorf("%s: expected %s, got %d; usage: %s", cmd.CommandPath(), argCount(lo, hi), len(args), usage)
		}
		return nil
	}
}

func argCount(lo, hi int) string {
	if lo == hi {
		return count(lo, "argument")
	}
	return fmt.Sprintf("%d or %d arguments", lo, hi)
}

func newExplainPlayerCmd() *cobra.Command {
	var asJSON bool
	var since string
	c := &cobra.Command{
		Use:   "player ID [--since D] [--json]",
		Short: "The timeline of one player: every order and wallet transaction, with balances and debt",
		Long: fmt.Sprintf(`player prints every order of the player and every wallet transaction
(purchases, conversions, fundings, clawbacks, debts, adjustments), at most
the newest %d of each wallet. --since keeps what happened from then on: a
date (2026-11-01, UTC), a time (RFC 3339) or how long ago (72h, 30d).`, timeline.MaxWalletLines),
		Args: usageArgs(1, 1, "billing explain player ID [--since D] [--json]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || id <= 0 {
				return fmt.Errorf("explain player: %q is not a player id (a positive number)", args[0])
			}
			from, err := parseSince(since, time.Now())
			if err != nil {
				return err
			}
			return explain(cmd, asJSON, func(ctx context.Context, pool *pgxpool.Pool) (*timeline.Timeline, error) {
				return timeline.Player(ctx, pool, drivers.New(nil), id, from)
			})
		},
	}
	c.Flags().StringVar(&since, "since", "", "only what happened from then on: 2026-11-01, an RFC 3339 time, 72h or 30d")
	c.Flags().BoolVar(&asJSON, "json", false, "print the timeline as one JSON object")
	return c
}

// parseSince reads --since: "" (everything), a date, an RFC 3339 time, a
// Go duration or a number of days ("30d") before now.
func parseSince(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	if n, ok := strings.CutSuffix(s, "d"); ok {
		if days, err := strconv.Atoi(n); err == nil && days > 0 {
			return now.AddDate(0, 0, -days), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("--since: %q is not a date (2026-11-01), an RFC 3339 time or a duration (72h, 30d)", s)
}

// explain loads one timeline and prints it.
func explain(cmd *cobra.Command, asJSON bool, load func(context.Context, *pgxpool.Pool) (*timeline.Timeline, error)) error {
	return withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool, _ *config.Config) error {
		tl, err := load(ctx, pool)
		if err != nil {
			return err
		}
		if asJSON {
			return json.NewEncoder(cmd.OutOrStdout()).Encode(viewTimeline(tl))
		}
		return tl.WriteText(cmd.OutOrStdout())
	})
}

// The --json shape of billing explain (docs/operations.md, "billing
// explain"): ids as strings, as everywhere in the API.

type timelineJSON struct {
	Subject   subjectJSON `json:"subject"`
	Headline  string      `json:"headline"`
	Verdict   string      `json:"verdict"`
	Attention bool        `json:"attention"`
	PlayerID  int64       `json:"player_id,string,omitempty"`
	Orders    []string    `json:"orders"`
	Lines     []lineJSON  `json:"lines"`
	Notes     []string    `json:"notes,omitempty"`
	AsOf      time.Time   `json:"as_of"`
}

type subjectJSON struct {
	Kind     string     `json:"kind"`
	ID       string     `json:"id"`
	Provider string     `json:"provider,omitempty"`
	Since    *time.Time `json:"since,omitempty"`
}

type lineJSON struct {
	At       time.Time     `json:"at"`
	Layer    string        `json:"layer"`
	Type     string        `json:"type"`
	Text     string        `json:"text"`
	Keys     []keyJSON     `json:"keys,omitempty"`
	Flag     string        `json:"flag,omitempty"`
	Details  []string      `json:"details,omitempty"`
	Refs     refsJSON      `json:"refs"`
	Entries  []entryJSON   `json:"entries,omitempty"`
	Attempts []attemptJSON `json:"attempts,omitempty"`
	RiverUI  string        `json:"river_ui,omitempty"`
	// Delivery lines: the deliveries after the claiming one, the last when.
	Duplicates   int64      `json:"duplicate_deliveries,omitempty"`
	LastDelivery *time.Time `json:"last_delivery_at,omitempty"`
}

type keyJSON struct {
	Kind  string `json:"kind"`
	Value string `json:"value"`
}

type refsJSON struct {
	OrderID       int64  `json:"order_id,string,omitempty"`
	Payment       int64  `json:"payment,string,omitempty"`
	JobID         int64  `json:"job_id,string,omitempty"`
	TransactionID int64  `json:"transaction_id,string,omitempty"`
	PlayerID      int64  `json:"player_id,string,omitempty"`
	Provider      string `json:"provider,omitempty"`
	ProviderID    string `json:"provider_id,omitempty"`
}

type entryJSON struct {
	Account      string `json:"account"`
	Amount       int64  `json:"amount"`
	BalanceAfter *int64 `json:"balance_after,omitempty"`
}

type attemptJSON struct {
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	Error   string    `json:"error"`
}

func viewTimeline(t *timeline.Timeline) timelineJSON {
	v := timelineJSON{Subject: subjectJSON(t.Subject), Headline: t.Headline, Verdict: t.Verdict, Attention: t.Attention,
		PlayerID: t.PlayerID, Orders: []string{}, Lines: make([]lineJSON, len(t.Lines)), Notes: t.Notes, AsOf: t.AsOf}
	for _, id := range t.Orders {
		v.Orders = append(v.Orders, strconv.FormatInt(id, 10))
	}
	for i, l := range t.Lines {
		v.Lines[i] = viewLine(l)
	}
	return v
}

func viewLine(l timeline.Line) lineJSON {
	v := lineJSON{At: l.At, Layer: l.Layer, Type: l.Type, Text: l.Text, Flag: l.Flag, Details: l.Details,
		Refs: refsJSON(l.Refs), RiverUI: l.RiverUI, Duplicates: l.Duplicates, LastDelivery: l.LastDelivery}
	for _, k := range l.Keys {
		v.Keys = append(v.Keys, keyJSON(k))
	}
	for _, e := range l.Entries {
		v.Entries = append(v.Entries, entryJSON(e))
	}
	for _, a := range l.Attempts {
		v.Attempts = append(v.Attempts, attemptJSON(a))
	}
	return v
}
