package bench

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// pgbench substitutes :name everywhere, string literals included, so a
// literal such as ':mana_debit' silently becomes an untyped parameter and
// the script aborts at prepare time. The scripts must never contain one.
func TestPgBenchScriptsHaveNoVariablesInLiterals(t *testing.T) {
	t.Parallel()
	literal := regexp.MustCompile(`'[^']*'`)
	variable := regexp.MustCompile(`:[A-Za-z_]`)
	for name, script := range map[string]string{
		"literalPost": literalPostScript, "ctePost": ctePostScript,
		"apiWrite": apiWriteScript, "claimEnqueue": claimEnqueueScript,
		"statementPost": statementPostScript, "statementReplay": statementReplayScript,
	} {
		for _, lit := range literal.FindAllString(script, -1) {
			require.False(t, variable.MatchString(lit), "%s: literal %s holds a pgbench variable", name, lit)
		}
	}
}
