package testutil

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// MappedRSS returns the resident bytes of this process's mappings of files
// whose paths begin with dir and end with suffix, from /proc/self/smaps.
//
// A mapping's header line names its file only if it has one: an anonymous
// mapping's has five fields, and must end the one before it, or the heap
// after a value log counts as the log.
func MappedRSS(dir, suffix string) (int64, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var n int64
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		switch {
		case len(fields) == 0:
		case !strings.HasSuffix(fields[0], ":"): // start-end perms offset dev inode [path]
			in = len(fields) >= 6 && strings.HasPrefix(fields[5], dir) && strings.HasSuffix(fields[5], suffix)
		case in && fields[0] == "Rss:" && len(fields) >= 2:
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0, err
			}
			n += kb << 10
		}
	}
	return n, sc.Err()
}
