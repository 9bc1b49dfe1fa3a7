package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestProgressLineRateAndETA(t *testing.T) {
	t.Parallel()
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := &progressLine{now: func() time.Time { return clock }}
	require.Equal(t, "checking wallets: 0/1000 (0%)", p.format("checking wallets", 0, 1000))
	clock = clock.Add(2 * time.Second)
	require.Equal(t, "checking wallets: 250/1000 (25%)  125/s  ETA 6s", p.format("checking wallets", 250, 1000))
	require.Equal(t, "sweeping: 0", p.format("sweeping", 0, 0), "a new stage restarts the clock")
	clock = clock.Add(5 * time.Second)
	require.Equal(t, "sweeping: 500  100/s", p.format("sweeping", 500, 0), "no ETA without a total")

	var buf bytes.Buffer
	quiet := progressTo(&buf) // not a terminal
	quiet.show("checking wallets", 1, 2)
	quiet.clear()
	require.Empty(t, buf.String(), "nothing but the report when not a terminal")
}
