WITH prior AS (
    SELECT id, wallet_id, player_id, currency, amount, kind, reference, idempotency_key, balance_after, created_at FROM wallet_transactions WHERE idempotency_key = $6::text),
ok AS (
    UPDATE wallets w SET balance = w.balance + $3::bigint, seq = w.seq + 1
    WHERE w.player_id = $1::bigint AND w.currency = $2::text AND w.balance + $3::bigint >= 0 AND NOT EXISTS (SELECT FROM prior)
    RETURNING 1 AS ord, nextval('wallet_transactions_id_seq') AS txid, w.id AS wallet_id, w.player_id, w.currency,
        $3::bigint AS amount, $4::text AS kind, $5::text AS reference, $6::text AS key, $7::text AS account,
        w.balance AS balance_after, w.seq),
t AS (
    INSERT INTO wallet_transactions (id, wallet_id, player_id, currency, amount, kind, reference, idempotency_key, balance_after)
    OVERRIDING SYSTEM VALUE
    SELECT txid, wallet_id, player_id, currency, amount, kind, reference, key, balance_after FROM ok
    RETURNING id, wallet_id, player_id, currency, amount, kind, reference, idempotency_key, balance_after, created_at),
e AS (
    INSERT INTO ledger_entries (transaction_id, account, wallet_id, currency, amount, balance_after, seq)
    SELECT txid, 'wallet', wallet_id, currency, amount, balance_after, seq FROM ok
    UNION ALL
    SELECT txid, account, NULL, currency, -amount, NULL, NULL FROM ok)
SELECT 'replay', id, wallet_id, player_id, currency, amount, kind, reference, idempotency_key, balance_after, created_at FROM prior
UNION ALL
SELECT 'new', id, wallet_id, player_id, currency, amount, kind, reference, idempotency_key, balance_after, created_at FROM t
