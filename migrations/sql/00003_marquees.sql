-- +goose Up
-- A Marquee is a player's Docker host, funded once per service day out of
-- its owner's Sparks. daily_price is copied from the plan at creation so a
-- later price change in billing.yaml never reprices existing Marquees.
-- paid_through is the end of the last funded service day (NULL: never
-- funded); the funded gate is paid_through > now.
CREATE TABLE marquees (
    id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    player_id          bigint NOT NULL REFERENCES players (id),
    name               text NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    plan               text NOT NULL CHECK (length(plan) BETWEEN 1 AND 64),
    daily_price        bigint NOT NULL CHECK (daily_price > 0),
    desired_state      text NOT NULL DEFAULT 'running' CHECK (desired_state IN ('running', 'stopped')),
    status             text NOT NULL DEFAULT 'unfunded' CHECK (status IN ('funded', 'unfunded', 'stopped')),
    paid_through       timestamptz,
    last_funding_error text,
    last_funded_at     timestamptz,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX marquees_player_id_idx ON marquees (player_id, id);

-- The sweep walks running Marquees in id order (keyset pagination) and
-- filters on paid_through: an index-only scan over this partial index.
CREATE INDEX marquees_sweep_idx ON marquees (id) INCLUDE (paid_through) WHERE desired_state = 'running';

-- Invariant 4 (paid_through never moves back) is refereed by the database,
-- whatever code path updates the row.
-- +goose StatementBegin
CREATE FUNCTION marquees_paid_through_monotonic() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.paid_through IS NOT NULL AND (NEW.paid_through IS NULL OR NEW.paid_through < OLD.paid_through) THEN
        RAISE EXCEPTION 'marquee %: paid_through may not move back from % to %', OLD.id, OLD.paid_through, NEW.paid_through
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER marquees_paid_through_monotonic
    BEFORE UPDATE OF paid_through ON marquees
    FOR EACH ROW EXECUTE FUNCTION marquees_paid_through_monotonic();

-- +goose Down
DROP TRIGGER marquees_paid_through_monotonic ON marquees;
DROP FUNCTION marquees_paid_through_monotonic();
DROP TABLE marquees;
