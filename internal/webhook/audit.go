package webhook

import (
	"context"
	"fmt"
	"time"

	"github.com/fibe-dev/billing/fulfillment"
)

// Violation is one broken webhook invariant.
type Violation struct {
	Invariant int    `json:"invariant"` // 6, as numbered in docs/contract.md
	Check     string `json:"check"`
	Provider  string `json:"provider,omitempty"`
	EventID   string `json:"event_id,omitempty"`
	Detail    string `json:"detail"`
}

func (v Violation) String() string {
	return fmt.Sprintf("invariant %d %s %s/%s: %s", v.Invariant, v.Check, v.Provider, v.EventID, v.Detail)
}

// AuditOptions scope Audit.
type AuditOptions struct {
	// Since skips events claimed earlier: River deletes finished jobs after
	// its retention (24 h for completed and cancelled jobs by default), so
	// only events younger than that can be matched with their job. Zero
	// means 23 hours before now.
	Since time.Time
}

// auditChecks are invariant 6 ("one webhook_events row per (provider,
// event id); every claimed fulfillment event has its River job") as queries
// whose only rows are violations. One row per event is the UNIQUE
// constraint; the job checks are what a broken claim transaction would leave.
var auditChecks = []struct {
	name, sql string
	since     bool // takes Since as $1
}{
	{"payment_event_without_job", `
SELECT e.provider, e.event_id, format('claimed at %s for order %s, no fulfill_order job', e.claimed_at, e.order_id)
FROM webhook_events e
WHERE e.order_id IS NOT NULL AND e.claimed_at >= $1 AND NOT EXISTS (SELECT 1 FROM river_job j
	WHERE j.kind = 'fulfill_order' AND j.args->>'provider' = e.provider AND j.args->>'event_id' = e.event_id)`, true},
	{"job_without_claimed_event", `
SELECT j.args->>'provider', j.args->>'event_id', format('fulfill_order job %s has no claimed event', j.id)
FROM river_job j
WHERE j.kind = 'fulfill_order' AND NOT EXISTS (SELECT 1 FROM webhook_events e
	WHERE e.provider = j.args->>'provider' AND e.event_id = j.args->>'event_id' AND e.order_id IS NOT NULL)`, false},
	{"event_with_several_jobs", `
SELECT j.args->>'provider', j.args->>'event_id', format('%s fulfill_order jobs', count(*))
FROM river_job j WHERE j.kind = 'fulfill_order'
GROUP BY 1, 2 HAVING count(*) > 1`, false},
}

// Audit checks invariant 6 and returns every violation (none when clean).
func Audit(ctx context.Context, db fulfillment.DB, opts AuditOptions) ([]Violation, error) {
	if opts.Since.IsZero() {
		opts.Since = time.Now().Add(-23 * time.Hour)
	}
	var out []Violation
	for _, c := range auditChecks {
		var args []any
		if c.since {
			args = append(args, opts.Since)
		}
		rows, err := db.Query(ctx, c.sql, args...)
		if err != nil {
			return nil, fmt.Errorf("webhook: audit %s: %w", c.name, err)
		}
		for rows.Next() {
			v := Violation{Invariant: 6, Check: c.name}
			if err := rows.Scan(&v.Provider, &v.EventID, &v.Detail); err != nil {
				rows.Close()
				return nil, fmt.Errorf("webhook: audit %s: %w", c.name, err)
			}
			out = append(out, v)
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("webhook: audit %s: %w", c.name, err)
		}
	}
	return out, nil
}

// AuditCheckNames lists the checks Audit runs, by name, in order.
func AuditCheckNames() []string {
	names := make([]string, len(auditChecks))
	for i, c := range auditChecks {
		names[i] = c.name
	}
	return names
}
