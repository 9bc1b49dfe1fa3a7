package fulfillment

import (
	"fmt"
	"slices"
	"strings"

	"github.com/fibe-dev/billing/internal/provider"
)

// The audit reads a reversal event's state from the payload the provider
// sent (webhook_events.payload), through the drivers' own tables of
// documented statuses (provider.StateTable), not from the state the worker
// stored: a worker that misread a status is then caught by the facts and
// clawback it would have changed. An event whose stored payload is not
// its provider's envelope (an event recorded before payloads were kept)
// keeps its stored state.

// truthEventsSQL is a subquery of reversal_events with kind and state
// recomputed from the payload where the tables can (and the stored ones
// beside), to read in place of reversal_events.
func truthEventsSQL(tables []provider.StateTable) string {
	return `(SELECT e.id, e.provider, e.event_id, e.reversal_id, e.payment, e.status, e.amount, e.currency,
		e.payment_ref, e.kind AS stored_kind, e.state AS stored_state, s.status AS payload_status, m.state AS meant,
		coalesce(nullif(m.kind, ''), e.kind) AS kind,
		CASE WHEN m.state IS NULL OR m.state IN ('ignored', 'refused') THEN e.state ELSE m.state END AS state
	FROM reversal_events e
	LEFT JOIN webhook_events w ON w.provider = e.provider AND w.event_id = e.event_id
	CROSS JOIN LATERAL (SELECT CASE WHEN ltrim(convert_from(w.payload, 'UTF8')) LIKE '{%'
		THEN convert_from(w.payload, 'UTF8')::jsonb END AS j) x
	CROSS JOIN LATERAL (SELECT CASE WHEN x.j IS NULL OR x.j = '{}'::jsonb THEN NULL ` + statusCases(tables) + ` END AS status) s
	LEFT JOIN (` + meaningsSQL(tables) + `) m (provider, event_type, status, kind, state)
		ON m.provider = e.provider AND m.event_type = w.event_type AND m.status = s.status)`
}

// statusCases are the CASE arms that read each event type's status from
// its payload j, as its driver's table says where it is.
func statusCases(tables []provider.StateTable) string {
	var b strings.Builder
	for _, t := range tables {
		for _, e := range t.Events {
			parts := []string{"''"}
			if len(e.Fields) > 0 {
				parts = parts[:0]
				for _, path := range e.Fields {
					parts = append(parts, "coalesce(x.j #>> "+quote("{"+strings.Join(path, ",")+"}")+", '')")
				}
			}
			fmt.Fprintf(&b, "WHEN w.provider = %s AND w.event_type = %s THEN %s ", quote(t.Provider), quote(e.Type),
				strings.Join(parts, " || '/' || "))
		}
	}
	return b.String()
}

// meaningsSQL is the drivers' tables as a VALUES list.
func meaningsSQL(tables []provider.StateTable) string {
	rows := []string{"(NULL::text, NULL::text, NULL::text, NULL::text, NULL::text)"}
	for _, t := range tables {
		for _, e := range t.Events {
			statuses := make([]string, 0, len(e.States))
			for s := range e.States {
				statuses = append(statuses, s)
			}
			slices.Sort(statuses)
			for _, s := range statuses {
				m := e.States[s]
				rows = append(rows, fmt.Sprintf("(%s, %s, %s, %s, %s)", quote(t.Provider), quote(e.Type), quote(s),
					quote(m.Kind), quote(m.State)))
			}
		}
	}
	return "VALUES " + strings.Join(rows, ", ")
}

// quote is s as an SQL string literal.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// eventStateCheck is invariant 10's check that every accepted event's
// stored kind and state are what its payload's status means.
func eventStateCheck(events string) auditCheck {
	return auditCheck{10, "reversal_event_state_vs_payload", `
SELECT coalesce(p.order_id, 0), format('%s event %s (%s %s) was accepted as %s %s; its payload''s status %L means %s',
	e.provider, e.event_id, e.stored_kind, e.reversal_id, e.stored_kind, e.stored_state, e.payload_status,
	coalesce(nullif(e.meant, ''), 'nothing its provider documents'))
FROM ` + events + ` e LEFT JOIN payments p ON p.id = e.payment
WHERE e.status = 'accepted' AND e.payload_status IS NOT NULL
	AND (e.meant IS NULL OR e.meant IN ('ignored', 'refused') OR e.kind <> e.stored_kind OR e.state <> e.stored_state)`}
}
