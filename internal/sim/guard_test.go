package sim_test

import (
	"go/parser"
	"go/token"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/fibe-dev/billing/"

// TestModelKnowsNoBilling: the model and the histories it reads import no
// package of billing, so the model cannot share a rule with the code it
// judges.
func TestModelKnowsNoBilling(t *testing.T) {
	t.Parallel()
	for _, file := range []string{"model.go", "history.go"} {
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
		require.NoError(t, err)
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			require.NoError(t, err)
			require.False(t, strings.HasPrefix(path, strings.TrimSuffix(module, "/")), "%s imports %s", file, path)
		}
	}
}

// TestNoServiceImportsTheSimulator: the simulator is lab code; the binary
// does not depend on it.
func TestNoServiceImportsTheSimulator(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", module+"cmd/billing").CombinedOutput()
	require.NoError(t, err, string(out))
	deps := strings.Fields(string(out))
	require.Contains(t, deps, module+"cmd/billing")
	require.NotContains(t, deps, module+"internal/sim")
}
