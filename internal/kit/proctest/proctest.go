// Package proctest holds what slow tests share: finding an external
// program, skipping (or, under CI, failing) without it, and leaving the
// slow tests out of the inner loop (`go test -short`, see Slow and Size).
//
// A skip for a missing tool is also recorded, one line per test, in the
// file BILLING_TEST_SKIPS names (when set): `go test ./...` shows nothing of
// a passing package, so scripts/test, which sets it, prints after the run
// which tests did not run and how to install what they need.
//
// Part of the test kit (one package per kind of part; docs/testing.md).
package proctest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// SkipsEnv names the file that RequireTool appends its skips to.
const SkipsEnv = "BILLING_TEST_SKIPS"

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
	if err := recordSkip(toolName(candidates), install, t.Name()); err != nil {
		t.Logf("proctest: cannot record the skip in $%s: %v", SkipsEnv, err)
	}
	t.Skipf("none of %q is installed (%s)", candidates, install)
	return ""
}

// toolName is what the summary calls the tool: the first candidate's name.
func toolName(candidates []string) string {
	for _, c := range candidates {
		if c != "" {
			return filepath.Base(c)
		}
	}
	return "?"
}

// recordSkip appends "tool<TAB>install<TAB>test" to $BILLING_TEST_SKIPS.
// Test binaries of several packages append at once: each line is one
// O_APPEND write, which the kernel does not interleave.
func recordSkip(tool, install, test string) error {
	path := os.Getenv(SkipsEnv)
	if path == "" {
		return nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	clean := strings.NewReplacer("\t", " ", "\n", " ")
	_, err = fmt.Fprintf(f, "%s\t%s\t%s\n", clean.Replace(tool), clean.Replace(install), clean.Replace(test))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Slow skips t under `go test -short`, the inner loop, saying why: a test
// that builds or runs the billing binary, drives a browser, Prometheus or
// a failover formation, or runs a long model. scripts/test, the README's
// command, runs without -short, so each such test still runs there and in
// CI. Every test the inner loop leaves out says so through Slow, so
// `grep -rn proctest.Slow` lists them.
func Slow(t testing.TB, why string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: %s (runs in scripts/test)", why)
	}
}

// Size is small under `go test -short` and full otherwise: for a model or
// simulation that proves the same property at any size, so the inner loop
// runs it small rather than not at all.
func Size(small, full int) int {
	if testing.Short() {
		return small
	}
	return full
}
