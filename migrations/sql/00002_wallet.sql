-- +goose Up
-- One wallet per player and currency. balance is the materialized sum of the
-- wallet's ledger entries; seq numbers those entries 1..seq with no gaps.
-- Every post takes this row's lock (a conditional UPDATE), which is what
-- serializes posts to one wallet and nothing else.
CREATE TABLE wallets (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    player_id  bigint NOT NULL REFERENCES players (id),
    currency   text NOT NULL CHECK (currency IN ('mana', 'sparks')),
    balance    bigint NOT NULL DEFAULT 0 CHECK (balance >= 0),
    seq        bigint NOT NULL DEFAULT 0 CHECK (seq >= 0),
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (player_id, currency)
);

-- One row per idempotency key, ever: the UNIQUE index referees every race
-- between retries of the same post. amount is signed (credit > 0 > debit).
CREATE TABLE wallet_transactions (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    wallet_id       bigint NOT NULL REFERENCES wallets (id),
    player_id       bigint NOT NULL,
    currency        text NOT NULL,
    amount          bigint NOT NULL CHECK (amount <> 0),
    kind            text NOT NULL CHECK (length(kind) BETWEEN 1 AND 64),
    reference       text NOT NULL DEFAULT '',
    idempotency_key text NOT NULL UNIQUE CHECK (octet_length(idempotency_key) BETWEEN 1 AND 255),
    balance_after   bigint NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX wallet_transactions_wallet_id_idx ON wallet_transactions (wallet_id, id);

-- Double entry: every transaction posts one entry on the player's wallet
-- (account 'wallet', with balance_after and seq) and one on a system account
-- (mana_issued, funding_revenue, conversion, adjustments) with neither.
-- System accounts deliberately have no balance row: their balance is the sum
-- of their entries. A balance row would be one hot row that every post of
-- every player locks and updates, serializing the whole system behind it.
CREATE TABLE ledger_entries (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    transaction_id bigint NOT NULL REFERENCES wallet_transactions (id),
    account        text NOT NULL CHECK (length(account) BETWEEN 1 AND 64),
    wallet_id      bigint REFERENCES wallets (id),
    currency       text NOT NULL,
    amount         bigint NOT NULL,
    balance_after  bigint,
    seq            bigint,
    created_at     timestamptz NOT NULL DEFAULT now(),
    CHECK ((account = 'wallet') = (wallet_id IS NOT NULL)),
    CHECK ((wallet_id IS NULL) = (balance_after IS NULL) AND (wallet_id IS NULL) = (seq IS NULL)),
    UNIQUE (wallet_id, seq)
);
CREATE INDEX ledger_entries_transaction_id_idx ON ledger_entries (transaction_id);

-- +goose Down
DROP TABLE ledger_entries;
DROP TABLE wallet_transactions;
DROP TABLE wallets;
