package provider

import (
	"fmt"
	"slices"
	"strings"
)

// What a documented status of a refund or dispute event means, beyond the
// states a fact holds (StateSucceeded, StateOpen, StateWon, StateLost).
const (
	// StateIgnored: the event is acknowledged and moves nothing (a refund
	// still waiting for approval, a chargeback warning).
	StateIgnored = "ignored"
	// StateRefused: a documented status billing does not act on; the
	// driver refuses the event with the reason its table gives.
	StateRefused = "refused"
)

// StateTable is, as data, how one driver reads the state of every refund
// and dispute event type it accepts: where the status sits in the stored
// payload and what each documented status means. A status the table does
// not list is refused. The audit builds its recomputation of invariant 10
// from these tables, so the drivers and the audit read one mapping.
type StateTable struct {
	Provider string
	Events   []EventStates
}

// EventStates are the documented statuses of one event type.
type EventStates struct {
	Type string
	// Fields are the JSON paths, from the payload's root, of the values
	// that make the status, joined by "/" in this order (a missing value
	// is ""). None: the event type alone says what the event is, and its
	// one status is "".
	Fields [][]string
	States map[string]Meaning // by status
}

// Meaning is what one documented status means.
type Meaning struct {
	Kind  string // ReversalRefund or ReversalDispute; "" when ignored or refused
	State string // a fact state, StateIgnored or StateRefused
	Why   string // for StateRefused: the reason given
}

// Status joins the values of an event's status fields as the table keys
// them.
func Status(values ...string) string { return strings.Join(values, "/") }

// Decide returns what status means for an event of type typ: its meaning,
// or an error wrapping ErrMalformedPayload that names the status when it
// is refused or not documented.
func (t StateTable) Decide(typ, status string) (Meaning, error) {
	i := slices.IndexFunc(t.Events, func(e EventStates) bool { return e.Type == typ })
	if i < 0 {
		return Meaning{}, fmt.Errorf("%w: %s event type %q has no state table", ErrMalformedPayload, t.Provider, typ)
	}
	m, ok := t.Events[i].States[status]
	switch {
	case !ok:
		return Meaning{}, fmt.Errorf("%w: unknown %s status %q", ErrMalformedPayload, typ, Truncate(status))
	case m.State == StateRefused:
		return Meaning{}, fmt.Errorf("%w: %s status %q: %s", ErrMalformedPayload, typ, status, m.Why)
	}
	return m, nil
}
