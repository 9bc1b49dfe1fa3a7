package enforcer

// Plan is a Marquee plan: its price per service day in Sparks.
// billing.yaml's plans parse into it (package config); a Marquee copies
// the price at creation.
type Plan struct {
	DailySparks int64 `mapstructure:"daily_sparks"`
}

// DefaultPlans is the built-in plan catalogue, used when billing.yaml
// defines none.
func DefaultPlans() map[string]Plan {
	return map[string]Plan{"standard": {DailySparks: 100}}
}
