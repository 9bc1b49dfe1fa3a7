package audit

import (
	"regexp"
	"strconv"
)

// Violation is one violation line with its invariant and check taken out,
// for a machine-readable report (`billing ledger verify --json`). Every
// check writes its lines as "invariant <n> <check>..." followed by the ids
// to look at and what is wrong, which Line keeps whole.
type Violation struct {
	Invariant int    `json:"invariant"`
	Check     string `json:"check"`
	Line      string `json:"line"`
}

var violationHead = regexp.MustCompile(`^invariant (\d+) ([^\s:]+)`)

// ParseViolation takes the invariant and check out of a violation line. A
// line not in that form has Invariant 0 and no Check.
func ParseViolation(line string) Violation {
	v := Violation{Line: line}
	if m := violationHead.FindStringSubmatch(line); m != nil {
		v.Invariant, _ = strconv.Atoi(m[1])
		v.Check = m[2]
	}
	return v
}
