// Package wallet is the vault: every movement of Mana or Sparks goes through
// one idempotent post primitive that writes a double-entry ledger.
//
// # Posting
//
// A post (Store.Post, or Store.PostTx inside a caller's transaction) names a
// player, a currency, a positive amount, a direction, a kind and an
// idempotency key. It runs in this order:
//
//  1. Pre-check: one indexed SELECT by key. When the key already has a
//     transaction, that transaction is returned with Replayed set and nothing
//     moves; when the stored transaction differs (player, currency,
//     direction, amount or kind) the post is refused with a
//     *KeyReusedError naming the field, and nothing moves either.
//  2. The post itself is ONE SQL statement (a data-modifying CTE): a
//     conditional UPDATE (an upsert for credits, which creates the wallet)
//     that takes the wallet row's lock until commit, refuses to go negative
//     and bumps the wallet's entry sequence, then the transaction insert and
//     both ledger entries. Post runs it in autocommit (a single statement is
//     its own transaction, so there is no BEGIN/COMMIT round trip); PostTx
//     runs it under a savepoint in the caller's transaction.
//  3. The race: two callers with one key both miss the pre-check; the loser
//     hits the UNIQUE index on the key (SQLSTATE 23505), its statement (or
//     savepoint) rolls back, and it returns the winner's row as a replay.
//     This is the success path of a concurrent retry, not an error.
//
// # Refused debits are not recorded
//
// A debit refused for insufficient balance (ErrInsufficientBalance) records
// nothing at all, not even its key. Posting the same key again later runs the
// debit again, and it succeeds once the wallet holds enough. The daily
// funding relies on this: its key marquee:<id>:<day>:funding is retried after
// the player tops up, and still moves Sparks at most once.
//
// # Ledger
//
// Every transaction has exactly two ledger entries that sum to zero: one on
// the player's wallet (with the balance after the move and a per-wallet
// sequence number 1, 2, 3, ... without gaps) and one on a system account
// (mana_issued, funding_revenue, conversion, adjustments). System accounts
// have no balance row; their balance is the sum of their entries, so no post
// ever waits on another player's post.
//
// # Conversion
//
// Convert moves Mana to Sparks one way (there is no reverse) at the
// configured rate. It derives two keys from the caller's, <key>:mana_debit
// and <key>:sparks_credit, and posts both legs in one database transaction,
// locking the Mana wallet before the Sparks wallet. Funding debits lock only
// the Sparks wallet and purchases only the Mana wallet, so no two of these
// can wait on each other in a cycle.
//
// # Audit
//
// Audit checks invariants 1 to 3 of the design (balances equal their
// entries, transactions balance, one transaction per key) with SQL
// aggregations streamed in chunks, in one consistent snapshot.
package wallet
