-- +goose Up
-- One row per operator forgiveness key, whatever it decided: the Mana it
-- wrote off, or 0 when the player owed nothing. A replayed key answers this
-- row, so a key spent on "nothing owed" can never forgive a later debt.
CREATE TABLE debt_forgiveness (
    key        text PRIMARY KEY CHECK (octet_length(key) BETWEEN 1 AND 255),
    player_id  bigint NOT NULL REFERENCES players (id),
    mana       bigint NOT NULL CHECK (mana >= 0),
    reason     text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Forgiveness written before this table kept its answer only in the
-- ledger, under <key>:write_off.
INSERT INTO debt_forgiveness (key, player_id, mana, reason, created_at)
SELECT left(idempotency_key, length(idempotency_key) - length(':write_off')), player_id, amount,
       substr(reference, length('forgiven: ') + 1), created_at
FROM wallet_transactions
WHERE kind = 'debt_write_off' AND idempotency_key LIKE '%:write_off';

-- +goose Down
DROP TABLE debt_forgiveness;
