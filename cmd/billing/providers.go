package main

import (
	"fmt"
	"strings"

	"github.com/fibe-dev/billing/config"
	"github.com/fibe-dev/billing/internal/provider"
)

// webhookSecrets are cfg's webhook signing secrets by provider: what
// `billing dev` signs the deliveries it plays with.
func webhookSecrets(cfg *config.Config) map[string][]string {
	out := map[string][]string{}
	for name, o := range cfg.Providers {
		out[name] = o.WebhookSecrets
	}
	return out
}

// knownProvider refuses, for command, a provider name billing does not
// support.
func knownProvider(command, name string) error {
	if provider.Known(name) {
		return nil
	}
	return fmt.Errorf("%s: unknown provider %q (want one of %s)", command, name, strings.Join(provider.Names(), ", "))
}
