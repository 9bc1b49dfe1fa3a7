package wallet_test

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/wallet"
)

var updateGolden = flag.Bool("update", false, "rewrite wallet/testdata/statements/*.sql from the generated statements")

// TestStatementsMatchGolden holds every post statement that statement.go
// generates against its text in testdata/statements, so a change to the
// one SQL every post runs shows in review as a diff of that SQL. After an
// intended change: go test ./wallet/ -run TestStatementsMatchGolden -update
func TestStatementsMatchGolden(t *testing.T) {
	t.Parallel()
	for name, sql := range wallet.Statements() {
		path := filepath.Join("testdata", "statements", name+".sql")
		if *updateGolden {
			require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
			require.NoError(t, os.WriteFile(path, []byte(sql+"\n"), 0o644))
			continue
		}
		want, err := os.ReadFile(path)
		require.NoError(t, err, "no golden file for the %s statement: run with -update", name)
		require.Equal(t, string(want), sql+"\n", "the %s statement changed: review it, then run with -update", name)
	}
}
