package e2e_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A race detector's report in any process log is found and quoted; logs
// without one pass.
func TestDataRaceFindsTheReport(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clean := filepath.Join(dir, "web-1.log")
	racy := filepath.Join(dir, "worker-2.log")
	require.NoError(t, os.WriteFile(clean, []byte("{\"level\":\"INFO\",\"msg\":\"listening\"}\n"), 0o644))
	require.NoError(t, os.WriteFile(racy, []byte("{\"msg\":\"started\"}\n==================\nWARNING: DATA RACE\nWrite at 0x00c000123 by goroutine 7:\n"), 0o644))

	require.NoError(t, dataRace(clean))
	err := dataRace(clean, racy)
	require.ErrorContains(t, err, "worker-2.log reports a data race")
	require.ErrorContains(t, err, "Write at 0x00c000123 by goroutine 7")
	require.Error(t, dataRace(filepath.Join(dir, "missing.log")), "a log that cannot be read is not a clean one")
}
