// Package fulfillmenttest starts what tests of the payment path share: a
// real River client working fulfill_order and reverse_payment jobs.
package fulfillmenttest

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/fibe-dev/billing/fulfillment"
	"github.com/fibe-dev/billing/internal/kit/testkit"
	"github.com/fibe-dev/billing/wallet"
)

// StartRiver starts a River client that works fulfill_order and
// reverse_payment jobs on pool with opts (refunders, clock, wallet; Pool
// and a silent Logger are set here, and a wallet store over pool when opts
// has none), polling fast, and stops it when the test ends, before the
// pool closes. testkit.Jobs(client) watches its jobs.
func StartRiver(t testing.TB, pool *pgxpool.Pool, opts fulfillment.WorkerOptions) *river.Client[pgx.Tx] {
	t.Helper()
	opts.Pool, opts.Logger = pool, testkit.Quiet
	if opts.Wallet == nil {
		opts.Wallet = wallet.New(pool, wallet.Options{})
	}
	workers := river.NewWorkers()
	fulfillment.Register(workers, opts)
	client, _ := testkit.StartRiver(t, pool, testkit.RiverOptions{Workers: workers})
	return client
}
