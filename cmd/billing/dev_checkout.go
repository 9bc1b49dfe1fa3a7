package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/fibe-dev/billing/internal/dev/devcheckout"
	"github.com/fibe-dev/billing/internal/dev/devreceiver"
	"github.com/fibe-dev/billing/internal/events"
	"github.com/fibe-dev/billing/internal/payments/checkout"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/web/httpapi"
)

// withDevCheckout is opts with `billing dev`'s simulated checkout: a
// provider without an API key opens the simulated page at baseURL (package
// devcheckout), which is served beside the API. Only billing dev calls it.
func withDevCheckout(a *app, opts httpapi.Options, baseURL string, logger *slog.Logger) httpapi.Options {
	openers := devcheckout.WithSimulated(provider.Select[checkout.Opener](a.providers), provider.Names(), baseURL)
	opts.Checkouts = a.checkouts(openers, logger)
	opts.Pages = map[string]http.Handler{devcheckout.Path: devcheckout.Handler(devcheckout.Options{Pool: a.pool,
		BaseURL: baseURL, Secrets: webhookSecrets(a.cfg), Logger: logger})}
	return opts
}

// withDevEvents is opts with `billing dev`'s own endpoint for the events
// billing sends: registered (once per URL) for every event type at
// baseURL's devreceiver.Path, and served beside the API, where it verifies
// each delivery with the SDK under the secrets billing signs with and
// lists what it received. Only billing dev calls it.
func withDevEvents(ctx context.Context, a *app, opts httpapi.Options, baseURL string, logger *slog.Logger) (httpapi.Options, error) {
	url := baseURL + devreceiver.Path
	if _, err := events.AddEndpoint(ctx, a.pool, url, nil); err != nil {
		return opts, fmt.Errorf("dev: register the events endpoint: %w", err)
	}
	secrets, err := events.Secrets(ctx, a.pool, url)
	if err != nil {
		return opts, err
	}
	recv, err := devreceiver.New(devreceiver.Options{Secrets: secrets, Logger: logger})
	if err != nil {
		return opts, err
	}
	if opts.Pages == nil {
		opts.Pages = map[string]http.Handler{}
	}
	opts.Pages[devreceiver.Path] = recv
	return opts, nil
}
