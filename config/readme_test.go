package config

import (
	"bufio"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/viper"
	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/provider/drivers"
)

// readmeRow is one row of the README's configuration table.
type readmeRow struct{ names, defaults string }

var readmeVar = regexp.MustCompile("`BILLING_([A-Z0-9_]+)`")

// readmeRows reads the configuration table of the repository's README:
// the rows whose first cell names BILLING_* variables, by variable.
func readmeRows(t *testing.T) map[string]readmeRow {
	t.Helper()
	f, err := os.Open("../README.md")
	require.NoError(t, err)
	defer f.Close()
	rows := map[string]readmeRow{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		cells := strings.Split(sc.Text(), "|")
		if len(cells) < 4 || !strings.Contains(cells[1], "`BILLING_") {
			continue
		}
		for _, m := range readmeVar.FindAllStringSubmatch(cells[1], -1) {
			rows[strings.ToLower(m[1])] = readmeRow{names: cells[1], defaults: cells[2]}
		}
	}
	require.NoError(t, sc.Err())
	return rows
}

// TestReadmeTableMatchesSettings fails when the README's configuration
// table and the settings disagree: a variable the program reads that the
// table lacks, a row for a variable it does not read, or a default that is
// not the one the program applies. The providers' settings are their
// drivers' facts'.
func TestReadmeTableMatchesSettings(t *testing.T) {
	t.Parallel()
	rows := readmeRows(t)
	facts := drivers.Facts()
	keys := append(slices.Clone(envKeys), providerKeys(facts)...)
	var documented []string
	for k := range rows {
		documented = append(documented, k)
	}
	slices.Sort(documented)
	read := slices.Clone(keys)
	slices.Sort(read)
	require.Equal(t, read, documented, "README's configuration table lists other variables than the program reads")

	v := viper.New()
	setDefaults(v)
	setProviderDefaults(v, facts)
	for _, key := range keys {
		def := v.GetString(key)
		if def == "" {
			continue
		}
		require.Contains(t, rows[key].defaults, "`"+def+"`",
			"README's default for BILLING_%s is not the program's %q", strings.ToUpper(key), def)
	}
}
