package enforcer

// Plan is a Marquee plan: its price per service day in Sparks.
// cmd/billing makes billing.yaml's plans into Plans; a Marquee copies the
// price at creation.
type Plan struct {
	DailySparks int64
}

// DefaultPlans is the built-in plan catalogue, used when billing.yaml
// defines none.
func DefaultPlans() map[string]Plan {
	return map[string]Plan{"standard": {DailySparks: 100}}
}
