package cas

import (
	"flag"
	"testing"

	"go.uber.org/goleak"

	"github.com/ledgerfs/ledgerfs/internal/testutil"
)

// No goroutine the package starts outlives the test that made it: whoever
// starts one owns its end. Under the race detector the property tests draw
// 30 cases (values of up to 7 MiB, several times slower there).
func TestMain(m *testing.M) {
	flag.Parse()
	testutil.FewerCasesUnderRace(30)
	goleak.VerifyTestMain(m)
}
