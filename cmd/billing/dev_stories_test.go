package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// storyDeadline bounds the wait for each story's jobs to run and its
// timeline to show it: about a second on an idle machine.
const storyDeadline = devDeadline

// TestDevStories tells, with the dev tools alone, every story the
// timeline shows, against a running `billing dev` (web and worker), and
// checks each through `billing explain order --json` on the URL dev keeps
// in database.url: charged twice (from the checkout page's Pay again, and
// from send-webhook --second-payment), the unapplied payment then marked
// refunded; a full and a partial refund with their clawbacks; Paddle's
// adjustment; a dispute lost and one won; a duplicate delivery. The banner
// and send-webhook --help point at all of it.
func TestDevStories(t *testing.T) {
	t.Parallel()
	d := startWebhookDev(t)
	banner := d.dev.out.String()
	require.Contains(t, banner, "Pay again")
	require.Contains(t, banner, "dev send-webhook --help")
	help := runBilling(t, nil, "dev", "send-webhook", "--help")
	for _, want := range []string{"--second-payment", "--kind refund --amount 500", "--kind dispute-lost", "--kind dispute-won",
		"paddle --order 9 --kind refund", "--event evt_once", "payments mark-refunded"} {
		require.Contains(t, help, want)
	}
	dbURL, err := os.ReadFile(filepath.Join(d.dir, "database.url"))
	require.NoError(t, err)
	s := stories{d: d, env: []string{"BILLING_DATABASE_URL=" + strings.TrimSpace(string(dbURL))}}

	s.chargedTwiceOnThePage()
	s.chargedTwiceBySendWebhook()
	s.refunds()
	s.disputes()
	s.duplicate()
	d.dev.stop(t, syscall.SIGINT, devDeadline)
}

type stories struct {
	d   *webhookDev
	env []string
}

// explained is what the stories read of `billing explain order --json`.
type explained struct {
	Headline  string `json:"headline"`
	Verdict   string `json:"verdict"`
	Attention bool   `json:"attention"`
	Lines     []struct {
		Type       string `json:"type"`
		Duplicates int64  `json:"duplicate_deliveries"`
		Refs       struct {
			Payment string `json:"payment"`
		} `json:"refs"`
	} `json:"lines"`
}

// explain waits until order's timeline satisfies ok and returns it.
func (s stories) explain(order string, what string, ok func(explained) bool) explained {
	t := s.d.t
	t.Helper()
	for deadline := time.Now().Add(storyDeadline); ; time.Sleep(200 * time.Millisecond) {
		var e explained
		out := runBilling(t, s.env, "explain", "order", order, "--json")
		require.NoError(t, json.Unmarshal([]byte(out), &e), out)
		if ok(e) {
			return e
		}
		if time.Now().After(deadline) {
			t.Fatalf("order %s: want %s within %v; its timeline says %q: %q", order, what, storyDeadline, e.Headline, e.Verdict)
		}
	}
}

// send runs send-webhook and requires it claimed (or, for want, that answer).
func (s stories) send(want string, args ...string) string {
	s.d.t.Helper()
	out, err := s.d.send(args...)
	require.NoError(s.d.t, err, out)
	require.Contains(s.d.t, out, "200 OK\n{\"status\":\""+want+"\"}\n")
	return out
}

// paid is a new order of provider, paid by send-webhook and fulfilled.
func (s stories) paid(provider string) apiOrder {
	o := s.d.api.checkout("mana_1000", provider)
	s.send("claimed", provider, "--order", o.ID)
	require.Equal(s.d.t, "fulfilled", s.d.api.waitOrder(o.ID).Status)
	return o
}

// chargedTwiceOnThePage: Pay, then Pay again, on the simulated checkout
// page; the second payment is unapplied until an operator records its
// refund (no provider API key in dev), then the timeline says refunded.
func (s stories) chargedTwiceOnThePage() {
	t := s.d.t
	o := s.d.api.checkout("mana_1000", "stripe")
	require.Equal(t, http.StatusConflict, s.post(o.ID, "pay-again"), "nothing to pay again before Pay")
	require.Equal(t, http.StatusSeeOther, s.post(o.ID, "pay"))
	require.Equal(t, "fulfilled", s.d.api.waitOrder(o.ID).Status)
	require.Equal(t, http.StatusSeeOther, s.post(o.ID, "pay-again"))
	code, page := get(t, s.d.seed.URL+"/dev/checkout/"+o.ID+"?paid=again", "", "")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, page, "A second, distinct payment was sent")

	e := s.explain(o.ID, "paid twice, the second payment unapplied", func(e explained) bool {
		return e.Headline == "Paid twice" && strings.Contains(e.Verdict, "is NOT refunded yet")
	})
	require.True(t, e.Attention, "an unapplied payment waits for an operator")
	var payment string
	for _, l := range e.Lines {
		if l.Type == "payment_unapplied" {
			payment = l.Refs.Payment
		}
	}
	require.NotEmpty(t, payment, "a payment_unapplied line: %+v", e.Lines)
	runBilling(t, s.env, "payments", "mark-refunded", "--payment", payment, "--refund-id", "re_dev_by_hand")
	e = s.explain(o.ID, "the unapplied payment refunded", func(e explained) bool {
		return strings.Contains(e.Verdict, "minted nothing and was refunded (re_dev_by_hand)")
	})
	require.Equal(t, "Paid twice", e.Headline)
	require.False(t, e.Attention, "nothing left to do: %s", e.Verdict)
	require.Equal(t, 1, s.d.api.purchases(o.ID), "one purchase: the second payment minted nothing")
}

// post POSTs the checkout page's form action and returns the status,
// without following the redirect.
func (s stories) post(order, action string) int {
	t := s.d.t
	t.Helper()
	hc := http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Post(s.d.seed.URL+"/dev/checkout/"+order+"/"+action, "application/x-www-form-urlencoded", nil)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

// chargedTwiceBySendWebhook: --second-payment on a paid Creem order.
func (s stories) chargedTwiceBySendWebhook() {
	o := s.paid("creem")
	out := s.send("claimed", "creem", "--order", o.ID, "--second-payment")
	require.Contains(s.d.t, out, "a second, distinct payment ord_order_"+o.ID+"_again_")
	s.explain(o.ID, "paid twice", func(e explained) bool {
		return e.Headline == "Paid twice" && strings.Contains(e.Verdict, "for the same order minted nothing and is NOT refunded yet")
	})
	require.Equal(s.d.t, 1, s.d.api.purchases(o.ID))
	out, err := s.d.send("creem", "--order", o.ID, "--second-payment", "--kind", "refund")
	require.Error(s.d.t, err, out)
	require.Contains(s.d.t, out, "--second-payment is a payment")
}

// refunds: Stripe in full and in part, Paddle's adjustment; each claws
// its Mana back.
func (s stories) refunds() {
	full := s.paid("stripe")
	s.send("claimed", "stripe", "--order", full.ID, "--kind", "refund")
	s.explain(full.ID, "refunded in full, clawed back", func(e explained) bool {
		return strings.Contains(e.Verdict, "Refunded in full: 9.99 USD of 9.99 USD went back") && strings.Contains(e.Verdict, "Clawed back: ")
	})
	part := s.paid("stripe")
	s.send("claimed", "stripe", "--order", part.ID, "--kind", "refund", "--amount", "500")
	s.explain(part.ID, "refunded in part, clawed back", func(e explained) bool {
		return strings.Contains(e.Verdict, "Refunded in part: 5.00 USD of 9.99 USD went back") && strings.Contains(e.Verdict, "Clawed back: ")
	})
	paddle := s.paid("paddle")
	s.send("claimed", "paddle", "--order", paddle.ID, "--kind", "refund")
	s.explain(paddle.ID, "Paddle's adjustment refunded it, clawed back", func(e explained) bool {
		return strings.Contains(e.Verdict, "Refunded in full: 9.99 USD of 9.99 USD went back") && strings.Contains(e.Verdict, "Clawed back: ")
	})
}

// disputes: one opened then lost, one opened then won.
func (s stories) disputes() {
	for _, end := range []string{"lost", "won"} {
		o := s.paid("stripe")
		s.send("claimed", "stripe", "--order", o.ID, "--kind", "dispute-open")
		s.explain(o.ID, "a dispute open", func(e explained) bool { return strings.Contains(e.Verdict, "and is still open") })
		s.send("claimed", "stripe", "--order", o.ID, "--kind", "dispute-"+end)
		s.explain(o.ID, "the dispute "+end, func(e explained) bool { return strings.Contains(e.Verdict, "and was "+end+" on ") })
	}
}

// duplicate: the same event id twice, claimed once.
func (s stories) duplicate() {
	o := s.d.api.checkout("mana_1000", "stripe")
	event := "evt_dup_" + o.ID
	s.send("claimed", "stripe", "--order", o.ID, "--event", event)
	s.send("duplicate", "stripe", "--order", o.ID, "--event", event)
	e := s.explain(o.ID, "one duplicate delivery", func(e explained) bool {
		return e.Headline == "Paid once" && strings.Contains(e.Verdict, "the 1 duplicate answered without effect")
	})
	var dups int64
	for _, l := range e.Lines {
		if l.Type == "delivery_claimed" {
			dups += l.Duplicates
		}
	}
	require.Equal(s.d.t, int64(1), dups)
	require.Equal(s.d.t, 1, s.d.api.purchases(o.ID))
}
