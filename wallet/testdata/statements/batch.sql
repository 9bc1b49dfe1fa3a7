WITH prior AS (
    SELECT id, wallet_id, player_id, currency, amount, kind, reference, idempotency_key, balance_after, created_at FROM wallet_transactions WHERE idempotency_key = ANY($6::text[])),
v AS (
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[])
        WITH ORDINALITY AS v(player_id, currency, amount, kind, reference, key, account, ord)),
fresh AS (
    SELECT * FROM v WHERE v.key <> ALL (ARRAY(SELECT idempotency_key FROM prior))),
l AS (
    SELECT w.id, w.player_id, w.currency, w.balance, w.seq FROM wallets w
    WHERE (w.player_id, w.currency) IN (SELECT player_id, currency FROM fresh)
    ORDER BY w.player_id, w.currency
    FOR UPDATE),
r AS (
    SELECT fresh.*, l.id AS wallet_id,
        l.balance + sum(fresh.amount) OVER run AS balance_after,
        l.seq + row_number() OVER run AS seq
    FROM fresh JOIN l ON l.player_id = fresh.player_id AND l.currency = fresh.currency
    WINDOW run AS (PARTITION BY l.id ORDER BY fresh.ord)),
ok AS (
    SELECT ord, nextval('wallet_transactions_id_seq') AS txid, wallet_id, player_id, currency, amount, kind, reference,
        key, account, balance_after, seq
    FROM r WHERE balance_after >= 0 ORDER BY ord),
w AS (
    UPDATE wallets SET balance = last.balance_after, seq = last.seq
    FROM (SELECT DISTINCT ON (wallet_id) wallet_id, balance_after, seq FROM ok ORDER BY wallet_id, ord DESC) last
    WHERE wallets.id = last.wallet_id),
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
