-- +goose Up

-- The API's replay cache. One row per (player, Idempotency-Key): claimed as
-- 'running' in its own short transaction, then flipped to 'completed' with
-- the stored response in the SAME transaction as the request's mutation, so
-- an effect never commits without its cached response or the reverse.
CREATE TABLE idempotency_keys (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    player_id        bigint NOT NULL REFERENCES players (id),
    key              text NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    -- sha256 of method, path and body hash: a key reused for another request is refused.
    fingerprint      bytea NOT NULL,
    status           text NOT NULL CHECK (status IN ('running', 'completed')),
    response_status  integer,
    response_headers jsonb,
    response_body    bytea,
    -- when the current holder claimed it; a lock older than a timeout can be taken over.
    locked_at        timestamptz,
    created_at       timestamptz NOT NULL,
    completed_at     timestamptz,
    UNIQUE (player_id, key),
    CHECK (status = 'running' OR response_status IS NOT NULL)
);
-- The reaper deletes by age.
CREATE INDEX idempotency_keys_created_at_idx ON idempotency_keys (created_at);

-- What a 202 answers with: request_id -> the River job doing the work. The
-- row and the job are inserted in one transaction.
CREATE TABLE api_requests (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    player_id  bigint NOT NULL REFERENCES players (id),
    kind       text NOT NULL,
    target     text NOT NULL,
    job_id     bigint NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX api_requests_player_id_idx ON api_requests (player_id);

-- Playgrounds run on a Marquee. This system records their lifecycle; the
-- host agent that actually runs containers is outside it.
CREATE TABLE playgrounds (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    player_id     bigint NOT NULL REFERENCES players (id),
    marquee_id    bigint NOT NULL REFERENCES marquees (id),
    name          text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    status        text NOT NULL DEFAULT 'provisioning' CHECK (status IN ('provisioning', 'running')),
    created_at    timestamptz NOT NULL,
    running_at    timestamptz,
    restarted_at  timestamptz,
    restart_count integer NOT NULL DEFAULT 0,
    synced_at     timestamptz,
    sync_count    integer NOT NULL DEFAULT 0
);
CREATE INDEX playgrounds_player_id_idx ON playgrounds (player_id);
CREATE INDEX playgrounds_marquee_id_idx ON playgrounds (marquee_id);

-- +goose Down
DROP TABLE playgrounds;
DROP TABLE api_requests;
DROP TABLE idempotency_keys;
