-- +goose Up
-- Outgoing signed events (docs/decisions/0018-events-we-send.md).
--
--   events             one row per effect billing reports, written in the
--                      effect's own transaction. id is derived from the
--                      effect's idempotency key, so a replay of the effect
--                      writes nothing (ON CONFLICT (id) DO NOTHING).
--   event_sequences    a per-player counter, bumped in the effect's
--                      transaction: events of one player carry strictly
--                      increasing sequences (gaps allowed).
--   event_endpoints    where events are sent, with their whsec_ secret and,
--                      while a secret rotates, the previous one until its
--                      grace ends. UNIQUE(url): adding is idempotent.
--   event_deliveries   one row per (event, endpoint) delivery job; a resend
--                      is a new row under the same event.
--   event_attempts     every HTTP attempt of a delivery.
--   low_balance_state  per player, whether the last Sparks movement left
--                      the balance below the threshold, so one crossing
--                      makes one wallet.low_balance.
--   events_epoch       when events began: the audit asks effects committed
--                      after it for their event, not older ones.
CREATE TABLE events (
    id         text PRIMARY KEY CHECK (id ~ '^evt_[0-9a-f]{32}$'),
    type       text NOT NULL CHECK (length(type) <= 64),
    player_id  bigint NOT NULL,
    sequence   bigint NOT NULL CHECK (sequence > 0),
    payload    jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (player_id, sequence)
);
CREATE INDEX events_type_created_idx ON events (type, created_at);
CREATE INDEX events_created_idx ON events (created_at);

CREATE TABLE event_sequences (
    player_id bigint PRIMARY KEY,
    last      bigint NOT NULL CHECK (last > 0)
);

CREATE TABLE event_endpoints (
    id                     bigserial PRIMARY KEY,
    url                    text NOT NULL UNIQUE CHECK (url ~ '^https?://' AND length(url) <= 2048),
    secret                 text NOT NULL CHECK (secret LIKE 'whsec_%'),
    previous_secret        text CHECK (previous_secret LIKE 'whsec_%'),
    previous_secret_until  timestamptz,
    types                  text[] NOT NULL DEFAULT '{}',
    enabled                boolean NOT NULL DEFAULT true,
    disabled_at            timestamptz,
    disabled_reason        text CHECK (length(disabled_reason) <= 500),
    created_at             timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE event_deliveries (
    id            bigserial PRIMARY KEY,
    event_id      text NOT NULL REFERENCES events (id),
    endpoint_id   bigint NOT NULL REFERENCES event_endpoints (id),
    state         text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts      integer NOT NULL DEFAULT 0,
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_attempt_at timestamptz,
    next_attempt_at timestamptz,
    delivered_at  timestamptz
);
CREATE INDEX event_deliveries_event_idx ON event_deliveries (event_id);
CREATE INDEX event_deliveries_endpoint_idx ON event_deliveries (endpoint_id, id);
CREATE INDEX event_deliveries_pending_idx ON event_deliveries (created_at) WHERE state = 'pending';

CREATE TABLE event_attempts (
    id          bigserial PRIMARY KEY,
    delivery_id bigint NOT NULL REFERENCES event_deliveries (id),
    at          timestamptz NOT NULL,
    status_code integer,
    latency_ms  integer NOT NULL,
    error       text,
    response    text
);
CREATE INDEX event_attempts_delivery_idx ON event_attempts (delivery_id, id);

CREATE TABLE low_balance_state (
    player_id bigint PRIMARY KEY,
    low       boolean NOT NULL,
    crossings bigint NOT NULL DEFAULT 0
);

CREATE TABLE events_epoch (
    one     boolean PRIMARY KEY DEFAULT true CHECK (one),
    started timestamptz NOT NULL DEFAULT now()
);
INSERT INTO events_epoch DEFAULT VALUES;

-- +goose Down
DROP TABLE IF EXISTS events_epoch;
DROP TABLE IF EXISTS low_balance_state;
DROP TABLE IF EXISTS event_attempts;
DROP TABLE IF EXISTS event_deliveries;
DROP TABLE IF EXISTS event_endpoints;
DROP TABLE IF EXISTS event_sequences;
DROP TABLE IF EXISTS events;
