//go:build race

package dlock_test

const raceEnabled = true
