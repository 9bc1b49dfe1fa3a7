package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fibe-dev/billing/config"
	"github.com/fibe-dev/billing/enforcer"
	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/domain/players"
	"github.com/fibe-dev/billing/internal/payments/webhook"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/drivers"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
	"github.com/fibe-dev/billing/internal/provider/stripe/stripeevents"
	"github.com/fibe-dev/billing/jobs"
	"github.com/fibe-dev/billing/wallet"
)

// demoSeed is what billing dev creates once and keeps in <dir>/demo.json, so
// a restart prints the same working API key (only its hash is in the
// database) and the same demo Marquee and order.
type demoSeed struct {
	PlayerID  int64  `json:"player_id,string"`
	APIKey    string `json:"api_key"`
	OrderID   int64  `json:"order_id,string,omitempty"`
	MarqueeID int64  `json:"marquee_id,string,omitempty"`
	// URL is where the running billing dev listens, and WebhookSecrets the
	// signing secret it made for each provider with none configured: what
	// `billing dev send-webhook` needs to reach it with a valid signature.
	URL            string            `json:"url,omitempty"`
	WebhookSecrets map[string]string `json:"webhook_secrets,omitempty"`
}

// demo order: the larger pack, so the Marquee has Sparks for many days.
const (
	demoSKU      = "mana_5000"
	demoConvert  = 1000 // Mana converted to Sparks for the Marquee
	seedDeadline = 30 * time.Second
)

// loadDemo reads the seed kept in <dir>/demo.json; a new one when there is
// none or it belongs to another database.
func loadDemo(ctx context.Context, pool *pgxpool.Pool, dir string) (*demoSeed, error) {
	var seed demoSeed
	if b, err := os.ReadFile(filepath.Join(dir, "demo.json")); err == nil && json.Unmarshal(b, &seed) == nil {
		if id, err := players.Authenticate(ctx, pool, seed.APIKey); err != nil || id != seed.PlayerID {
			seed = demoSeed{} // another database: start over
		}
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return &seed, nil
}

// seed creates what the demo lacks (the player, its paid order and funded
// Marquee) through a, records addr, the address billing dev listens on,
// and keeps the seed in <dir>/demo.json.
func (s *demoSeed) seed(ctx context.Context, a *app, dir, addr string) error {
	if s.PlayerID == 0 {
		p, key, err := players.Create(ctx, a.pool, "demo")
		if err != nil {
			return fmt.Errorf("seed demo player: %w", err)
		}
		*s = demoSeed{PlayerID: p.ID, APIKey: key, WebhookSecrets: s.WebhookSecrets}
	}
	if s.OrderID == 0 || s.MarqueeID == 0 {
		ctx, cancel := context.WithTimeout(ctx, seedDeadline)
		defer cancel()
		if err := s.seedMoney(ctx, a); err != nil {
			return fmt.Errorf("seed demo: %w", err)
		}
	}
	s.URL = devURL(addr)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(s, "", "  ")
	return os.WriteFile(filepath.Join(dir, "demo.json"), b, 0o600)
}

// seedMoney goes the way real money does: a checkout, a signed provider
// webhook through the real intake, the fulfillment job minting Mana, a
// conversion to Sparks, and a funded Marquee.
func (s *demoSeed) seedMoney(ctx context.Context, a *app) error {
	logger := slog.New(slog.DiscardHandler)
	workers, _ := registry(a.jobsDeps(logger))
	client, err := jobs.NewClient(a.pool, jobs.Options{Logger: logger, Workers: workers, ID: "billing-dev-seed",
		FetchPollInterval: 100 * time.Millisecond})
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	defer func() { _ = jobs.Stop(context.WithoutCancel(ctx), client, 5*time.Second) }()
	order, err := s.paidOrder(ctx, a, client)
	if err != nil {
		return err
	}
	s.OrderID = order.ID
	return s.fundedMarquee(ctx, a)
}

// paidOrder checks out the demo SKU, delivers a signed Stripe
// checkout.session.completed to the webhook intake (in process, with a
// secret made for this seed), and waits for the fulfillment to mint the Mana.
func (s *demoSeed) paidOrder(ctx context.Context, a *app, client *jobs.Client) (*fulfillment.Order, error) {
	pool := a.pool
	order, err := fulfillment.CreateCheckout(ctx, pool, skus(a.cfg), fulfillment.CheckoutParams{
		PlayerID: s.PlayerID, SKU: demoSKU, Provider: provider.Stripe})
	if err != nil {
		return nil, err
	}
	secret := "whsec_dev_" + randomHex(16)
	intake := webhook.NewHandler(webhook.Options{Pool: pool, River: client,
		Providers: provider.Select[webhook.Intake](drivers.New(map[string]provider.Options{
			provider.Stripe: {WebhookSecrets: []string{secret}}})), Logger: slog.New(slog.DiscardHandler)})
	body := providerevents.CompletedEvent(provider.Stripe, fmt.Sprintf("evt_demo_%d", order.ID), order.ID, order.Amount, order.Currency)
	header, value := stripeevents.Sign(secret, body, time.Now())
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/webhooks/stripe", bytes.NewReader(body))
	req.Header.Set(header, value)
	req.SetPathValue("provider", provider.Stripe)
	rec := httptest.NewRecorder()
	intake.ServeHTTP(rec, req)
	if rec.Code/100 != 2 {
		return nil, fmt.Errorf("demo webhook answered %d: %s", rec.Code, rec.Body.String())
	}
	for {
		o, err := fulfillment.GetOrder(ctx, pool, s.PlayerID, order.ID)
		if err != nil {
			return nil, err
		}
		if o.Status != fulfillment.StatusPending {
			if o.Status != fulfillment.StatusFulfilled {
				return nil, fmt.Errorf("demo order %d: %s %s", o.ID, o.Status, o.Reason)
			}
			return o, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("demo order %d not fulfilled: %w", o.ID, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// fundedMarquee converts some of the demo Mana and funds a new Marquee for
// today (the enforcer keeps funding it daily while Sparks last).
func (s *demoSeed) fundedMarquee(ctx context.Context, a *app) error {
	if _, err := a.wallet.Convert(ctx, wallet.ConvertParams{PlayerID: s.PlayerID, Mana: demoConvert,
		IdempotencyKey: wallet.CallerKey(fmt.Sprintf("demo:%d:conversion", s.PlayerID))}); err != nil {
		return err
	}
	plans, plan := plans(a.cfg), "standard"
	if _, ok := plans[plan]; !ok {
		for name := range plans {
			plan = name
			break
		}
	}
	m, err := enforcer.CreateMarquee(ctx, a.pool, plans, enforcer.CreateParams{PlayerID: s.PlayerID, Name: "demo", Plan: plan})
	if err != nil {
		return err
	}
	now := time.Now()
	svc := enforcer.New(a.pool, a.wallet, enforcer.Options{TZ: a.cfg.ServiceDayTZ, Logger: slog.New(slog.DiscardHandler)})
	res, err := svc.FundDay(ctx, enforcer.FundDayArgs{MarqueeID: m.ID, Day: enforcer.ServiceDay(now, a.cfg.ServiceDayTZ)})
	if err != nil {
		return err
	}
	if res.Outcome != enforcer.OutcomeFunded && res.Outcome != enforcer.OutcomeAlreadyPaid {
		return fmt.Errorf("demo marquee %d: %s", m.ID, res.Outcome)
	}
	s.MarqueeID = m.ID
	return nil
}

// useDevSecrets gives every provider without a configured webhook secret
// a dev one, made once and kept in demo.json, and drops the kept one of a
// provider that has a configured secret: demo.json lists exactly the
// secrets billing dev made and uses.
func (s *demoSeed) useDevSecrets(cfg *config.Config) {
	if s.WebhookSecrets == nil {
		s.WebhookSecrets = map[string]string{}
	}
	for name, opts := range cfg.Providers {
		if len(opts.WebhookSecrets) > 0 {
			delete(s.WebhookSecrets, name)
			continue
		}
		if s.WebhookSecrets[name] == "" {
			s.WebhookSecrets[name] = "whsec_dev_" + randomHex(16)
		}
		opts.WebhookSecrets = []string{s.WebhookSecrets[name]}
		cfg.Providers[name] = opts
	}
}

// devURL is the base URL that reaches a listener on addr from this machine.
func devURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

func (s *demoSeed) print(w io.Writer, base string) {
	auth := fmt.Sprintf("-H 'Authorization: Bearer %s'", s.APIKey)
	fmt.Fprintf(w, `
Demo player %[1]d, API key:
  %[2]s
Demo Marquee %[3]d (funded today), demo order %[4]d (%[7]s, paid by a signed Stripe webhook).
Try:
  curl -sS %[5]s %[6]s/v1/wallets
  curl -sS %[5]s %[6]s/v1/marquees/%[3]d
  curl -sS %[5]s %[6]s/v1/orders/%[4]d
  curl -sS %[5]s %[6]s/v1/wallets/mana/transactions
  curl -sS %[5]s -H 'Content-Type: application/json' -H "Idempotency-Key: $(openssl rand -hex 16)" -d '{"mana":100}' %[6]s/v1/conversions
  REQ=$(curl -sS %[5]s -H 'Content-Type: application/json' -H "Idempotency-Key: $(openssl rand -hex 16)" -d '{"name":"hello"}' %[6]s/v1/marquees/%[3]d/playgrounds | sed -E 's/.*"request_id":"([0-9]+)".*/\1/'); sleep 2; curl -sS %[5]s %[6]s/v1/requests/$REQ
`, s.PlayerID, s.APIKey, s.MarqueeID, s.OrderID, auth, base, demoSKU)
}

// sdkHeader starts the SDK section of the banner; the program follows the
// setup lines, up to its closing brace.
const sdkHeader = "Go SDK (package " + modulePath + "/fibe): in a new directory,"

// printSDK prints a complete Go program against this dev and the commands
// that build it, requiring the SDK's module from the clone at root ("" when
// dev does not run from a clone: a placeholder to fill in).
func (s *demoSeed) printSDK(w io.Writer, base, root string) {
	if root == "" {
		root = "/path/to/your/billing/clone"
	}
	fmt.Fprintf(w, `
%[1]s
  go mod init fibe-demo
  go mod edit -require=%[2]s@v0.0.0 -replace=%[2]s=%[3]s
save this program as main.go, then
  go run .

package main

import (
	"context"
	"fmt"
	"log"

	"%[2]s/fibe"
)

func main() {
	client := fibe.NewClient(%[4]q, %[5]q)
	ctx := context.Background()
	accepted, err := client.Playgrounds.Create(ctx, "%[6]d", fibe.PlaygroundParams{Name: "hello"})
	if err != nil {
		log.Fatal(err)
	}
	req, err := client.Requests.Wait(ctx, accepted.RequestID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(accepted.PlaygroundID, req.Status)
}
`, sdkHeader, modulePath, shellQuote(root), base, s.APIKey, s.MarqueeID)
}
