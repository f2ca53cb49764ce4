package store

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

func rssFileKiB(t testing.TB) int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "RssFile:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	t.Fatal("no RssFile in /proc/self/status")
	return 0
}

// Writing a large value leaves the value log's pages out of the process.
func TestValueLogPagesAreTrimmed(t *testing.T) {
	p := testPage(t)
	before := rssFileKiB(t)
	data := make([]byte, 300<<20)
	seed := uint64(1)
	for i := 0; i+8 <= len(data); i += 8 {
		seed = seed*6364136223846793005 + 1442695040888963407
		for k := range 8 {
			data[i+k] = byte(seed >> (8 * k))
		}
	}
	writeValue(t, p, data)
	p.repo.trim.running.Lock() // wait for a running trim
	p.repo.trim.running.Unlock()
	grown := rssFileKiB(t) - before
	t.Logf("file-backed RSS grew by %d MiB writing 300 MiB", grown>>10)
	if grown > 160<<10 {
		t.Fatalf("file-backed RSS grew by %d MiB writing 300 MiB", grown>>10)
	}
}
