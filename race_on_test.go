//go:build race

package fairlock_test

// raceEnabled: the tests were built with -race.
const raceEnabled = true
