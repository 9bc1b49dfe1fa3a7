package config_test

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/fibe-dev/billing"

// listed is what `go list -deps -test -json` says of one package.
type listed struct {
	ImportPath   string
	Deps         []string
	Imports      []string
	TestImports  []string
	XTestImports []string
}

// goList lists pattern's packages with their dependencies and those of
// their tests.
func goList(t *testing.T, pattern string) []listed {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-test", "-json=ImportPath,Deps,Imports,TestImports,XTestImports",
		pattern).Output()
	require.NoError(t, err)
	var pkgs []listed
	for dec := json.NewDecoder(bytes.NewReader(out)); dec.More(); {
		var p listed
		require.NoError(t, dec.Decode(&p))
		pkgs = append(pkgs, p)
	}
	require.NotEmpty(t, pkgs)
	return pkgs
}

// TestOnlyCmdImportsConfig: cmd/billing is the one composition root.
// No package below cmd, nor its tests, depends on config; they take their
// own Options, which cmd/billing builds from the configuration.
func TestOnlyCmdImportsConfig(t *testing.T) {
	t.Parallel()
	seen := 0
	for _, p := range goList(t, module+"/...") {
		name, _, _ := strings.Cut(p.ImportPath, " ") // "pkg [pkg.test]" for a test build
		name = strings.TrimSuffix(strings.TrimSuffix(name, ".test"), "_test")
		if !strings.HasPrefix(name, module) || name == module+"/config" || strings.HasPrefix(name, module+"/cmd/") {
			continue
		}
		seen++
		for _, deps := range [][]string{p.Deps, p.Imports, p.TestImports, p.XTestImports} {
			require.False(t, slices.Contains(deps, module+"/config"), "%s depends on config", p.ImportPath)
		}
	}
	require.Greater(t, seen, 20, "go list answered for the module's packages")
}

// TestConfigImportsNoDomainPackage: config parses into plain values; it
// depends on no package of this module.
func TestConfigImportsNoDomainPackage(t *testing.T) {
	t.Parallel()
	for _, p := range goList(t, module+"/config") {
		if p.ImportPath != module+"/config" {
			continue
		}
		for _, d := range p.Deps {
			require.False(t, strings.HasPrefix(d, module+"/"), "config depends on %s", d)
		}
		return
	}
	t.Fatal("go list did not answer for config")
}
