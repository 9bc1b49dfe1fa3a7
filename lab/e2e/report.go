package e2e

import (
	"fmt"
	"io"
	"strings"
)

// Report is what a run sent, what was acknowledged, what was killed, and
// every check with its verdict.
type Report struct {
	Seed                                                      int64
	Players                                                   int
	SDKCalls, SDKAcked, SDKRetried, SDKReplayed, SDKRefused   int64
	SDKUnknown, Gate402                                       int64
	HooksSent, HooksAcked, HooksDuplicate, HookAttemptsFailed int64
	ProxyForwarded, ProxyDropped                              int64
	WorkerKills, WebKills, PGRestarts, BackendKills           int
	Orders, Fulfilled, Rejected, MarqueesFunded               int
	// ProviderOutages and ProviderRefused: provider API outages injected,
	// and provider calls refused (503) during them.
	ProviderOutages, ProviderRefused int
	// LostWebhooks: payments whose webhook was never sent.
	LostWebhooks int
	// Failover is a failover run's own section (nil otherwise).
	Failover *FailoverReport
	Checks   []Check
}

// Check is one verified property.
type Check struct {
	Name   string
	OK     bool
	Detail string
}

func (r *Run) newReport() *Report {
	m := r.model
	r.faults.mu.Lock()
	defer r.faults.mu.Unlock()
	return &Report{
		Seed: r.opts.Seed, Players: r.opts.Players,
		SDKCalls: m.sdkCalls.Load(), SDKAcked: m.sdkAcked.Load(), SDKRetried: m.sdkRetried.Load(),
		SDKReplayed: m.sdkReplayed.Load(), SDKRefused: m.sdkRefused.Load(), SDKUnknown: m.sdkUnknown.Load(),
		Gate402:   m.gate402.Load(),
		HooksSent: m.hooksSent.Load(), HooksAcked: m.hooksAcked.Load(), HooksDuplicate: m.hooksDup.Load(),
		HookAttemptsFailed: m.hookAttemptsFailed.Load(),
		ProxyForwarded:     r.proxy.forwarded.Load(), ProxyDropped: r.proxy.dropped.Load(),
		WorkerKills: r.faults.workerKills, WebKills: r.faults.webKills, PGRestarts: r.faults.pgRestarts,
		BackendKills:    r.faults.backendKills,
		ProviderOutages: r.faults.providerOutages, ProviderRefused: r.providers.Refused(),
		LostWebhooks: lostHooks(m),
	}
}

func lostHooks(m *model) (n int) {
	m.with(func() { n = len(m.lostHooks) })
	return n
}

func (rep *Report) check(name string, ok bool, detail string) {
	if ok {
		detail = ""
	}
	rep.Checks = append(rep.Checks, Check{Name: name, OK: ok, Detail: detail})
}

// OK is the verdict: every check passed.
func (rep *Report) OK() bool {
	for _, c := range rep.Checks {
		if !c.OK {
			return false
		}
	}
	return len(rep.Checks) > 0
}

// Failed lists the failed checks, one per line with its detail ("" when
// every check passed).
func (rep *Report) Failed() string {
	var b strings.Builder
	for _, c := range rep.Checks {
		if !c.OK {
			fmt.Fprintf(&b, "%s: %s\n", c.Name, strings.ReplaceAll(c.Detail, "\n", " | "))
		}
	}
	return b.String()
}

// Print writes the table.
func (rep *Report) Print(w io.Writer) {
	row := func(k string, v any) { fmt.Fprintf(w, "  %-44s %v\n", k, v) }
	fmt.Fprintf(w, "chaos report (seed %d, %d players)\n", rep.Seed, rep.Players)
	row("SDK calls (acked / refused / unknown)", fmt.Sprintf("%d (%d / %d / %d)", rep.SDKCalls, rep.SDKAcked, rep.SDKRefused, rep.SDKUnknown))
	row("SDK calls retried / answered as replays", fmt.Sprintf("%d / %d", rep.SDKRetried, rep.SDKReplayed))
	row("responses dropped after commit by the proxy", fmt.Sprintf("%d of %d", rep.ProxyDropped, rep.ProxyForwarded))
	row("402 not-funded answers", rep.Gate402)
	row("webhook copies sent / acked / duplicate", fmt.Sprintf("%d / %d / %d", rep.HooksSent, rep.HooksAcked, rep.HooksDuplicate))
	row("webhook attempts failed and redelivered", rep.HookAttemptsFailed)
	row("orders (fulfilled / rejected)", fmt.Sprintf("%d (%d / %d)", rep.Orders, rep.Fulfilled, rep.Rejected))
	row("Marquees funded", rep.MarqueesFunded)
	row("kill -9: workers / web; PostgreSQL restarts", fmt.Sprintf("%d / %d; %d", rep.WorkerKills, rep.WebKills, rep.PGRestarts))
	row("database sessions terminated mid-flight", rep.BackendKills)
	row("payments whose webhook was lost", rep.LostWebhooks)
	row("provider outages / provider calls refused", fmt.Sprintf("%d / %d", rep.ProviderOutages, rep.ProviderRefused))
	if rep.Failover != nil {
		rep.Failover.print(w)
	}
	passed := 0
	for _, c := range rep.Checks {
		if c.OK {
			passed++
		}
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "  [%s] %s", mark, c.Name)
		if c.Detail != "" {
			fmt.Fprintf(w, ": %s", strings.ReplaceAll(c.Detail, "\n", " | "))
		}
		fmt.Fprintln(w)
	}
	verdict := "PASS"
	if !rep.OK() {
		verdict = "FAIL"
	}
	fmt.Fprintf(w, "%d passed, %d failed (seed %d)\n", passed, len(rep.Checks)-passed, rep.Seed)
	fmt.Fprintf(w, "verdict: %s\n", verdict)
}
