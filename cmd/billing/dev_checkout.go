package main

import (
	"log/slog"
	"net/http"

	"github.com/fibe-dev/billing/internal/dev/devcheckout"
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
