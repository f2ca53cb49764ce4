package cloudsync

import (
	"fmt"

	"github.com/dustin/go-humanize"

	"github.com/ledgerfs/ledgerfs/store"
)

// RepoStatus is how a repository's sync stands: its remote, and the last
// pull and push that went through and the last error since ("" for none).
type RepoStatus struct {
	Remote, PulledAt, PushedAt, Error string
}

// StatusOf reads the repository's sync status.
func StatusOf(repo *store.Repository) (RepoStatus, error) {
	var st RepoStatus
	var err error
	if st.Remote, err = repo.Setting(store.SettingRemote); err != nil {
		return st, err
	}
	for _, f := range []struct {
		v   *string
		key string
	}{{&st.PulledAt, StatePulledAt}, {&st.PushedAt, StatePushedAt}, {&st.Error, StateError}} {
		v, _, err := repo.SyncState(f.key)
		if err != nil {
			return st, err
		}
		*f.v = string(v)
	}
	return st, nil
}

// PageStatus is what a page has waiting to go up, and when it was last
// pushed and pulled ("" for never).
type PageStatus struct {
	Commits, Pieces    int
	Bytes              int64
	PushedAt, PulledAt string
}

// Waiting says what waits to go up: "nothing", or the counts.
func (s PageStatus) Waiting() string {
	if s.Commits == 0 && s.Pieces == 0 {
		return "nothing"
	}
	return fmt.Sprintf("%s, %s (%s)", plural(s.Commits, "commit"), plural(s.Pieces, "piece"), humanize.IBytes(uint64(s.Bytes)))
}

// PageStatusOf reads a page's sync status.
func PageStatusOf(p *store.Page) (PageStatus, error) {
	var st PageStatus
	err := p.UnsyncedCommits(func(store.CommitID) error { st.Commits++; return nil })
	if err != nil {
		return st, err
	}
	if st.Pieces, st.Bytes, err = p.PiecesSize(store.Local); err != nil {
		return st, err
	}
	for _, f := range []struct {
		v   *string
		key string
	}{{&st.PushedAt, "pushed_at"}, {&st.PulledAt, "pulled_at"}} {
		v, _, err := p.SyncMetadata(f.key)
		if err != nil {
			return st, err
		}
		*f.v = string(v)
	}
	return st, nil
}

// Text is the page's .ledger/sync: the repository's status and the page's.
func Text(r RepoStatus, p PageStatus) string {
	or := func(s, none string) string {
		if s == "" {
			return none
		}
		return s
	}
	waiting := p.Waiting()
	if r.Remote == "" {
		// Nothing goes up without a remote: the counts are what only
		// this device holds.
		waiting = "nothing, there is no remote"
		if p.Commits > 0 || p.Pieces > 0 {
			waiting += " (" + p.Waiting() + " held only here)"
		}
	}
	return fmt.Sprintf("remote: %s\nwaiting to upload: %s\nlast push of the page: %s\nlast pull into the page: %s\nlast pull: %s\nlast push: %s\nlast error: %s\n",
		or(r.Remote, "none"), waiting, or(p.PushedAt, "never"), or(p.PulledAt, "never"),
		or(r.PulledAt, "never"), or(r.PushedAt, "never"), or(r.Error, "none"))
}

func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
