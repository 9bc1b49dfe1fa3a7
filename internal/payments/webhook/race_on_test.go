//go:build race

package webhook_test

// raceEnabled: the race detector slows every job and delivery several
// times, so the largest tests shrink under it (and .ci/run also runs them
// at their named size without it).
const raceEnabled = true
