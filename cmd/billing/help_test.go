package main

import (
	"slices"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
)

// serving are the commands that run until stopped instead of reporting a
// result: they alone take no --json.
var serving = []string{"billing web", "billing worker", "billing dev"}

// TestEveryReportingCommandTakesJSON walks the command tree: every runnable
// command that reports a result has a --json flag.
func TestEveryReportingCommandTakesJSON(t *testing.T) {
	t.Parallel()
	var checked int
	walk(newRootCmd(), func(c *cobra.Command) {
		if !c.Runnable() || c.Name() == "help" || c.Name() == "completion" || c.Parent() != nil && c.Parent().Name() == "completion" {
			return
		}
		if slices.Contains(serving, c.CommandPath()) {
			return
		}
		checked++
		require.NotNil(t, c.Flags().Lookup("json"), "%s reports a result and takes no --json", c.CommandPath())
	})
	require.GreaterOrEqual(t, checked, 14, "the walk found too few commands")
}

// TestHelpShowsBareBooleans: no help lists a boolean flag as
// --name[=true|false]; it shows --json, --once, --help.
func TestHelpShowsBareBooleans(t *testing.T) {
	t.Parallel()
	walk(newRootCmd(), func(c *cobra.Command) {
		usage := c.UsageString()
		require.NotContains(t, usage, "[=true|false]", c.CommandPath())
		require.Contains(t, usage, "-h, --help ", c.CommandPath())
		if f := c.Flags().Lookup("json"); f != nil {
			require.Regexp(t, `\n\s+--json\s+\S`, usage, c.CommandPath())
		}
	})
	out := runBilling(t, nil, "enforce", "--help")
	require.Contains(t, out, "      --once ")
	require.NotContains(t, out, "[=true|false]")
}

func walk(c *cobra.Command, f func(*cobra.Command)) {
	c.InitDefaultHelpFlag()
	f(c)
	for _, sub := range c.Commands() {
		walk(sub, f)
	}
}
