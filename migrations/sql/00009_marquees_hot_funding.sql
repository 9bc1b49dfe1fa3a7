-- +goose Up
-- Funding writes paid_through, status, last_funding_error, last_funded_at
-- and updated_at of every running Marquee once a service day. With
-- paid_through in the sweep index's INCLUDE list, each of those updates
-- wrote a new entry into all three of the table's indexes. With no index
-- on any column that funding writes, and free room on each page, the
-- update is a HOT update: the new row version stays on its page and no
-- index is touched.
--
-- The sweep now reads paid_through from the row rather than the index;
-- right after a funding round the pages are not all-visible anyway, so
-- the index-only scan was fetching the rows then too.
--
-- fillfactor 40: the sweep enqueues a day's jobs in id order, so one
-- group-committed batch updates every row of a page in one transaction,
-- and each row's new version needs room on that same page before the old
-- ones can be pruned: the free part of a page must hold as much as its
-- live part, plus line pointers. At 50 it falls just short (a test funding
-- 60 new Marquees found 58-59 of them HOT); 40 leaves a margin (60 of
-- 60). The next day's versions fit again once autovacuum has removed the
-- old ones, which it does soon after a funding round (every row of the
-- table left a dead version). It applies to pages filled from now on;
-- existing pages reach it as non-HOT updates move rows off them. Marquees
-- are one row per host, small next to the ledger that gains rows for each
-- of them every day.
DROP INDEX marquees_sweep_idx;
CREATE INDEX marquees_sweep_idx ON marquees (id) WHERE desired_state = 'running';
ALTER TABLE marquees SET (fillfactor = 40);

-- +goose Down
ALTER TABLE marquees RESET (fillfactor);
DROP INDEX marquees_sweep_idx;
CREATE INDEX marquees_sweep_idx ON marquees (id) INCLUDE (paid_through) WHERE desired_state = 'running';
