package mount_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/hanwen/go-fuse/v2/posixtest"
)

// posixRefused are the posixtest cases that need what the README lists as
// refused.
var posixRefused = map[string]string{
	"Link":             "hard links are refused (EPERM)",
	"LinkUnlinkRename": "hard links are refused (EPERM)",
	"XAttr":            "extended attributes are refused (EOPNOTSUPP)",
	"XAttrLarge":       "extended attributes are refused (EOPNOTSUPP)",
	// It expects a second descriptor of the same process to be refused a
	// lock the first holds; POSIX record locks belong to the process, and
	// the case fails on ext4 too.
	"FcntlFlockLocksFile": "POSIX locks are per process (fails natively too)",
}

// TestPosix runs go-fuse's own POSIX conformance cases, each in a page of
// its own.
func TestPosix(t *testing.T) {
	s := mount(t, t.TempDir())
	for _, name := range slices.Sorted(maps.Keys(posixtest.All)) {
		if _, refused := posixRefused[name]; refused {
			continue
		}
		t.Run(name, func(t *testing.T) {
			posixtest.All[name](t, s.page("posix", name))
		})
	}
}
