package names_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/internal/domain/names"
)

func TestValid(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"a", "web-1", "my playground", strings.Repeat("é", 10), "日本語", "'; DROP TABLE x; --", "emoji 🎉"} {
		require.True(t, names.Valid(ok, 20), "%q", ok)
	}
	for _, bad := range []string{"", strings.Repeat("a", 21), "a\x00b", "tab\there", "\xff", "a\u202eb", "a\u200bb",
		"a\u0085b", "a\u2028b", "a\u2029b", "a\u00adb", "a\ufeffb", "a\x7fb", "new\nline"} {
		require.False(t, names.Valid(bad, 20), "%q", bad)
	}
}
