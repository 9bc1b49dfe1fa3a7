package enforcer

import (
	"context"
	"fmt"
	"time"

	"github.com/fibe-dev/billing/wallet"
)

// FundingViolation is a breach of invariant 4 (docs/contract.md): at most one
// funding debit per Marquee per service day, for the Marquee's price, and
// every paid_through backed by its day's debit. paid_through moving back is
// refused by a trigger, so it cannot be found afterwards.
type FundingViolation struct {
	Check     string `json:"check"`
	MarqueeID int64  `json:"marquee_id,string"`
	Detail    string `json:"detail"`
}

func (v FundingViolation) String() string {
	return fmt.Sprintf("invariant 4 %s: marquee %d: %s", v.Check, v.MarqueeID, v.Detail)
}

// refMarqueeID is the Marquee id in a funding debit's reference
// (marquee:<id>:<day>), or NULL when that part is not a number a bigint
// holds: a hand-written reference must not make the audit fail on a cast.
const refMarqueeID = `CASE WHEN split_part(reference, ':', 2) ~ '^[0-9]{1,18}$' THEN split_part(reference, ':', 2)::bigint END`

// fundingChecks are SQL aggregations whose only rows are violations.
var fundingChecks = []struct{ name, sql string }{
	{"one_debit_per_day", `SELECT coalesce(` + refMarqueeID + `, 0),
		format('%s funding debits for %s', count(*), reference)
		FROM wallet_transactions WHERE kind = 'funding' GROUP BY reference HAVING count(*) > 1`},
	// The join is on the Marquee id parsed out of the reference (a hash
	// join), then the whole reference is compared: joining on the
	// reference alone, an expression of both sides, compared every funding
	// debit with every Marquee (hours at a few million of each).
	{"debit_is_price", `SELECT m.id, format('debit %s of %s, price %s', w.id, w.amount, m.daily_price)
		FROM wallet_transactions w JOIN marquees m ON m.id = ` + refMarqueeID + `
		WHERE w.kind = 'funding' AND w.reference = 'marquee:' || m.id || ':' || split_part(w.reference, ':', 3)
			AND (w.amount <> -m.daily_price OR w.player_id <> m.player_id
				OR w.idempotency_key <> ` + wallet.SQLFundingKey("m.id", "split_part(w.reference, ':', 3)") + `)`},
	{"paid_through_backed", `SELECT m.id, format('paid through %s without a debit for that day', m.paid_through)
		FROM marquees m WHERE m.paid_through IS NOT NULL AND NOT EXISTS (
			SELECT 1 FROM wallet_transactions w WHERE w.idempotency_key = ` +
		wallet.SQLFundingKey("m.id", "to_char((m.paid_through - interval '1 microsecond') AT TIME ZONE $1, 'YYYY-MM-DD')") + `)`},
}

// AuditFunding checks invariant 4 over the whole database; tz is the
// service-day time zone the Marquees were funded in. It returns the
// violations found (none when clean).
func AuditFunding(ctx context.Context, db DB, tz *time.Location) ([]FundingViolation, error) {
	var out []FundingViolation
	for _, c := range fundingChecks {
		var args []any
		if c.name == "paid_through_backed" {
			args = append(args, tz.String())
		}
		rows, err := db.Query(ctx, c.sql, args...)
		if err != nil {
			return nil, fmt.Errorf("enforcer: audit %s: %w", c.name, err)
		}
		for rows.Next() {
			v := FundingViolation{Check: c.name}
			if err := rows.Scan(&v.MarqueeID, &v.Detail); err != nil {
				rows.Close()
				return nil, fmt.Errorf("enforcer: audit %s: %w", c.name, err)
			}
			out = append(out, v)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("enforcer: audit %s: %w", c.name, err)
		}
	}
	return out, nil
}
