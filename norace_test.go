//go:build !race

package dlock_test

const raceEnabled = false
