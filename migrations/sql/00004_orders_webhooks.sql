-- +goose Up

-- An order is a checkout of one SKU through one provider. amount, currency
-- and mana are a snapshot of the catalogue taken at checkout: a later price
-- change never alters what this order must be paid or what it grants.
CREATE TABLE orders (
    id                    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    player_id             bigint NOT NULL REFERENCES players (id),
    sku                   text NOT NULL CHECK (length(sku) BETWEEN 1 AND 200),
    provider              text NOT NULL CHECK (provider IN ('stripe', 'paddle', 'creem')),
    amount                bigint NOT NULL CHECK (amount > 0),
    currency              text NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
    mana                  bigint NOT NULL CHECK (mana > 0),
    status                text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'fulfilled', 'rejected')),
    reason                text,
    -- The Mana credit that fulfilled the order (no foreign key: the wallet
    -- owns its tables; its idempotency key order:<id>:fulfilment is the link).
    wallet_transaction_id bigint,
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now(),
    fulfilled_at          timestamptz,
    CHECK ((status = 'rejected') = (reason IS NOT NULL)),
    CHECK ((status = 'fulfilled') = (fulfilled_at IS NOT NULL AND wallet_transaction_id IS NOT NULL))
);
CREATE INDEX orders_player_id_idx ON orders (player_id, id);

-- One row per provider event, ever: the INSERT ... ON CONFLICT DO NOTHING of
-- this row is the claim, and the fulfill_order job is inserted in the same
-- transaction. payload keeps the exact bytes whose signature was verified.
CREATE TABLE webhook_events (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider      text NOT NULL,
    event_id      text NOT NULL CHECK (length(event_id) BETWEEN 1 AND 255),
    event_type    text NOT NULL,
    -- Our order as the event names it, when it is a completed payment. No
    -- foreign key: an unknown order id is recorded as sent and its job is
    -- cancelled with a clear error.
    order_id      bigint,
    -- What the provider says was paid (completed payments only), kept so
    -- invariant 5 can be audited in SQL against the order's snapshot.
    paid_amount   bigint,
    paid_currency text,
    payload       bytea NOT NULL,
    claimed_at    timestamptz NOT NULL DEFAULT now(),
    CHECK ((order_id IS NULL) = (paid_amount IS NULL) AND (order_id IS NULL) = (paid_currency IS NULL)),
    UNIQUE (provider, event_id)
);
CREATE INDEX webhook_events_order_id_idx ON webhook_events (order_id) WHERE order_id IS NOT NULL;

-- +goose Down
DROP TABLE webhook_events;
DROP TABLE orders;
