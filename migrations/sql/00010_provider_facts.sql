-- +goose Up

-- The provider's truth (invariant 10).
--
-- payment_aliases: every provider id a payment is known by. A payment is
-- one provider object (Stripe: the Checkout Session; Paddle: the
-- transaction; Creem: the order), recorded once in payments; the ids its
-- events and its refunds or disputes name it by (Stripe's PaymentIntent and
-- charge, Creem's checkout) are aliases, recorded as they become known, so a
-- later event that names only one of them still finds the payment. The
-- payment's own payment_id is an alias too, so one lookup serves every id.
CREATE TABLE payment_aliases (
    provider   text NOT NULL,
    alias      text NOT NULL CHECK (length(alias) BETWEEN 1 AND 255),
    payment    bigint NOT NULL REFERENCES payments (id),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (provider, alias)
);
CREATE INDEX payment_aliases_payment_idx ON payment_aliases (payment);
INSERT INTO payment_aliases (provider, alias, payment)
SELECT provider, payment_id, id FROM payments;
-- Stripe payments recorded before a Checkout Session was their identity are
-- keyed by their PaymentIntent; their order's session is an alias.
INSERT INTO payment_aliases (provider, alias, payment)
SELECT p.provider, o.checkout_id, p.id FROM payments p JOIN orders o ON o.id = p.order_id
WHERE p.provider = 'stripe' AND p.status = 'applied' AND o.checkout_id IS NOT NULL
ON CONFLICT DO NOTHING;

-- reversal_events: every refund, dispute or chargeback event as the
-- provider reported it, one row per claimed event, and what became of it:
-- pending (its payment is not known yet), accepted (it counts towards its
-- fact) or refused (with the reason; it changes nothing). payment_ref is
-- the id the event names its payment by; other_ref a second one (Stripe's
-- charge beside the PaymentIntent, Creem's checkout beside the order).
CREATE TABLE reversal_events (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider    text NOT NULL,
    event_id    text NOT NULL CHECK (length(event_id) BETWEEN 1 AND 255),
    reversal_id text NOT NULL,
    payment_ref text NOT NULL,
    other_ref   text,
    kind        text NOT NULL,
    state       text NOT NULL,
    amount      bigint NOT NULL,
    currency    text NOT NULL,
    status      text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'accepted', 'refused')),
    reason      text,
    payment     bigint REFERENCES payments (id),
    received_at timestamptz NOT NULL DEFAULT now(),
    decided_at  timestamptz,
    UNIQUE (provider, event_id),
    CHECK ((status = 'refused') = (reason IS NOT NULL)),
    CHECK (status <> 'accepted' OR payment IS NOT NULL),
    CHECK ((status = 'pending') = (decided_at IS NULL))
);
CREATE INDEX reversal_events_payment_ref_idx ON reversal_events (provider, payment_ref);
CREATE INDEX reversal_events_other_ref_idx ON reversal_events (provider, other_ref) WHERE other_ref IS NOT NULL;
CREATE INDEX reversal_events_payment_idx ON reversal_events (payment);

-- Carry the reversals recorded so far over as events: accepted where their
-- payment is known and they were not rejected, refused where the payment
-- is in another currency. A row rejected only for exceeding its payment was
-- the provider's truth after all: it waits, pending, with the rows whose
-- payment is still unknown, and `billing payments decide-pending` (or the
-- payment's next event) decides it and claws back what it implies.
INSERT INTO reversal_events (provider, event_id, reversal_id, payment_ref, kind, state, amount, currency,
    status, reason, payment, received_at, decided_at)
SELECT r.provider, 'migrated:' || r.id, r.reversal_id, r.payment_id, r.kind, r.state, r.amount, r.currency,
    d.status, CASE WHEN d.status = 'refused' THEN r.rejected END, CASE WHEN d.status <> 'pending' THEN p.id END,
    r.created_at, CASE WHEN d.status <> 'pending' THEN r.updated_at END
FROM payment_reversals r
LEFT JOIN payments p ON p.provider = r.provider AND p.payment_id = r.payment_id
CROSS JOIN LATERAL (SELECT CASE
    WHEN p.id IS NULL THEN 'pending'
    WHEN r.rejected IS NULL THEN 'accepted'
    WHEN lower(r.currency) <> lower(p.currency) THEN 'refused'
    ELSE 'pending' END AS status) d;

-- payment_reversals now holds only accepted facts of known payments: one
-- row per provider refund or dispute, its latest accepted amount, currency
-- and state, folded from its accepted events (the amount only grows; a
-- dispute's state moves open < lost < won).
DELETE FROM payment_reversals r
WHERE r.rejected IS NOT NULL
   OR NOT EXISTS (SELECT 1 FROM payments p WHERE p.provider = r.provider AND p.payment_id = r.payment_id);
ALTER TABLE payment_reversals
    DROP COLUMN rejected,
    ADD COLUMN payment bigint REFERENCES payments (id);
UPDATE payment_reversals r SET payment = p.id
FROM payments p WHERE p.provider = r.provider AND p.payment_id = r.payment_id;
ALTER TABLE payment_reversals ALTER COLUMN payment SET NOT NULL;
CREATE INDEX payment_reversals_payment_row_idx ON payment_reversals (payment);

-- +goose Down
DROP INDEX payment_reversals_payment_row_idx;
ALTER TABLE payment_reversals DROP COLUMN payment, ADD COLUMN rejected text;
INSERT INTO payment_reversals (provider, reversal_id, payment_id, kind, state, amount, currency, rejected)
SELECT DISTINCT ON (provider, reversal_id) provider, reversal_id, payment_ref, kind, state, amount, currency, reason
FROM reversal_events WHERE status <> 'accepted'
ORDER BY provider, reversal_id, id DESC
ON CONFLICT (provider, reversal_id) DO NOTHING;
DROP TABLE reversal_events;
DROP TABLE payment_aliases;
