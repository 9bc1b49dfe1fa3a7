// Package proctest holds what tests that run external programs share.
package proctest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// RequireTool returns the first candidate that exists: an absolute path,
// or a name looked up on PATH ("" candidates are ignored, so an override
// from the environment can come first). When none does, the test is
// skipped on a developer's machine but fails under CI (CI set): there
// .ci/run installs every tool, and a skip would hide a test that never ran.
// install says how to get the tool.
func RequireTool(t testing.TB, install string, candidates ...string) string {
	t.Helper()
	for _, c := range candidates {
		if c == "" {
			continue
		}
		if filepath.IsAbs(c) {
			if _, err := os.Stat(c); err == nil {
				return c
			}
			continue
		}
		if p, err := exec.LookPath(c); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("none of %q is installed, and CI is set: .ci/run installs it (%s)", candidates, install)
	}
	t.Skipf("none of %q is installed (%s)", candidates, install)
	return ""
}
