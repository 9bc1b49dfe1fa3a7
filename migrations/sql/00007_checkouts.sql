-- +goose Up

-- A provider's hosted checkout for an order. The order row is the referee:
-- checkout_id and checkout_url are set once, by a conditional UPDATE ...
-- WHERE checkout_id IS NULL, so at most one provider checkout is ever stored
-- and one URL ever handed out per order, whatever retries or races happen.
ALTER TABLE orders
    ADD COLUMN checkout_id  text CHECK (length(checkout_id) BETWEEN 1 AND 255),
    ADD COLUMN checkout_url text CHECK (length(checkout_url) BETWEEN 1 AND 2048),
    -- The client's Idempotency-Key of POST /v1/checkouts: a retry of a
    -- request whose provider call failed (503) finds and resumes its order
    -- instead of creating another one.
    ADD COLUMN checkout_key text CHECK (length(checkout_key) BETWEEN 1 AND 255),
    ADD CHECK ((checkout_id IS NULL) = (checkout_url IS NULL));
CREATE UNIQUE INDEX orders_checkout_key_idx ON orders (player_id, checkout_key) WHERE checkout_key IS NOT NULL;

-- +goose Down
DROP INDEX orders_checkout_key_idx;
ALTER TABLE orders DROP COLUMN checkout_key, DROP COLUMN checkout_url, DROP COLUMN checkout_id;
