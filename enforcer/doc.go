// Package enforcer funds every running Marquee once per service day out of
// its owner's Sparks, and answers whether a Marquee is funded now.
//
// # Service days
//
// A service day is a calendar date in the configured time zone
// (BILLING_SERVICE_DAY_TZ). It ends at the next local midnight, so it lasts
// 23 or 25 hours on daylight-saving change days. The functions in day.go
// are pure functions of an instant; the clock is always injected.
//
// # Funding
//
// A periodic sweep (a River periodic job on BILLING_ENFORCER_SCHEDULE, so
// only the elected leader inserts it) pages through running Marquees that
// are not paid through the end of the current service day and enqueues one
// fund_day job per (Marquee, day), River-unique by those args while queued
// or running.
//
// Funding has one path (fundbatch.go), for fund_day jobs and for FundDay
// (operators, the dev seed, tests) alike: the Marquee-days that arrive
// together form a batch (package groupcommit; a lone one is a batch of
// one), and each batch is one transaction, in this order:
//
//  1. BEGIN, and lock the batch's Marquees in id order, reading each one's
//     owner, price, desired state and paid_through (one round trip);
//  2. decide each day: stopped (not running), already paid (paid_through
//     covers the day) or not due (the day has not begun and the day before
//     it is unpaid) complete with nothing debited;
//  3. debit the due days through the wallet (wallet.PostManyTx), each with
//     its key marquee:<id>:<YYYY-MM-DD>:funding: one lookup of their keys,
//     one set-based statement for every debit that fits its owner's
//     balance, and post by post for whatever that statement could not take
//     (a refusal, a key another process committed first); a replayed key
//     is already paid, lack of Sparks is insufficient;
//  4. in one statement, move paid_through of the debited Marquees to the end
//     of their day (never back: GREATEST, and a trigger refuses it) and mark
//     the refused ones unfunded, except a Marquee still inside a paid day,
//     which stays funded;
//  5. complete the batch's River jobs with their results as output
//     (internal/platform/rivercomplete), and COMMIT.
//
// A retry after a crash anywhere in between finds nothing committed or
// finds the day paid; the wallet key makes a second debit impossible. A
// failed batch fails each of its jobs and River retries each. Two days of
// one Marquee in one batch never share its transaction: the earlier is
// funded first and each later one after it, alone, whatever order they
// arrived in.
//
// Insufficient Sparks are not an error: the Marquee is marked unfunded and
// the job completes. Because completed fund_day jobs do not count towards
// uniqueness, the next sweep enqueues the day again; after a top-up it is
// funded within one sweep interval, and the wallet key keeps it at one debit.
//
// # The gate
//
// Funded reports paid_through > now; the API answers 402 when it is false.
package enforcer
