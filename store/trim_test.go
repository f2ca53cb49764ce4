package store

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// procStatusKiB reads a KiB figure (VmRSS, RssFile, ...) of this process.
func procStatusKiB(t testing.TB, field string) int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == field+":" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}

// Writing a large value leaves the value log's pages out of the process.
func TestValueLogPagesAreTrimmed(t *testing.T) {
	p := testPage(t)
	before := procStatusKiB(t, "RssFile")
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
	grown := procStatusKiB(t, "RssFile") - before
	t.Logf("file-backed RSS grew by %d MiB writing 300 MiB", grown>>10)
	if grown > 160<<10 {
		t.Fatalf("file-backed RSS grew by %d MiB writing 300 MiB", grown>>10)
	}
}
