-- +goose Up
-- Operators' keys move into namespaces of their own, operator:adjust:<key>
-- (`billing wallet adjust`) and operator:forgive:<key> (`billing debts
-- forgive`), so that no operator key can take a key the system derives
-- (order:..., payment:..., marquee:..., api:...). The keys those commands
-- stored before are rewritten in place, with the legs the wallet derived
-- from them (<key>:settle of an adjustment's Mana credit, <key>:write_off
-- and <key>:receivable of a forgiveness), so that the same command replayed
-- after the upgrade finds its first answer and moves nothing.
--
-- The rule is the wallet's (wallet/keys.go, scoped): <ns>:<key> when that is
-- at most 200 bytes, else <ns>/sha256:<hex of the key>.
CREATE TEMP TABLE operator_keys (purpose text NOT NULL, old text NOT NULL, new text NOT NULL) ON COMMIT DROP;

-- An adjustment is kind adjustment with the reference `adjust: <reason>`;
-- the other adjustments (seeds, benchmarks) are not an operator's.
INSERT INTO operator_keys (purpose, old, new)
SELECT purpose, old, CASE WHEN octet_length(ns || ':' || old) <= 200 THEN ns || ':' || old
    ELSE ns || '/sha256:' || encode(sha256(convert_to(old, 'UTF8')), 'hex') END
FROM (
    SELECT 'adjust' AS purpose, 'operator:adjust' AS ns, idempotency_key AS old FROM wallet_transactions
    WHERE kind = 'adjustment' AND reference LIKE 'adjust: %'
    UNION ALL
    SELECT 'forgive', 'operator:forgive', key FROM debt_forgiveness
) k;

-- Every wallet transaction to rename: the operator's own and its legs.
CREATE TEMP TABLE operator_rows ON COMMIT DROP AS
SELECT t.id, o.new || substr(t.idempotency_key, octet_length(o.old) + 1) AS new
FROM wallet_transactions t
JOIN operator_keys o ON
    (o.purpose = 'adjust' AND t.kind = 'adjustment' AND t.idempotency_key = o.old)
    OR (o.purpose = 'adjust' AND t.kind = 'debt_settlement' AND t.idempotency_key = o.old || ':settle')
    OR (o.purpose = 'forgive' AND t.kind = 'debt_write_off'
        AND t.idempotency_key IN (o.old || ':write_off', o.old || ':receivable'));

-- In two steps, so that no row's new key meets another row's old key
-- half-way (unique indexes are checked row by row).
UPDATE wallet_transactions t SET idempotency_key = 'operator/migrating:' || t.id
FROM operator_rows r WHERE r.id = t.id;
UPDATE wallet_transactions t SET idempotency_key = r.new
FROM operator_rows r WHERE r.id = t.id;

UPDATE debt_forgiveness f SET key = 'operator/migrating:' || md5(o.old)
FROM operator_keys o WHERE o.purpose = 'forgive' AND f.key = o.old;
UPDATE debt_forgiveness f SET key = o.new
FROM operator_keys o WHERE o.purpose = 'forgive' AND f.key = 'operator/migrating:' || md5(o.old);

-- +goose Down
-- The old keys are not kept: a downgrade would have to be a restore.
SELECT 1;
