-- +goose Up
-- billing_guard_failed raises SQLSTATE ZB001 with reason: what a guard
-- statement calls when the work it guards cannot take its one-statement
-- path. The wallet's autocommit Sparks post runs its statement and the
-- low-balance observer's guard in one implicit transaction (one round
-- trip); the guard raises only when the observer would have something to
-- write (a crossing), which rolls the post back, and the wallet posts
-- again in a transaction of its own that tells the observer. Class ZB is
-- implementation-defined and unused by PostgreSQL.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION billing_guard_failed(reason text) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'ZB001', MESSAGE = reason;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION IF EXISTS billing_guard_failed(text);
