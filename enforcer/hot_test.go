package enforcer_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/enforcer"
)

// fundingWrites are the Marquee columns a funding writes (recordFunding).
var fundingWrites = []string{"paid_through", "status", "last_funding_error", "last_funded_at", "updated_at"}

// TestNoIndexCoversWhatFundingWrites: funding's daily update of every
// running Marquee can only be a HOT update (no index entry written) while
// no index of the table names a column it writes, in its key, its INCLUDE
// list or its predicate, and the pages keep room for the new versions.
func TestNoIndexCoversWhatFundingWrites(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, utc, time.Date(2024, 3, 10, 9, 30, 0, 0, utc))
	rows, err := e.pool.Query(e.ctx, `SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = 'marquees'::regclass`)
	require.NoError(t, err)
	defs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Len(t, defs, 3, "primary key, owner, sweep")
	for _, def := range defs {
		for _, col := range fundingWrites {
			require.NotContains(t, def, col)
		}
	}
	var opts []string
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = 'marquees'::regclass`).Scan(&opts))
	require.Contains(t, opts, "fillfactor=40")
}

// TestDailyFundingIsHOT funds 60 new Marquees (more than a page's worth)
// for a day the way the sweep enqueues them, in id order and
// group-committed, and reads each one's row version off its heap page
// (pageinspect): every one is a heap-only tuple, so the funding wrote no
// index entry. It takes the fillfactor's room: a batch updates every row
// of a page in one transaction, so the page must hold a second version of
// each. The next day's versions fit again once the day's old ones are
// gone: autovacuum takes the table soon after a funding round, every row
// of which left a dead version, far over its 20% threshold. That step is
// PostgreSQL's and is not timed here.
func TestDailyFundingIsHOT(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 20, utc, time.Date(2024, 3, 10, 9, 30, 0, 0, utc))
	_, err := e.pool.Exec(e.ctx, `CREATE EXTENSION IF NOT EXISTS pageinspect`)
	require.NoError(t, err)
	owner := e.player(1_000_000)
	var ids []int64
	var params []river.InsertManyParams
	for range 60 {
		id := e.marquee(owner).ID
		ids = append(ids, id)
		params = append(params, river.InsertManyParams{Args: enforcer.FundDayArgs{MarqueeID: id, Day: "2024-03-10"}})
	}
	worker := e.client(clientOpts{id: "w", svc: e.svc, maxWorkers: 64})
	_, err = worker.InsertMany(e.ctx, params)
	require.NoError(t, err)
	e.waitIdle(30 * time.Second)
	require.Equal(t, int64(60), e.count(`SELECT count(*) FROM wallet_transactions WHERE kind = 'funding'`))
	require.Equal(t, int64(60), e.count(`SELECT count(*) FROM marquees WHERE paid_through = '2024-03-11T00:00:00Z'`))

	var hot, all int64
	require.NoError(t, e.pool.QueryRow(e.ctx, `
		SELECT count(*) FILTER (WHERE h.t_infomask2 & 32768 <> 0), count(*)  -- HEAP_ONLY_TUPLE
		FROM marquees m,
		     LATERAL heap_page_items(get_raw_page('marquees', (m.ctid::text::point)[0]::int)) h
		WHERE m.id = ANY($1) AND h.lp = (m.ctid::text::point)[1]::int`, ids).Scan(&hot, &all))
	require.Equal(t, int64(60), all)
	require.Equal(t, all, hot, "every Marquee's funding is a HOT update")
}
