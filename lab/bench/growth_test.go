package bench

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseSizes(t *testing.T) {
	t.Parallel()
	got, err := parseSizes("1000000, 10_000_000")
	require.NoError(t, err)
	require.Equal(t, []int64{1_000_000, 10_000_000}, got)
	for _, bad := range []string{"", "0", "-5", "10,5", "10,10", "x", "1e6"} {
		_, err := parseSizes(bad)
		require.Error(t, err, bad)
	}
}

func TestLastLines(t *testing.T) {
	t.Parallel()
	require.Equal(t, "c\nd", lastLines("a\nb\nc\nd\n", 2))
	require.Equal(t, "a", lastLines("a", 5))
}
