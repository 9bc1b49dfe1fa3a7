// Package events is what billing tells the platform: a small, versioned
// catalogue of events, each written in the transaction of the effect it
// reports (EmitTx), and delivered at least once to every operator-added
// endpoint by a River job, signed per the Standard Webhooks specification.
//
// An event's id is derived from the effect's own idempotency key (ID), so
// a retried job, a redelivered webhook or a replayed request writes no
// second event: the events table's primary key refuses it and EmitTx
// answers the first. Its body is built once, in the database, and sent as
// stored, so every delivery of one id carries the same bytes.
//
// LowBalance is the wallet's Sparks observer: it judges each Sparks
// movement against the player's running Marquees and sends
// wallet.low_balance and wallet.balance_recovered once per crossing.
//
// Delivery (Worker) runs outside any transaction: one POST with a timeout,
// no redirects, at most MaxResponse bytes of the answer read, then one
// short durable transaction recording the attempt. A failure is retried on
// Schedule (about three days); an endpoint whose deliveries all failed for
// the whole schedule is disabled with a reason (docs/contract.md,
// docs/deploying.md "Outgoing events").
package events
