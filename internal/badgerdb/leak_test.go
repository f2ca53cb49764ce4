package badgerdb

import (
	"testing"

	"go.uber.org/goleak"
)

// No goroutine the package starts outlives the test that made it: whoever
// starts one owns its end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
