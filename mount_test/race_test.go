//go:build race

package mount_test

const raceEnabled = true
