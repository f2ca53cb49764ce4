package cloudsync

import (
	"strings"
	"testing"
)

// Without a remote, .ledger/sync says nothing waits to upload, and what
// the page holds that no remote has; with one, what waits.
func TestStatusTextWithoutARemote(t *testing.T) {
	p := PageStatus{Commits: 1, Pieces: 2, Bytes: 2048}
	if got := Text(RepoStatus{}, p); !strings.Contains(got, "waiting to upload: nothing, there is no remote (1 commit, 2 pieces (2.0 KiB) held only here)\n") {
		t.Errorf("without a remote:\n%s", got)
	}
	if got := Text(RepoStatus{}, PageStatus{}); !strings.Contains(got, "waiting to upload: nothing, there is no remote\n") {
		t.Errorf("without a remote, nothing held:\n%s", got)
	}
	if got := Text(RepoStatus{Remote: "s3://b/p"}, p); !strings.Contains(got, "waiting to upload: 1 commit, 2 pieces (2.0 KiB)\n") {
		t.Errorf("with a remote:\n%s", got)
	}
}
