package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
)

// sendWebhookTimeout bounds each HTTP call of send-webhook.
const sendWebhookTimeout = 15 * time.Second

// defaultDevURL is where send-webhook goes when demo.json names no URL.
const defaultDevURL = "http://127.0.0.1:8080"

type sendWebhookOptions struct {
	order    int64
	event    string
	amount   int64
	hasAmt   bool // --amount given
	currency string
	dir      string
	url      string
	kind     string // payment, refund, dispute-open, dispute-won, dispute-lost
	second   bool   // --second-payment: a new, distinct payment for the order
	asJSON   bool
}

// sendWebhookExamples tell every story the timeline can show, each on
// an order of the demo player (POST /v1/checkouts answers its id).
const sendWebhookExamples = `  # Pay order 7 (a new event id each run: a second run is a second delivery of
  # the same payment, claimed but minting nothing more):
  billing dev send-webhook stripe --order 7
  # A duplicate delivery: the same event id again answers "duplicate".
  billing dev send-webhook stripe --order 7 --event evt_once
  billing dev send-webhook stripe --order 7 --event evt_once
  # Charged twice: a second, distinct payment for the paid order. It mints
  # nothing and is recorded unapplied, to refund; with no provider API key
  # in dev, refund it by hand and record it:
  billing dev send-webhook stripe --order 7 --second-payment
  billing payments list --unapplied
  billing payments mark-refunded --payment <id> --refund-id re_by_hand
  # Refunds: in full, or in part (--amount: the cumulative amount refunded);
  # the Mana is clawed back in proportion.
  billing dev send-webhook stripe --order 7 --kind refund
  billing dev send-webhook stripe --order 8 --kind refund --amount 500
  # Paddle's adjustment (its refund) of a Paddle order:
  billing dev send-webhook paddle --order 9 --kind refund
  # Disputes: opened (the Mana is held back), then lost or won.
  billing dev send-webhook stripe --order 10 --kind dispute-open
  billing dev send-webhook stripe --order 10 --kind dispute-lost
  billing dev send-webhook stripe --order 11 --kind dispute-open
  billing dev send-webhook stripe --order 11 --kind dispute-won
  # What happened, in one timeline (or the Timeline page of the banner):
  billing explain order 7`

func newDevSendWebhookCmd() *cobra.Command {
	var o sendWebhookOptions
	cmd := &cobra.Command{
		Use:   "send-webhook <stripe|paddle|creem> --order ID [--kind K] [--second-payment] [--event EVT] [--amount N] [--currency C] [--json]",
		Short: "Play the provider for the running billing dev: pay, pay twice, refund, dispute, redeliver an order",
		Long: `send-webhook plays the payment provider for a running ` + "`billing dev`" + `: it builds the
provider's completed-payment event for the order, signs it with the secret
billing dev uses (from <dir>/demo.json, or BILLING_<PROVIDER>_WEBHOOK_SECRET
when billing dev was given one), POSTs it to /webhooks/<provider> and prints
the HTTP status and body (--json: one JSON object with the intake's answer).

The amount and currency are the order's snapshot (GET /v1/orders/{id} with
the demo API key); --amount or --currency pay something else, which intake
claims and the fulfillment then rejects. The event id is new on every run;
--event resends a given event, which intake answers "duplicate".
--second-payment pays the order again with another payment (a new provider
payment id, as a customer charged twice): the fulfilment records it
unapplied, to be refunded.

--kind refund sends the provider's refund of the order's payment (--amount:
the cumulative amount refunded, default all of it); dispute-open,
dispute-won and dispute-lost send a dispute (Creem has only dispute-open,
Paddle dispute-lost, its chargeback, and dispute-won, the chargeback's
reversal).

Shell variables: the commands that read the database (payments, explain)
need BILLING_DATABASE_URL, which billing dev's banner prints.`,
		Example:   sendWebhookExamples,
		Args:      cobra.ExactArgs(1),
		ValidArgs: provider.Names(),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.hasAmt, o.currency = cmd.Flags().Changed("amount"), strings.TrimSpace(o.currency)
			return sendDevWebhook(cmd, args[0], o)
		},
	}
	f := cmd.Flags()
	f.Int64Var(&o.order, "order", 0, "the order to pay (required)")
	f.StringVar(&o.event, "event", "", "the provider event id (default: a new random one)")
	f.Int64Var(&o.amount, "amount", 0, "the paid amount in minor units (default: the order's)")
	f.StringVar(&o.currency, "currency", "", "the paid currency (default: the order's)")
	f.StringVar(&o.dir, "dir", ".billing-dev", "the --dir of the running billing dev (holds demo.json)")
	f.StringVar(&o.kind, "kind", "payment", "payment, refund, dispute-open, dispute-won or dispute-lost")
	f.BoolVar(&o.second, "second-payment", false, "pay with a new, distinct provider payment (charged twice); --kind payment only")
	f.StringVar(&o.url, "url", "", "base URL of billing dev (default: the one in demo.json, else "+defaultDevURL+")")
	f.BoolVar(&o.asJSON, "json", false, "print the delivery and its answer as one JSON object")
	_ = cmd.MarkFlagRequired("order")
	return cmd
}

func sendDevWebhook(cmd *cobra.Command, provider string, o sendWebhookOptions) error {
	if err := knownProvider("send-webhook", provider); err != nil {
		return err
	}
	if o.order <= 0 {
		return errors.New("send-webhook: --order wants a positive order id")
	}
	if o.second && o.kind != "payment" && o.kind != "" {
		return fmt.Errorf("send-webhook: --second-payment is a payment; --kind %s is about the order's first one", o.kind)
	}
	seed, base, secret, err := devWebhookTarget(cmd, provider, o)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	amount, currency := o.amount, o.currency
	if !o.hasAmt || currency == "" {
		order, err := fetchDevOrder(ctx, base, seed.APIKey, o.order)
		if err != nil {
			return err
		}
		if !o.hasAmt {
			amount = order.Amount
		}
		if currency == "" {
			currency = order.Currency
		}
	}
	event := o.event
	if event == "" {
		event = "evt_dev_" + randomHex(12)
	}
	body, payment := devEventBody(provider, event, o, amount, currency)
	if body == nil {
		return fmt.Errorf("send-webhook: %s sends no %q event", provider, o.kind)
	}
	header, value, err := providerevents.Sign(provider, secret, body, time.Now())
	if err != nil {
		return err
	}
	target := base + "/webhooks/" + provider
	status, answer, err := devHTTP(ctx, http.MethodPost, target, map[string]string{
		header: value, "Content-Type": "application/json"}, body)
	if err != nil {
		return err
	}
	d := delivery{URL: target, Event: event, Order: o.order, Payment: payment, Amount: amount, Currency: currency, Status: status}
	if err := d.print(cmd.OutOrStdout(), answer, o.asJSON, o.second); err != nil {
		return err
	}
	if status/100 != 2 {
		return exitError{code: 1}
	}
	return nil
}

// devWebhookTarget is where send-webhook delivers and the secret it signs
// with: --url, else the running billing dev's (demo.json), else the
// default; demo.json's secret, else the configuration's first.
func devWebhookTarget(cmd *cobra.Command, provider string, o sendWebhookOptions) (*demoSeed, string, string, error) {
	cfg, err := loadConfig(cmd, false)
	if err != nil {
		return nil, "", "", err
	}
	seed, err := readDemoSeed(o.dir)
	if err != nil {
		return nil, "", "", err
	}
	base := cmp.Or(strings.TrimRight(o.url, "/"), seed.URL, defaultDevURL)
	secret := seed.WebhookSecrets[provider]
	if s := webhookSecrets(cfg)[provider]; secret == "" && len(s) > 0 {
		secret = s[0]
	}
	if secret == "" {
		return nil, "", "", fmt.Errorf("send-webhook: no %s secret: %s holds none (billing dev was given one) and BILLING_%s_WEBHOOK_SECRET is not set here",
			provider, filepath.Join(o.dir, "demo.json"), strings.ToUpper(provider))
	}
	return seed, base, secret, nil
}

// delivery is what send-webhook sent and what intake answered.
type delivery struct {
	URL      string          `json:"url"`
	Event    string          `json:"event"`
	Order    int64           `json:"order,string"`
	Payment  string          `json:"payment"` // the provider payment the event is about
	Amount   int64           `json:"amount"`
	Currency string          `json:"currency"`
	Status   int             `json:"status"`
	Answer   json.RawMessage `json:"answer"`
}

func (d delivery) print(out io.Writer, answer []byte, asJSON, second bool) error {
	if asJSON {
		d.Answer = answer
		if !json.Valid(answer) { // intake answers JSON; anything else is quoted
			d.Answer, _ = json.Marshal(string(answer))
		}
		return json.NewEncoder(out).Encode(d)
	}
	fmt.Fprintf(out, "POST %s: event %s, order %d, %d %s\n", d.URL, d.Event, d.Order, d.Amount, d.Currency)
	_, err := fmt.Fprintf(out, "%d %s\n%s\n", d.Status, http.StatusText(d.Status), strings.TrimSpace(string(answer)))
	if err == nil && second {
		_, err = fmt.Fprintf(out, "a second, distinct payment %s: it mints nothing; see billing explain order %d\n", d.Payment, d.Order)
	}
	return err
}

// devEventBody builds the event o.kind names, and returns the provider
// payment it is about: the order's one payment, or with --second-payment
// a new one. It returns a nil body for a kind the provider does not send.
func devEventBody(provider, event string, o sendWebhookOptions, amount int64, currency string) ([]byte, string) {
	payment := providerevents.OrderPaymentID(provider, strconv.FormatInt(o.order, 10))
	id := "dev_" + strconv.FormatInt(o.order, 10)
	switch o.kind {
	case "", "payment":
		if o.second {
			payment += "_again_" + randomHex(4)
			return providerevents.PaymentEvent(provider, event, payment, o.order, amount, currency), payment
		}
		return providerevents.CompletedEvent(provider, event, o.order, amount, currency), payment
	case "refund":
		return providerevents.ReversalEvent(provider, event, payment, "ch_"+id, fulfillment.ReversalRefund, fulfillment.StateSucceeded,
			amount, currency), payment
	case "dispute-open", "dispute-won", "dispute-lost":
		return providerevents.ReversalEvent(provider, event, payment, "dp_"+id, fulfillment.ReversalDispute,
			strings.TrimPrefix(o.kind, "dispute-"), amount, currency), payment
	}
	return nil, payment
}

func readDemoSeed(dir string) (*demoSeed, error) {
	path := filepath.Join(dir, "demo.json")
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("send-webhook: %s not found: start `billing dev --dir %s` first", path, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("send-webhook: %w", err)
	}
	var seed demoSeed
	if err := json.Unmarshal(b, &seed); err != nil {
		return nil, fmt.Errorf("send-webhook: %s: %w", path, err)
	}
	return &seed, nil
}

// devOrder is the part of GET /v1/orders/{id} send-webhook needs.
type devOrder struct {
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

func fetchDevOrder(ctx context.Context, base, apiKey string, id int64) (*devOrder, error) {
	url := base + "/v1/orders/" + strconv.FormatInt(id, 10)
	status, body, err := devHTTP(ctx, http.MethodGet, url, map[string]string{"Authorization": "Bearer " + apiKey}, nil)
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, fmt.Errorf("send-webhook: GET %s answered %d (an order of the demo player? or pass --amount and --currency): %s",
			url, status, strings.TrimSpace(string(body)))
	}
	var o devOrder
	if err := json.Unmarshal(body, &o); err != nil || o.Currency == "" {
		return nil, fmt.Errorf("send-webhook: GET %s: unexpected answer: %s", url, strings.TrimSpace(string(body)))
	}
	return &o, nil
}

func devHTTP(ctx context.Context, method, url string, headers map[string]string, body []byte) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, sendWebhookTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, fmt.Errorf("send-webhook: %w", err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("send-webhook: is billing dev running? %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("send-webhook: %s %s: %w", method, url, err)
	}
	return resp.StatusCode, b, nil
}
