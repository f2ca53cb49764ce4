package gc

import (
	"flag"
	"testing"

	"go.uber.org/goleak"
)

// No goroutine the package starts outlives the test that made it: whoever
// starts one owns its end. Under the race detector the property tests draw
// 30 cases, not rapid's 100 (each opens a db, several times slower there):
// the run without it, in .ci/run, draws them all.
func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "rapid.checks" })
	if raceEnabled && !given {
		flag.Set("rapid.checks", "30")
	}
	goleak.VerifyTestMain(m)
}
