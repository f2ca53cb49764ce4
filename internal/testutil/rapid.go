package testutil

import (
	"flag"
	"strconv"
)

// FewerCasesUnderRace makes rapid draw n cases per property under the race
// detector, unless -rapid.checks says how many: each case is several times
// slower there, and the run without it (.ci/run's) draws rapid's full 100.
// Call it from TestMain after flag.Parse.
func FewerCasesUnderRace(n int) {
	if !raceEnabled {
		return
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "rapid.checks" })
	if !given {
		flag.Set("rapid.checks", strconv.Itoa(n))
	}
}

// Race reports whether the tests run under the race detector, for tests
// that size their work by it.
func Race() bool { return raceEnabled }
