package keypath_test

import (
	"fmt"

	"github.com/ledgerfs/ledgerfs/internal/keypath"
)

// A key's '/' makes directories; segments that are no usable file name are
// escaped, and every path decodes back to its one key.
func Example() {
	for _, key := range []string{"notes/2026/inbox", "a//b", "dir/", "../up", "nul\x00byte"} {
		path := keypath.Path(key, false)
		back, _, err := keypath.Key(path)
		fmt.Printf("%q -> %q -> %q %v\n", key, path, back, err)
	}
	// Output:
	// "notes/2026/inbox" -> ["notes" "2026" "inbox"] -> "notes/2026/inbox" <nil>
	// "a//b" -> ["a" "%%" "b"] -> "a//b" <nil>
	// "dir/" -> ["dir" "%%"] -> "dir/" <nil>
	// "../up" -> ["%%.." "up"] -> "../up" <nil>
	// "nul\x00byte" -> ["%%nul%00byte"] -> "nul\x00byte" <nil>
}

// A key that is a file while other keys continue it as a directory shows
// next to that directory under its collision name.
func ExamplePath_collision() {
	fmt.Println(keypath.Path("a", true))
	key, coll, err := keypath.Key([]string{"%%=a"})
	fmt.Println(key, coll, err)
	// Output:
	// [%%=a]
	// a true <nil>
}
