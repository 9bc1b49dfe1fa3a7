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
// fund_day job per (Marquee, day), River-unique by those args. The fund_day
// worker does everything in one transaction: one statement locks the
// Marquee, checks that the day is not paid yet and moves paid_through to the
// end of that day (never back: the database refuses it); then the day's
// price is debited through the wallet with the key
// marquee:<id>:<YYYY-MM-DD>:funding, and the River job is completed in the
// same transaction. A retry after a crash anywhere in between either finds
// nothing committed or finds the day paid; the wallet key makes a second
// debit impossible even for a caller that skips the Marquee check.
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
