package api_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/kit/proctest"
)

// RedoclyVersion is the Redocly CLI release .ci/run installs.
const RedoclyVersion = "2.77.0"

// TestDocumentPassesTheLinter runs Redocly CLI's lint with its recommended
// ruleset (redocly.yaml) over openapi.yaml: no error, no warning, nothing
// ignored. The test is skipped without the tool except under CI.
func TestDocumentPassesTheLinter(t *testing.T) {
	t.Parallel()
	proctest.Slow(t, "runs the Redocly linter, about 30 s")
	redocly := proctest.RequireTool(t, "npm install -g @redocly/cli@"+RedoclyVersion, "redocly")
	cmd := exec.Command(redocly, "lint", "--config", "redocly.yaml", "--format", "json", "openapi.yaml")
	cmd.Env = append(os.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true")
	out, err := cmd.Output()
	var report struct {
		Totals struct {
			Errors, Warnings, Ignored int
		}
		Version  string
		Problems []struct {
			RuleID  string `json:"ruleId"`
			Message string
		}
	}
	require.NoError(t, json.Unmarshal(out, &report), "redocly lint printed no report (%v):\n%s", err, out)
	require.Equal(t, RedoclyVersion, report.Version)
	require.Empty(t, report.Problems, "api/openapi.yaml: %+v", report.Problems)
	require.Zero(t, report.Totals.Errors+report.Totals.Warnings+report.Totals.Ignored, "%+v", report.Totals)
	require.NoError(t, err, "redocly lint failed")
}
