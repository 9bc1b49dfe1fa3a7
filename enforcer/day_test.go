package enforcer_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fibe-dev/billing/enforcer"
)

func TestServiceDay(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		at         time.Time
		tz         *time.Location
		day        string
		start, end time.Time
		hours      float64
	}{
		{"utc noon", time.Date(2024, 3, 10, 12, 0, 0, 0, utc), utc, "2024-03-10",
			time.Date(2024, 3, 10, 0, 0, 0, 0, utc), time.Date(2024, 3, 11, 0, 0, 0, 0, utc), 24},
		{"utc midnight belongs to the new day", time.Date(2024, 3, 11, 0, 0, 0, 0, utc), utc, "2024-03-11",
			time.Date(2024, 3, 11, 0, 0, 0, 0, utc), time.Date(2024, 3, 12, 0, 0, 0, 0, utc), 24},
		{"utc last nanosecond", time.Date(2024, 3, 10, 23, 59, 59, 999999999, utc), utc, "2024-03-10",
			time.Date(2024, 3, 10, 0, 0, 0, 0, utc), time.Date(2024, 3, 11, 0, 0, 0, 0, utc), 24},
		{"utc year end", time.Date(2024, 12, 31, 23, 0, 0, 0, utc), utc, "2024-12-31",
			time.Date(2024, 12, 31, 0, 0, 0, 0, utc), time.Date(2025, 1, 1, 0, 0, 0, 0, utc), 24},
		{"utc leap day", time.Date(2024, 2, 29, 1, 0, 0, 0, utc), utc, "2024-02-29",
			time.Date(2024, 2, 29, 0, 0, 0, 0, utc), time.Date(2024, 3, 1, 0, 0, 0, 0, utc), 24},
		{"instant given in another zone", time.Date(2024, 3, 10, 20, 0, 0, 0, newYork), utc, "2024-03-11",
			time.Date(2024, 3, 11, 0, 0, 0, 0, utc), time.Date(2024, 3, 12, 0, 0, 0, 0, utc), 24},
		// Spring forward: 2024-03-10 02:00 EST -> 03:00 EDT, a 23-hour day.
		{"new york spring forward", time.Date(2024, 3, 10, 12, 0, 0, 0, utc), newYork, "2024-03-10",
			time.Date(2024, 3, 10, 5, 0, 0, 0, utc), time.Date(2024, 3, 11, 4, 0, 0, 0, utc), 23},
		{"new york spring forward, last second", time.Date(2024, 3, 11, 3, 59, 59, 0, utc), newYork, "2024-03-10",
			time.Date(2024, 3, 10, 5, 0, 0, 0, utc), time.Date(2024, 3, 11, 4, 0, 0, 0, utc), 23},
		{"new york day after spring forward", time.Date(2024, 3, 11, 4, 0, 0, 0, utc), newYork, "2024-03-11",
			time.Date(2024, 3, 11, 4, 0, 0, 0, utc), time.Date(2024, 3, 12, 4, 0, 0, 0, utc), 24},
		// Fall back: 2024-11-03 02:00 EDT -> 01:00 EST, a 25-hour day.
		{"new york fall back", time.Date(2024, 11, 3, 12, 0, 0, 0, utc), newYork, "2024-11-03",
			time.Date(2024, 11, 3, 4, 0, 0, 0, utc), time.Date(2024, 11, 4, 5, 0, 0, 0, utc), 25},
		{"new york fall back, second 1am", time.Date(2024, 11, 3, 6, 30, 0, 0, utc), newYork, "2024-11-03",
			time.Date(2024, 11, 3, 4, 0, 0, 0, utc), time.Date(2024, 11, 4, 5, 0, 0, 0, utc), 25},
		{"new york before midnight, already tomorrow in utc", time.Date(2024, 11, 4, 4, 59, 0, 0, utc), newYork, "2024-11-03",
			time.Date(2024, 11, 3, 4, 0, 0, 0, utc), time.Date(2024, 11, 4, 5, 0, 0, 0, utc), 25},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.day, enforcer.ServiceDay(c.at, c.tz))
			require.True(t, c.end.Equal(enforcer.EndOfServiceDay(c.at, c.tz)), "end %v", enforcer.EndOfServiceDay(c.at, c.tz))
			start, end, err := enforcer.DayBounds(c.day, c.tz)
			require.NoError(t, err)
			require.True(t, c.start.Equal(start), "bounds start %v", start)
			require.True(t, c.end.Equal(end), "bounds end %v", end)
			require.Equal(t, c.hours, end.Sub(start).Hours())
			require.False(t, c.at.Before(start))
			require.True(t, c.at.Before(end))
		})
	}
}

func TestDayBoundsRejectsBadDays(t *testing.T) {
	t.Parallel()
	for _, day := range []string{"", "2024-3-10", "2024-03-32", "2024-02-30", "10/03/2024", "2024-03-10T00:00:00Z", " 2024-03-10"} {
		_, _, err := enforcer.DayBounds(day, utc)
		require.ErrorIs(t, err, enforcer.ErrInvalidDay, day)
	}
}
