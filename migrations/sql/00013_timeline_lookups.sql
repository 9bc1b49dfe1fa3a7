-- +goose NO TRANSACTION
-- +goose Up
-- The payment timeline (`billing explain`, the operator page) reads a
-- payment's story by the keys that made each step of it happen once.
-- These are the lookups of it that no index served. Each index is partial
-- where what it finds is a sliver of a large table, so the wallet's
-- posts (daily funding of every Marquee) pay nothing for it.
--
-- Built CONCURRENTLY, outside a transaction: posts, claims and jobs go on
-- while wallet_transactions is read for the two partial indexes. A build
-- cut short leaves an invalid index behind and the migration unrecorded;
-- each index is dropped before it is built, so running the migration
-- again starts that index over. Each build also waits for every
-- transaction older than it in the database to end; a second migrator
-- waiting for this one holds none (Migrate polls for its lock), or the
-- build would wait for it for ever.

-- A payment's reversal steps: every wallet key under payment:<row id>:,
-- read as a byte-wise range (text_pattern_ops), right in any collation.
DROP INDEX CONCURRENTLY IF EXISTS wallet_transactions_payment_key_idx;
CREATE INDEX CONCURRENTLY wallet_transactions_payment_key_idx ON wallet_transactions (idempotency_key text_pattern_ops)
    WHERE idempotency_key LIKE 'payment:%';

-- A player's debt: the legs that open, settle and write it off.
DROP INDEX CONCURRENTLY IF EXISTS wallet_transactions_debt_idx;
CREATE INDEX CONCURRENTLY wallet_transactions_debt_idx ON wallet_transactions (player_id, id)
    WHERE kind IN ('debt', 'debt_settlement', 'debt_write_off');

-- An operator's forgiveness of a player's debt.
DROP INDEX CONCURRENTLY IF EXISTS debt_forgiveness_player_idx;
CREATE INDEX CONCURRENTLY debt_forgiveness_player_idx ON debt_forgiveness (player_id, created_at);

-- A refund or dispute by the provider's id, whatever its events became
-- (a refused or pending one has no fact).
DROP INDEX CONCURRENTLY IF EXISTS reversal_events_reversal_idx;
CREATE INDEX CONCURRENTLY reversal_events_reversal_idx ON reversal_events (provider, reversal_id);

-- An unapplied payment by the provider's id of the refund we issued.
DROP INDEX CONCURRENTLY IF EXISTS payments_refund_idx;
CREATE INDEX CONCURRENTLY payments_refund_idx ON payments (provider, refund_id) WHERE refund_id IS NOT NULL;

-- An order by its provider checkout, paid or not.
DROP INDEX CONCURRENTLY IF EXISTS orders_checkout_id_idx;
CREATE INDEX CONCURRENTLY orders_checkout_id_idx ON orders (provider, checkout_id) WHERE checkout_id IS NOT NULL;

-- A claimed event's job, and a reversal job by the payment it names:
-- River's own index on args is a GIN index, whose lookup of a pair like
-- {"provider": "stripe", "event_id": ...} walks every job of the provider.
-- Partial on the two kinds, so that the funding jobs (tens of thousands
-- each night) never enter them.
DROP INDEX CONCURRENTLY IF EXISTS river_job_event_idx;
CREATE INDEX CONCURRENTLY river_job_event_idx ON river_job ((args ->> 'event_id'), (args ->> 'provider'))
    WHERE kind IN ('fulfill_order', 'reverse_payment');
DROP INDEX CONCURRENTLY IF EXISTS river_job_reversal_payment_idx;
CREATE INDEX CONCURRENTLY river_job_reversal_payment_idx ON river_job ((args ->> 'payment_id'), (args ->> 'provider'))
    WHERE kind = 'reverse_payment';

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS river_job_reversal_payment_idx;
DROP INDEX CONCURRENTLY IF EXISTS river_job_event_idx;
DROP INDEX CONCURRENTLY IF EXISTS orders_checkout_id_idx;
DROP INDEX CONCURRENTLY IF EXISTS payments_refund_idx;
DROP INDEX CONCURRENTLY IF EXISTS reversal_events_reversal_idx;
DROP INDEX CONCURRENTLY IF EXISTS debt_forgiveness_player_idx;
DROP INDEX CONCURRENTLY IF EXISTS wallet_transactions_debt_idx;
DROP INDEX CONCURRENTLY IF EXISTS wallet_transactions_payment_key_idx;
