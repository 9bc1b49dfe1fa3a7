package bench

import (
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

func TestOwnersOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		arg     string
		want    int
		wantErr bool
	}{
		{"0", 100, false}, {"1", 1, false}, {"100", 100, false}, {"101", 0, true}, {"-1", 0, true},
	} {
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		ownersFlag(fs)
		require.NoError(t, fs.Parse([]string{"--owners", tc.arg}))
		got, err := ownersOf(fs, 100)
		if tc.wantErr {
			require.Error(t, err, tc.arg)
			continue
		}
		require.NoError(t, err, tc.arg)
		require.Equal(t, tc.want, got, tc.arg)
	}
}

func TestDealtSpreadsMarqueesRoundRobin(t *testing.T) {
	t.Parallel()
	require.Equal(t, []int64{7, 8, 9, 7, 8}, dealt([]int64{7, 8, 9}, 5))
	require.Equal(t, []int64{7, 7, 7}, dealt([]int64{7}, 3))
	// Every owner can pay for all its Marquees for 1000 days.
	require.Equal(t, int64(10_000*fundingPrice*1000), ownedSparks(10_000, 1))
	require.Equal(t, int64(2*fundingPrice*1000), ownedSparks(3, 2))
}
