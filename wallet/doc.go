// Package wallet is the vault: every movement of Mana or Sparks goes through
// one idempotent post primitive that writes a double-entry ledger.
//
// # Posting
//
// A post (Store.Post, or Store.PostTx inside a caller's transaction) names a
// player, a currency, a positive amount, a direction, a kind and an
// idempotency key. It is ONE SQL statement (a data-modifying CTE, built in
// statement.go from a row source and the one tail that writes the
// transactions and their ledger entries), so Post is one round trip in
// autocommit (a single statement is its own transaction, committed
// through durable.Do like every acknowledging commit of billing, so one
// no synchronous standby confirmed is refused with durable.ErrNotDurable)
// and PostTx one pipelined batch (SAVEPOINT, statement, RELEASE):
//
//  1. The key check is the statement's first CTE, an indexed SELECT by key.
//     When the key already has a transaction, an uncorrelated NOT EXISTS
//     (a one-time filter) skips everything else: the wallet row is neither
//     read nor locked, so a replay never waits behind a transaction holding
//     the wallet. The stored transaction comes back with Replayed set; when
//     it differs (player, currency, direction, amount or kind) the post is
//     refused with a *KeyReusedError naming the field. Nothing moves.
//  2. Otherwise: a conditional UPDATE (an upsert for credits, which creates
//     the wallet) that takes the wallet row's lock until commit, refuses to
//     go negative and bumps the wallet's entry sequence, then the
//     transaction insert and both ledger entries.
//  3. The race: two callers with one key both miss the key check; the
//     loser hits the UNIQUE index on the key (SQLSTATE 23505), its
//     statement (or savepoint) rolls back, and it returns the winner's row
//     as a replay. This is the success path of a concurrent retry, not an
//     error.
//
// # Keys
//
// Every post's key is a Key built in keys.go, which owns the grammar: the
// keys the system derives (order:<id>:fulfilment, marquee:<id>:<day>:funding,
// payment:..., api:..., and the legs derived from a key) and the
// namespaces of operators' keys (operator:<purpose>:<key>). A key a caller
// or operator chooses that spells a reserved namespace is refused
// (ErrReservedKey), so none can take a key the system will need.
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
// and <key>:sparks_credit, and posts both legs in ONE statement (both keys
// checked first, as a post's; then the player's debts row, and an open
// debt refuses the conversion; the Sparks credit reads the Mana debit's
// result, so the Mana wallet is locked before the Sparks wallet and a
// refused debit credits nothing). Funding debits lock only the Sparks
// wallet and purchases the debts row then the Mana wallet, so no two of
// these can wait on each other in a cycle.
//
// # Batches
//
// PostManyTx posts a batch of debits (fund_day jobs worked together) as
// ONE set-based statement over the same tail, and leaves to PostTx only
// what that statement could not take.
//
// # Observer
//
// A Store built with Options.Observer tells it, inside the posting
// transaction and while the wallet row is still locked, whose Sparks a
// post moved (SparksObserver): PostTx, ConvertTx and the clawback's Sparks
// leg once each, a batch once through PostBatchTx; never a replay, a
// refusal or a Mana post. What the observer writes (the low-balance events
// of package events) must commit with the movement, which one autocommit
// statement cannot carry. An observer that is also a SparksGuard keeps Post
// and Convert at one round trip: its guard statement, which writes nothing
// and fails only when the observer would write, is pipelined after the
// post's in one implicit transaction, and only a failed guard sends the
// post again through a transaction of its own that tells the observer.
// Without a guard, such posts always take that transaction. A batch's
// caller that sends more statements in the posts' transaction uses
// PostBatchQueuedTx: an observer that is also a SparksQueuer has its
// statement queued on the caller's pgx.Batch instead of a round trip of
// its own.
//
// # Audit
//
// Audit checks invariants 1 to 3 of docs/contract.md (balances equal their
// entries, transactions balance, one transaction per key) with SQL
// aggregations streamed in chunks, in one consistent snapshot.
package wallet
