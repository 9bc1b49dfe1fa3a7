//go:build race

package enforcer_test

const raceEnabled = true
