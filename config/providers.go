package config

import "github.com/fibe-dev/billing/internal/provider"

// ProviderOptions are the payment-provider drivers' options of c, by
// provider name: each one's API key, API URL and webhook signing secrets.
func (c *Config) ProviderOptions() map[string]provider.Options {
	return map[string]provider.Options{
		provider.Stripe: {APIKey: c.StripeSecretKey, APIURL: c.StripeAPIURL, WebhookSecrets: c.StripeSecrets},
		provider.Paddle: {APIKey: c.PaddleAPIKey, APIURL: c.PaddleAPIURL, WebhookSecrets: c.PaddleSecrets},
		provider.Creem:  {APIKey: c.CreemAPIKey, APIURL: c.CreemAPIURL, WebhookSecrets: c.CreemSecrets},
	}
}
