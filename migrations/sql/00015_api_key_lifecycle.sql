-- +goose NO TRANSACTION
-- +goose Up
-- API keys an operator can revoke and rotate (`billing players keys`):
--
--   expires_at     a rotated key's last moment: authentication refuses it
--                  from then on, like a revoked one. NULL: no end.
--   hint           the key's last four characters, so an operator can tell
--                  keys apart (and match a leaked one) without the key;
--                  NULL for keys made before this migration.
--   rotated_from   the key this one replaced. Unique: a key is rotated at
--                  most once, so two operators rotating it at once cannot
--                  both hand out a successor.
--   revoke_reason  why an operator revoked it, for the player's timeline.
--
-- The columns have no default, so adding them rewrites nothing and holds
-- the table's lock for an instant. The unique index is built
-- CONCURRENTLY, outside a transaction, so authentication goes on while it
-- is built; it is dropped first, so a build cut short is started over.
ALTER TABLE api_keys
    ADD COLUMN IF NOT EXISTS expires_at timestamptz,
    ADD COLUMN IF NOT EXISTS hint text CHECK (length(hint) <= 8),
    ADD COLUMN IF NOT EXISTS rotated_from bigint REFERENCES api_keys (id),
    ADD COLUMN IF NOT EXISTS revoke_reason text CHECK (length(revoke_reason) <= 500);

DROP INDEX CONCURRENTLY IF EXISTS api_keys_rotated_from_idx;
CREATE UNIQUE INDEX CONCURRENTLY api_keys_rotated_from_idx ON api_keys (rotated_from) WHERE rotated_from IS NOT NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS api_keys_rotated_from_idx;
ALTER TABLE api_keys
    DROP COLUMN IF EXISTS revoke_reason,
    DROP COLUMN IF EXISTS rotated_from,
    DROP COLUMN IF EXISTS hint,
    DROP COLUMN IF EXISTS expires_at;
