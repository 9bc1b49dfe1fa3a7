-- +goose Up

-- One row per provider payment, ever: UNIQUE (provider, payment_id) is the
-- referee between two events about one payment (Stripe's completed and
-- async-succeeded of one session) and between a payment and its double.
-- status: applied (it minted the order's Mana), unapplied (money received
-- that minted nothing: a second payment for a paid order, or a payment the
-- order refused), refunded (an unapplied payment we refunded).
CREATE TABLE payments (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider         text NOT NULL,
    payment_id       text NOT NULL CHECK (length(payment_id) BETWEEN 1 AND 255),
    order_id         bigint NOT NULL REFERENCES orders (id),
    player_id        bigint NOT NULL REFERENCES players (id),
    event_id         text NOT NULL,
    amount           bigint NOT NULL,
    currency         text NOT NULL,
    mana_minted      bigint NOT NULL DEFAULT 0 CHECK (mana_minted >= 0),
    status           text NOT NULL CHECK (status IN ('applied', 'unapplied', 'refunded')),
    reason           text,
    -- Net Mana clawed back (clawbacks minus what a won dispute gave back).
    clawed_back_mana bigint NOT NULL DEFAULT 0 CHECK (clawed_back_mana >= 0 AND clawed_back_mana <= mana_minted),
    -- Number of clawback steps taken; part of each step's wallet keys.
    reversal_steps   integer NOT NULL DEFAULT 0,
    -- The provider's id of the refund we issued for an unapplied payment.
    refund_id        text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (provider, payment_id),
    CHECK ((status = 'applied') = (mana_minted > 0)),
    CHECK ((status = 'applied') = (reason IS NULL)),
    CHECK ((status = 'refunded') = (refund_id IS NOT NULL))
);
CREATE INDEX payments_order_id_idx ON payments (order_id);
CREATE INDEX payments_unapplied_idx ON payments (id) WHERE status = 'unapplied';

-- Refunds and disputes, one row per provider refund/dispute id, recorded
-- even before the payment they name is known (events arrive in any order).
-- amount is what the provider says went back: for Stripe's charge.refunded
-- the charge's cumulative amount_refunded, kept at its maximum. A dispute's
-- state only moves from open to won or lost. rejected is set when the row
-- cannot apply to its payment (wrong currency, more than was paid); such a
-- row never claws anything back.
CREATE TABLE payment_reversals (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider    text NOT NULL,
    reversal_id text NOT NULL CHECK (length(reversal_id) BETWEEN 1 AND 255),
    payment_id  text NOT NULL CHECK (length(payment_id) BETWEEN 1 AND 255),
    kind        text NOT NULL CHECK (kind IN ('refund', 'dispute')),
    state       text NOT NULL CHECK (state IN ('succeeded', 'open', 'won', 'lost')),
    amount      bigint NOT NULL CHECK (amount >= 0),
    currency    text NOT NULL,
    rejected    text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (provider, reversal_id)
);
CREATE INDEX payment_reversals_payment_idx ON payment_reversals (provider, payment_id);

-- What each order has been refunded and clawed back, for GET /v1/orders.
ALTER TABLE orders
    ADD COLUMN refunded_amount  bigint NOT NULL DEFAULT 0 CHECK (refunded_amount >= 0),
    ADD COLUMN clawed_back_mana bigint NOT NULL DEFAULT 0 CHECK (clawed_back_mana >= 0),
    ADD COLUMN disputed         boolean NOT NULL DEFAULT false;

-- A player's open debt in Mana: what a clawback could not take from the
-- wallet. It mirrors the player's entries on the ledger's receivable
-- account (debt = minus their sum; the audit checks it) and is the lock
-- that orders every post that opens, settles or forgives debt: debts row,
-- then the Mana wallet, then the Sparks wallet.
CREATE TABLE debts (
    player_id   bigint PRIMARY KEY REFERENCES players (id),
    outstanding bigint NOT NULL DEFAULT 0 CHECK (outstanding >= 0),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX debts_outstanding_idx ON debts (player_id) WHERE outstanding > 0;

-- +goose Down
DROP TABLE debts;
ALTER TABLE orders DROP COLUMN refunded_amount, DROP COLUMN clawed_back_mana, DROP COLUMN disputed;
DROP TABLE payment_reversals;
DROP TABLE payments;
