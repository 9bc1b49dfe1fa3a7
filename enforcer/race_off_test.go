//go:build !race

package enforcer_test

const raceEnabled = false
