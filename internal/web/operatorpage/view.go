package operatorpage

import (
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"strings"

	"github.com/fibe-dev/billing/internal/ops/timeline"
)

// view is what the template renders.
type view struct {
	// The form, as the operator filled it in.
	Query, Kind, Provider, Since string
	Message                      string // nothing found, or bad input
	Timeline                     *timeline.Timeline
	Rows                         []row
	Unapplied                    []timeline.UnappliedPayment
	Debts                        []timeline.OpenDebt
	ListsError                   bool
	CSS                          template.CSS
	RiverUI, Path, AsOf          string
}

// form fills the form in from the request: the query sent, else what the
// shown timeline is about.
func (v *view) form(r *http.Request) {
	q := r.URL.Query()
	v.Query, v.Kind, v.Provider, v.Since = q.Get("q"), q.Get("kind"), q.Get("provider"), q.Get("since")
	if v.Timeline == nil || v.Query != "" {
		return
	}
	s := v.Timeline.Subject
	v.Query, v.Kind, v.Provider = s.ID, s.Kind, s.Provider
}

// severity classes of a row, by flag.
var severity = map[string]string{
	timeline.FlagUnapplied: "bad", timeline.FlagRefused: "bad", timeline.FlagFailed: "bad",
	timeline.FlagPending: "wait", timeline.FlagRetrying: "warn", timeline.FlagCancelled: "warn", timeline.FlagOwed: "warn",
}

// row is one timeline line as the table shows it.
type row struct {
	timeline.Line
	Class   string
	Links   []link
	Entries []string
}

type link struct{ Text, URL string }

func rows(tl *timeline.Timeline, riverUI string) []row {
	out := make([]row, len(tl.Lines))
	for i, l := range tl.Lines {
		r := row{Line: l, Class: severity[l.Flag], Links: links(l, tl, riverUI)}
		for _, e := range l.Entries {
			s := fmt.Sprintf("%s %+d", e.Account, e.Amount)
			if e.BalanceAfter != nil {
				s += fmt.Sprintf(" → balance %d", *e.BalanceAfter)
			}
			r.Entries = append(r.Entries, s)
		}
		out[i] = r
	}
	return out
}

// links are where a line leads: its job in River UI, and on a player's
// page its order.
func links(l timeline.Line, tl *timeline.Timeline, riverUI string) []link {
	var out []link
	if l.Refs.JobID != 0 {
		out = append(out, link{"job " + strconv.FormatInt(l.Refs.JobID, 10) + " in River UI",
			strings.TrimSuffix(riverUI, "/") + strings.TrimPrefix(l.RiverUI, "/riverui")})
	}
	if id := l.Refs.OrderID; id != 0 && tl.Subject.Kind == timeline.SubjectPlayer {
		out = append(out, link{"order " + strconv.FormatInt(id, 10), orderURL(id)})
	}
	return out
}

// SeverityOf is the class a flag's badge and row take.
func (v *view) SeverityOf(flag string) string { return severity[flag] }
