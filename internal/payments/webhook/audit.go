package webhook

import (
	"context"
	"fmt"
	"time"

	"github.com/fibe-dev/billing/fulfillment"
)

// Violation is one broken webhook invariant.
type Violation struct {
	Invariant int    `json:"invariant"` // 6 or 11, as numbered in docs/contract.md
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
	// Since is ignored: every claimed event is checked whatever its age,
	// since invariant 11 holds of the event's outcome, which outlives its
	// River job. Kept so callers that set it still build.
	Since time.Time
}

// auditChecks are invariant 6 ("one webhook_events row per (provider,
// event id); a claimed event's job is inserted in the claim's
// transaction") and invariant 11 ("a claimed event ends in exactly one
// recorded outcome") as queries whose only rows are violations. One row
// per event is the UNIQUE constraint; the outcome column is one outcome.
var auditChecks = []struct {
	invariant int
	name, sql string
}{
	{11, "event_without_outcome", `
SELECT w.provider, w.event_id, format('%s claimed at %s has no outcome and no live job (%s): billing webhooks redrive',
	w.event_type, w.claimed_at, coalesce((SELECT string_agg(format('%s job %s %s', j.kind, j.id, j.state), ', ' ORDER BY j.id)
		FROM river_job j WHERE j.kind IN ('fulfill_order', 'reverse_payment')
			AND j.args->>'provider' = w.provider AND j.args->>'event_id' = w.event_id), 'no job at all'))
FROM webhook_events w
WHERE w.outcome IS NULL AND NOT ` + liveJob},
	{6, "job_without_claimed_event", `
SELECT j.args->>'provider', j.args->>'event_id', format('fulfill_order job %s has no claimed event', j.id)
FROM river_job j
WHERE j.kind = 'fulfill_order' AND NOT EXISTS (SELECT 1 FROM webhook_events e
	WHERE e.provider = j.args->>'provider' AND e.event_id = j.args->>'event_id' AND e.order_id IS NOT NULL)`},
	// A job cancelled or discarded before it decided is replaced by a
	// redrive's; more than one that ran or will run is a double claim.
	{6, "event_with_several_jobs", `
SELECT j.args->>'provider', j.args->>'event_id', format('%s %s jobs not cancelled or discarded', count(*), j.kind)
FROM river_job j WHERE j.kind IN ('fulfill_order', 'reverse_payment') AND j.state NOT IN ('cancelled', 'discarded')
GROUP BY 1, 2, j.kind HAVING count(*) > 1`},
}

// Audit checks invariants 6 and 11 and returns every violation (none when
// clean).
func Audit(ctx context.Context, db fulfillment.DB, _ AuditOptions) ([]Violation, error) {
	var out []Violation
	for _, c := range auditChecks {
		rows, err := db.Query(ctx, c.sql)
		if err != nil {
			return nil, fmt.Errorf("webhook: audit %s: %w", c.name, err)
		}
		for rows.Next() {
			v := Violation{Invariant: c.invariant, Check: c.name}
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
