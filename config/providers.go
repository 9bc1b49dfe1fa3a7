package config

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/spf13/viper"

	"github.com/fibe-dev/billing/internal/provider"
)

// This file reads what the providers' facts declare (provider.Settings):
// config spells no provider's key, so adding a provider adds none here.

// setProviderDefaults sets each provider's API URL key's default.
func setProviderDefaults(v *viper.Viper, providers []provider.Facts) {
	for _, f := range providers {
		if s := f.Settings; s.APIURL != "" && s.APIURLDefault != "" {
			v.SetDefault(s.APIURL, s.APIURLDefault)
		}
	}
}

// providerKeys are the providers' configuration keys, in their order.
func providerKeys(providers []provider.Facts) []string {
	var keys []string
	for _, f := range providers {
		keys = append(keys, f.Settings.Keys()...)
	}
	return keys
}

// decodeProviderSettings reads each provider's options from its keys:
// its webhook signing secrets (a comma-separated list), its API key and
// its API's base URL, which must be an http(s) URL.
func (c *Config) decodeProviderSettings(v *viper.Viper, providers []provider.Facts) error {
	c.Providers = make(map[string]provider.Options, len(providers))
	for _, f := range providers {
		s, o := f.Settings, provider.Options{}
		if s.WebhookSecret != "" {
			o.WebhookSecrets = splitList(v.GetString(s.WebhookSecret))
		}
		if s.APIKey != "" {
			o.APIKey = strings.TrimSpace(v.GetString(s.APIKey))
		}
		if s.APIURL != "" {
			var err error
			if o.APIURL, err = httpURL(s.APIURL, s.BaseURL(v.GetString(s.APIURL))); err != nil {
				return err
			}
		}
		c.Providers[f.Name] = o
	}
	return nil
}

// catalogueIDs are SKU name's ids in the providers' catalogues, each
// under its provider's key (nil: none).
func catalogueIDs(v *viper.Viper, name string, providers []provider.Facts) (map[string]string, error) {
	entry, _ := v.GetStringMap(KeySKUs)[name].(map[string]any)
	var ids map[string]string
	for _, f := range providers {
		key := f.Settings.CatalogueID
		val, ok := entry[key]
		if key == "" || !ok || val == nil {
			continue
		}
		switch reflect.ValueOf(val).Kind() {
		case reflect.Map, reflect.Slice, reflect.Array, reflect.Struct:
			return nil, &Error{Key: KeySKUs + "." + name + "." + key, Err: fmt.Errorf("want a %s id, got %v", f.Name, val)}
		}
		if id := fmt.Sprint(val); id != "" {
			if ids == nil {
				ids = map[string]string{}
			}
			ids[f.Name] = id
		}
	}
	return ids, nil
}
