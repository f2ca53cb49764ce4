package keypath

import (
	"slices"
	"strings"
	"testing"
)

func TestExamples(t *testing.T) {
	long := strings.Repeat("x", 300)
	cases := []struct {
		key  string
		path []string
	}{
		{"a/b/c", []string{"a", "b", "c"}},
		{"2026-11-22-msg1", []string{"2026-11-22-msg1"}},
		{"100%", []string{"100%"}},
		{"file%20name", []string{"file%20name"}},
		{"a/", []string{"a", "%%"}},
		{"/a", []string{"%%", "a"}},
		{"a//b", []string{"a", "%%", "b"}},
		{".", []string{"%%."}},
		{"x/..", []string{"x", "%%.."}},
		{".ledger", []string{"%%.ledger"}},
		{"d/.ledger", []string{"d", ".ledger"}},
		{"%%x", []string{"%%%25%25x"}},
		{"a\x00b", []string{"%%a%00b"}},
		{"", []string{"%%"}},
		{long, []string{"%%+" + long[:252], long[252:]}},
	}
	for _, c := range cases {
		got := Path(c.key, false)
		if !slices.Equal(got, c.path) {
			t.Errorf("Path(%q) = %q, want %q", c.key, got, c.path)
		}
		key, coll, err := Key(c.path)
		if err != nil || key != c.key || coll {
			t.Errorf("Key(%q) = %q %v %v", c.path, key, coll, err)
		}
	}
	if p := Path("a", true); !slices.Equal(p, []string{"%%=a"}) {
		t.Errorf("collision form %q", p)
	}
	for _, bad := range [][]string{{"%%%41"}, {"%%a%2"}, {"%%+abc"}, {"%%=a", "b"}, {"%%a"}, {".ledger"}, {"%%+x", "y"}, {}} {
		if k, _, err := Key(bad); err == nil {
			t.Errorf("Key(%q) accepted as %q", bad, k)
		}
	}
}

func checkKey(t *testing.T, key string, coll bool) {
	p := Path(key, coll)
	for _, c := range p {
		if c == "" || len(c) > MaxComponent || c == "." || c == ".." || strings.ContainsAny(c, "/\x00") {
			t.Fatalf("key %q: bad component %q", key, c)
		}
	}
	if p[0] == Reserved {
		t.Fatalf("key %q maps onto the reserved name", key)
	}
	k, c, err := Key(p)
	if err != nil || k != key || c != coll {
		t.Fatalf("key %q -> %q -> %q %v %v", key, p, k, c, err)
	}
}

func FuzzKeyToPath(f *testing.F) {
	for _, s := range []string{"", "a/b", "%", "%%", "a//", ".ledger", "+x/=y", strings.Repeat("%", 200)} {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, key string, coll bool) {
		checkKey(t, key, coll)
	})
}

func FuzzPathToKey(f *testing.F) {
	f.Add("a/b")
	f.Add("%%/%%..")
	f.Add("%%+abc/d")
	f.Add(".ledger/x")
	f.Add("x/.ledger")
	f.Add("a/./b")
	f.Fuzz(func(t *testing.T, p string) {
		comps := strings.Split(p, "/")
		key, coll, err := Key(comps)
		// The plain-name shortcut answers as the full decoding does.
		if k, c, e := decode(comps); k != key || c != coll || e != err {
			t.Fatalf("path %q: Key %q %v %v, decode %q %v %v", comps, key, coll, err, k, c, e)
		}
		if err != nil {
			return
		}
		if got := Path(key, coll); !slices.Equal(got, comps) {
			t.Fatalf("path %q -> key %q -> path %q", comps, key, got)
		}
	})
}

// Long segments of escaped bytes split into components that all fit.
func TestLongEscapedSegments(t *testing.T) {
	for _, n := range []int{84, 85, 86, 254, 255, 256, 1000, 4096} {
		for _, ch := range []string{"x", "%", "\x00", "+"} {
			checkKey(t, strings.Repeat(ch, n), false)
			checkKey(t, "d/"+strings.Repeat(ch, n)+"/e", false)
			checkKey(t, strings.Repeat(ch, n), true)
		}
	}
}
