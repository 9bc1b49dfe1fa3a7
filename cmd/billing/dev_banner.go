package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/fibe-dev/billing/config"
	"github.com/fibe-dev/billing/internal/dev/devcheckout"
)

// modulePath is this repository's Go module, which the SDK snippet requires.
const modulePath = "github.com/fibe-dev/billing"

// devBanner is what billing dev prints once it is up.
type devBanner struct {
	cfg     *config.Config
	api     string // base URL of the API listener
	addr    string // the listener's address as bound
	metrics string
	dir     string
	urlFile string // <dir>/database.url, "" for a database dev did not start
	seed    *demoSeed
	more    func(io.Writer) // what a mode adds (dev --ha), after the rest
}

func (b *devBanner) print(w io.Writer) {
	fmt.Fprintf(w, `
billing dev is running.
  API        %[1]s/v1   (an index: the API document, the River UI, the docs)
  API doc    %[1]s/v1/openapi.json
  River UI   %[1]s/riverui/queues   (user %[2]s, password %[3]s)
  Timeline   %[1]s/timeline/   (what happened to a payment: search any id; same credentials)
  Events     %[1]s/dev/events/   (the events billing sent to dev's own endpoint, each verified with the SDK)
  Metrics    %[4]s/metrics
  Health     %[1]s/healthz
  Listening  %[5]s
  Database   %[6]s
`, b.api, b.cfg.RiverUIUser, b.cfg.RiverUIPassword, b.metrics, b.listening(), redactURL(b.cfg.DatabaseURL))
	if b.urlFile != "" {
		fmt.Fprintf(w, `Point the other commands (billing ledger verify, payments list, debts list, ...)
at this database; the URL is also in %s:
  export BILLING_DATABASE_URL=%s
`, b.urlFile, shellQuote(b.cfg.DatabaseURL))
	}
	fmt.Fprintf(w, `Buy in a browser: POST /v1/checkouts answers a checkout_url; for a provider
without an API key it is a simulated page here (%s%s<order>)
whose Pay button sends the provider's signed webhook to this server; a paid
order's page has Pay again (a second, distinct payment: charged twice).
Every story the Timeline shows (charged twice, refunds in full and in part,
disputes lost and won, Paddle's refund, a duplicate delivery) has an example
in: go run ./cmd/billing dev send-webhook --help
`, b.api, devcheckout.Path)
	b.seed.print(w, b.api)
	b.seed.printSDK(w, b.api, moduleRoot())
	if b.more != nil {
		b.more(w)
	}
	fmt.Fprintln(w, "\nCtrl-C stops everything.")
}

// listening says who can reach the API: loopback only (the default), or
// every interface, which exposes the simulated checkout.
func (b *devBanner) listening() string {
	host, port, _ := net.SplitHostPort(b.addr)
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return fmt.Sprintf("on loopback only (%s); BILLING_HTTP_ADDR=0.0.0.0:%s or --http-addr listens on every interface", b.addr, port)
	}
	return fmt.Sprintf("on %s, reachable from other machines: its simulated checkout mints Mana without a payment "+
		"(the default, %s, is loopback only)", b.addr, config.DevHTTPAddr)
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// moduleRoot is the directory of this repository's go.mod, found from the
// working directory up (where `go run ./cmd/billing dev` runs), or "".
func moduleRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if isBillingModule(filepath.Join(dir, "go.mod")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

func isBillingModule(gomod string) bool {
	f, err := os.Open(gomod)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(line, "module ") {
			return strings.TrimSpace(strings.TrimPrefix(line, "module ")) == modulePath
		}
	}
	return false
}
