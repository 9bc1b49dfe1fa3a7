WITH prior AS (
    SELECT id, wallet_id, player_id, currency, amount, kind, reference, idempotency_key, balance_after, created_at FROM wallet_transactions WHERE idempotency_key IN ($6::text, $13::text)),
held AS (
    SELECT outstanding FROM debts WHERE player_id = $1::bigint AND NOT EXISTS (SELECT FROM prior) FOR SHARE),
made AS (
    INSERT INTO debts (player_id) SELECT $1::bigint WHERE NOT EXISTS (SELECT FROM prior) AND NOT EXISTS (SELECT FROM held)
    ON CONFLICT (player_id) DO UPDATE SET player_id = EXCLUDED.player_id
    RETURNING outstanding),
debt AS (
    SELECT outstanding FROM held UNION ALL SELECT outstanding FROM made),
debit AS (
    UPDATE wallets w SET balance = w.balance + $3::bigint, seq = w.seq + 1
    FROM debt
    WHERE w.player_id = $1::bigint AND w.currency = $2::text AND w.balance + $3::bigint >= 0 AND debt.outstanding = 0
    RETURNING 1 AS ord, nextval('wallet_transactions_id_seq') AS txid, w.id AS wallet_id, w.player_id, w.currency,
        $3::bigint AS amount, $4::text AS kind, $5::text AS reference, $6::text AS key, $7::text AS account,
        w.balance AS balance_after, w.seq),
credit AS (
    INSERT INTO wallets AS w (player_id, currency, balance, seq)
    SELECT $8::bigint, $9::text, $10::bigint, 1 FROM debit
    ON CONFLICT (player_id, currency) DO UPDATE SET balance = w.balance + EXCLUDED.balance, seq = w.seq + 1
    RETURNING 2 AS ord, nextval('wallet_transactions_id_seq') AS txid, w.id AS wallet_id, w.player_id, w.currency,
        $10::bigint AS amount, $11::text AS kind, $12::text AS reference, $13::text AS key, $14::text AS account,
        w.balance AS balance_after, w.seq),
ok AS (
    SELECT ord, txid, wallet_id, player_id, currency, amount, kind, reference, key, account, balance_after, seq FROM debit UNION ALL SELECT ord, txid, wallet_id, player_id, currency, amount, kind, reference, key, account, balance_after, seq FROM credit),
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
SELECT 'debt', 0, 0, $1::bigint, 'mana', outstanding, '', '', '', 0, now() FROM debt WHERE outstanding > 0
UNION ALL
SELECT 'new', id, wallet_id, player_id, currency, amount, kind, reference, idempotency_key, balance_after, created_at FROM t
