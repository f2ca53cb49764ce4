package badgerdb

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// mapping is a range of this process's address space that maps a file.
type mapping struct {
	start, end uintptr
	shared     bool
	path       string
}

func (m mapping) contains(addr uintptr) bool { return m.start <= addr && addr < m.end }

// eachMapping calls fn with each file mapping in /proc/self/maps until fn
// returns false.
func eachMapping(fn func(m mapping) bool) error {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// start-end perms offset dev inode path
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 {
			continue
		}
		start, end, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		s, err1 := strconv.ParseUint(start, 16, 64)
		e, err2 := strconv.ParseUint(end, 16, 64)
		if err1 != nil || err2 != nil || e <= s {
			continue
		}
		if !fn(mapping{uintptr(s), uintptr(e), strings.Contains(fields[1], "s"), fields[5]}) {
			break
		}
	}
	return sc.Err()
}

// sharedMappings lists the shared mappings of files whose paths begin with
// prefix and end in suffix, as /proc/self/maps shows them now.
func sharedMappings(prefix, suffix string) ([]mapping, error) {
	var out []mapping
	err := eachMapping(func(m mapping) bool {
		if m.shared && strings.HasPrefix(m.path, prefix) && strings.HasSuffix(m.path, suffix) {
			out = append(out, m)
		}
		return true
	})
	return out, err
}
