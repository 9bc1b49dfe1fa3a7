package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

// hostileID is an id a signed delivery may carry (intake refuses only NUL):
// a terminal would clear the screen, recolour it and reverse what follows.
const hostileID = "pi_\x1b[2J\x1b[31mred\u009b0m\u202eevil\x7f\n"

// requirePrintable fails if out holds anything but printable runes and the
// newlines that end its lines.
func requirePrintable(t *testing.T, out string) {
	t.Helper()
	for _, r := range out {
		require.True(t, r == '\n' || unicode.IsPrint(r), "the output holds %U:\n%q", r, out)
	}
}

// Every table and result line of the CLI escapes what a provider chose;
// --json keeps it (JSON escapes it its own way).
func TestTextOutputIsEscaped(t *testing.T) {
	t.Parallel()
	type row struct{ ID string }
	rows := []row{{hostileID}, {"pi_plain"}}
	var b bytes.Buffer
	require.NoError(t, printList(&b, rows, false, func(r row) string { return "payment " + r.ID }, "2 payments "+hostileID))
	requirePrintable(t, b.String())
	require.Equal(t, "payment pi_\\x1b[2J\\x1b[31mred\\u009b0m\\u202eevil\\x7f\\n\npayment pi_plain\n"+
		"2 payments pi_\\x1b[2J\\x1b[31mred\\u009b0m\\u202eevil\\x7f\\n\n", b.String(), "one line per row, ids readable")

	b.Reset()
	require.NoError(t, printResult(&b, false, nil, fmt.Sprintf("refund %s recorded", hostileID)))
	requirePrintable(t, b.String())
	require.Equal(t, 1, bytes.Count(b.Bytes(), []byte("\n")))

	b.Reset()
	require.NoError(t, printList(&b, rows, true, nil, ""))
	var back []row
	require.NoError(t, json.Unmarshal(b.Bytes(), &back))
	require.Equal(t, rows, back, "--json keeps the id as sent")

	b.Reset()
	textViolations{&b}.violation("invariant 10: payment stripe " + hostileID + ": refused")
	requirePrintable(t, b.String())

	msg := errorLine(errors.New(`wallet: key "k" ` + "\x1b[2J" + hostileID))
	requirePrintable(t, msg)
}

// The error line names the program once, whatever the error starts with.
func TestErrorLineReadsOnce(t *testing.T) {
	t.Parallel()
	for err, want := range map[error]string{
		errors.New("billing dev is already running in .billing-dev (pid 7)"):     "billing dev is already running in .billing-dev (pid 7)",
		fmt.Errorf("explain: %w", errors.New("timeline: not found: no order 9")): "billing: explain: timeline: not found: no order 9",
		errors.New("database: failed to connect\nhost down\nhost down"):          "billing: database: failed to connect; host down",
	} {
		require.Equal(t, want, errorLine(err))
	}
}
