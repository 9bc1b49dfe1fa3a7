package timeline

import (
	"bufio"
	"fmt"
	"io"
	"strings"

	"github.com/fibe-dev/billing/internal/platform/safetext"
)

// Title names the subject: "Order 7", "Payment stripe pi_123", "Player 3".
func (t *Timeline) Title() string {
	switch t.Subject.Kind {
	case SubjectPayment:
		return fmt.Sprintf("Payment %s %s", t.Subject.Provider, t.Subject.ID)
	case SubjectPlayer:
		s := "Player " + t.Subject.ID
		if t.Subject.Since != nil {
			s += " since " + minute(*t.Subject.Since)
		}
		return s
	}
	return "Order " + t.Subject.ID
}

// KeysText spells a line's keys: `Idempotency-Key "k1"; wallet key "order:7:fulfilment"`.
func (l Line) KeysText() string {
	parts := make([]string, len(l.Keys))
	for i, k := range l.Keys {
		parts[i] = fmt.Sprintf("%s %q", k.Kind, k.Value)
	}
	return strings.Join(parts, "; ")
}

// Stamp is the line's time as the text and the page print it (UTC).
func (l Line) Stamp() string { return stamp(l.At) }

// textIndent lines up continuation lines under the text column.
const textIndent = "                                     "

// WriteText prints the timeline for a terminal: the verdict, then one
// line per event with its keys, details and River UI link beneath. Ids,
// reasons and errors are what a provider or a job chose, so every line
// is escaped (package safetext) before it reaches the terminal.
func (t *Timeline) WriteText(w io.Writer) error {
	b := bufio.NewWriter(w)
	line := func(s string) { b.WriteString(safetext.Escape(s) + "\n") }
	line(t.Title())
	line("")
	line(t.Verdict)
	if t.Attention {
		line("(needs attention)")
	}
	for _, n := range t.Notes {
		line("note: " + n)
	}
	line("")
	line(fmt.Sprintf("%-23s  %-9s  %s", "TIME (UTC)", "LAYER", "WHAT"))
	for _, l := range t.Lines {
		text := l.Text
		if l.Flag != "" {
			text = "[" + strings.ToUpper(l.Flag) + "] " + text
		}
		line(fmt.Sprintf("%-23s  %-9s  %s", l.Stamp(), l.Layer, text))
		if len(l.Keys) > 0 {
			line(textIndent + "key: " + l.KeysText())
		}
		for _, d := range l.Details {
			line(textIndent + d)
		}
		if len(l.Entries) > 0 {
			line(textIndent + "ledger: " + l.EntriesText())
		}
		if l.RiverUI != "" {
			line(textIndent + "River UI: " + l.RiverUI)
		}
	}
	return b.Flush()
}
