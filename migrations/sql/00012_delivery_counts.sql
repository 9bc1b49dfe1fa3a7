-- +goose Up
-- A webhook delivery that finds its event already claimed, and an API
-- request that finds its Idempotency-Key already answered, acknowledge
-- what an earlier commit wrote. On a primary with synchronous standbys
-- that earlier commit may have been applied without a standby's
-- confirmation (its wait was cancelled), so the acknowledgement itself
-- must end with a write whose commit waits for the standby: these counts
-- are that write, and they tell how often providers and clients retry.
--
-- duplicate_deliveries: deliveries of the event after the one that
-- claimed it; last_delivery_at: the latest of them (NULL: delivered once).
ALTER TABLE webhook_events
    ADD COLUMN duplicate_deliveries bigint NOT NULL DEFAULT 0,
    ADD COLUMN last_delivery_at timestamptz;
-- replays: answers replayed from the stored response.
ALTER TABLE idempotency_keys
    ADD COLUMN replays bigint NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE idempotency_keys DROP COLUMN replays;
ALTER TABLE webhook_events DROP COLUMN last_delivery_at, DROP COLUMN duplicate_deliveries;
