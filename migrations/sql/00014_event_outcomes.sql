-- +goose Up
-- Invariant 11: a claimed provider event ends in exactly one recorded
-- outcome, stored on its claim (one row per (provider, event_id) already):
--
--   NULL      its job has not decided yet (it must have a live River job);
--   applied   it made something: outcome_ref names it (a wallet
--             transaction, a payment, a refund or dispute fact);
--   refused   it changes nothing: outcome_reason says why (a payload the
--             driver cannot apply, an order that does not exist, a
--             mismatched payment, a refund or dispute refused against its
--             payment, an operator's close);
--   ignored   a type we only acknowledge, recorded at claim time;
--   waiting   a refund or dispute whose payment is not known yet: it turns
--             applied or refused when the payment's job decides it, or
--             refused after its grace period (`payments decide-pending`).
--
-- payment_ref is the provider payment id a refund or dispute names, kept
-- also for an event refused at intake, so the payment's timeline shows it.
ALTER TABLE webhook_events
    ADD COLUMN outcome        text CHECK (outcome IN ('applied', 'refused', 'ignored', 'waiting')),
    ADD COLUMN outcome_ref    text,
    ADD COLUMN outcome_reason text,
    ADD COLUMN outcome_at     timestamptz,
    ADD COLUMN payment_ref    text,
    ADD CONSTRAINT webhook_events_outcome_at CHECK ((outcome IS NULL) = (outcome_at IS NULL)),
    ADD CONSTRAINT webhook_events_refused_reason CHECK (outcome <> 'refused' OR outcome_reason IS NOT NULL);

-- What is known of the events claimed before outcomes were recorded. The
-- rest stay NULL: `billing webhooks redrive --all` re-drives them from
-- their stored payload, and each ends with its outcome (the workers are
-- idempotent: a payment or a reversal already recorded is not applied twice).
UPDATE webhook_events w SET outcome = CASE e.status WHEN 'accepted' THEN 'applied' WHEN 'refused' THEN 'refused'
        ELSE 'waiting' END,
    outcome_ref = CASE WHEN e.status = 'accepted' THEN 'fact:' || e.reversal_id END,
    outcome_reason = e.reason, outcome_at = coalesce(e.decided_at, e.received_at), payment_ref = e.payment_ref
FROM reversal_events e WHERE e.provider = w.provider AND e.event_id = w.event_id;
UPDATE webhook_events w SET outcome = 'applied', outcome_ref = 'payment:' || p.id, outcome_at = p.created_at
FROM payments p WHERE p.provider = w.provider AND p.event_id = w.event_id AND w.outcome IS NULL;

-- The events whose outcome is still open, for `ledger verify` and
-- `webhooks redrive`; and the refused ones, for `webhooks list`.
CREATE INDEX webhook_events_open_idx ON webhook_events (claimed_at) WHERE outcome IS NULL OR outcome = 'waiting';
CREATE INDEX webhook_events_refused_idx ON webhook_events (outcome_at) WHERE outcome = 'refused';
CREATE INDEX webhook_events_payment_ref_idx ON webhook_events (provider, payment_ref) WHERE payment_ref IS NOT NULL;

-- +goose Down
DROP INDEX webhook_events_payment_ref_idx;
DROP INDEX webhook_events_refused_idx;
DROP INDEX webhook_events_open_idx;
ALTER TABLE webhook_events DROP CONSTRAINT webhook_events_refused_reason, DROP CONSTRAINT webhook_events_outcome_at,
    DROP COLUMN payment_ref, DROP COLUMN outcome_at, DROP COLUMN outcome_reason, DROP COLUMN outcome_ref,
    DROP COLUMN outcome;
