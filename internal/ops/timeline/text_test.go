package timeline_test

import (
	"context"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/ops/timeline"
	"github.com/fibe-dev/billing/internal/provider"
	"github.com/fibe-dev/billing/internal/provider/providerevents"
)

// hostile is a provider id a signed delivery may carry: intake takes any
// id without NUL, and a terminal would clear the screen, recolour it and
// reverse what follows.
const hostile = "pi_\x1b[2J\x1b[31mred\u009b0m\u202eevil\x7f"

// What the provider chose prints escaped in `billing explain`'s text: no
// control character or bidi override reaches the terminal, and the id
// still reads (Go escapes), while the timeline itself keeps it verbatim
// (the --json output and the page escape it their own way).
func TestTextEscapesProviderIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, "")
	o := e.open(provider.Stripe, "")
	e.pay(o, "evt_first")
	evt := "evt_\x1b]0;owned\x07"
	e.deliverAndWait("stripe", evt, providerevents.PaymentEvent("stripe", evt, hostile, o.ID, o.Amount, o.Currency))

	tl, err := timeline.Payment(ctx, e.pool, registry, "stripe", hostile)
	require.NoError(t, err)
	require.Equal(t, hostile, tl.Subject.ID)
	require.Contains(t, tl.Verdict, hostile, "the timeline keeps the id as sent")

	out := text(t, tl)
	for _, r := range out {
		require.True(t, r == '\n' || unicode.IsPrint(r), "explain's text holds %U:\n%q", r, out)
	}
	require.Contains(t, out, `Payment stripe pi_\x1b[2J\x1b[31mred\u009b0m\u202eevil\x7f`)
	require.Contains(t, out, `evt_\x1b]0;owned\a`)
}
