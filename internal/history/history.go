// Package history reads a page's past: its commits newest first, the
// commit that was the head at a given time, what each commit changed, and
// the distinct versions of one entry. A commit is its tree, so every view
// here reads stored trees and copies nothing.
//
// Layer: above store, below fs and the command line.
package history

import (
	"container/heap"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/store"
)

// ErrNoCommit reports a commit id or time that names no commit of the page.
var ErrNoCommit = errors.New("no such commit")

// newer orders commits newest first: by timestamp, then generation, then id.
// Commit times grow along history (a commit is never older than its
// parents), so this order visits every commit after all its descendants.
func newer(a, b *store.Commit) bool { return orderOf(a).compare(orderOf(b)) > 0 }

type commitHeap []*store.Commit

func (h commitHeap) Len() int           { return len(h) }
func (h commitHeap) Less(i, j int) bool { return newer(h[i], h[j]) }
func (h commitHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *commitHeap) Push(x any)        { *h = append(*h, x.(*store.Commit)) }
func (h *commitHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}

// ErrStop, returned by a Walk callback, ends the walk without error.
var ErrStop = errors.New("stop")

// Walk calls fn for every commit reachable from the page's heads, newest
// first, ending with the first commit, with the commit's parents (read once
// for the walk; the slice is valid only during fn). Memory grows with the
// number of commits seen (their ids), not with their trees.
//
// A collection may have pruned commits (see package gc): a kept commit's
// parents may be gone, and older kept commits are then reached by no parent
// link. Once the walk meets a pruned parent it also visits every stored
// commit, and a commit whose parents are all pruned gets, in their place,
// the next older stored commit (Truncated reports which): its changes are
// those since the previous commit history kept.
func Walk(p *store.Page, fn func(c *store.Commit, parents []*store.Commit) error) error {
	w, err := NewWalker(p)
	if err != nil {
		return err
	}
	for {
		c, parents, err := w.Next(p)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(c, parents); err != nil {
			if errors.Is(err, ErrStop) {
				return nil
			}
			return err
		}
	}
}

// A Walker is Walk one commit at a time, for a reader that takes history
// as it needs it (the first lines of a long log): it keeps the walk's
// state, and reads the page given to each Next, so the page need not stay
// open between steps.
type Walker struct {
	seen      map[store.CommitID]bool
	done      map[store.CommitID]bool          // passed over (skip)
	queued    map[store.CommitID]*store.Commit // read, not yet visited
	h         commitHeap
	loadedAll bool
	parents   []*store.Commit
}

// NewWalker starts a walk of the page's history from its heads.
func NewWalker(p *store.Page) (*Walker, error) {
	heads, err := p.Heads()
	if err != nil {
		return nil, err
	}
	w := &Walker{seen: map[store.CommitID]bool{}, queued: map[store.CommitID]*store.Commit{}}
	for _, c := range heads {
		w.push(c)
	}
	return w, nil
}

// skip makes the walk pass over the commits in done, and what only they
// reach: it then visits what is new since a walk that visited them. done
// is consulted as the walk goes, not copied: an index of 20,000 commits
// cost each update after a commit 4 ms of copying.
func (w *Walker) skip(done map[store.CommitID]bool) {
	w.done = done
	// A head walked already is no start.
	kept := w.h[:0]
	for _, c := range w.h {
		if done[c.ID] {
			delete(w.queued, c.ID)
			continue
		}
		kept = append(kept, c)
	}
	w.h = kept
	heap.Init(&w.h)
}

func (w *Walker) push(c *store.Commit) {
	if !w.seen[c.ID] && !w.done[c.ID] {
		w.seen[c.ID] = true
		w.queued[c.ID] = c
		heap.Push(&w.h, c)
	}
}

// Next returns the walk's next commit and its parents (valid until the
// next call), or io.EOF after the first commit.
func (w *Walker) Next(p *store.Page) (*store.Commit, []*store.Commit, error) {
	// Commits passed over are in the heap only as the next older commit
	// kept (below), never visited.
	for w.h.Len() > 0 && w.done[w.h[0].ID] {
		heap.Pop(&w.h)
	}
	if w.h.Len() == 0 {
		return nil, nil, io.EOF
	}
	c := heap.Pop(&w.h).(*store.Commit)
	delete(w.queued, c.ID)
	parents := w.parents[:0]
	pruned := 0
	for _, id := range c.Parents {
		pc, ok := w.queued[id]
		if !ok {
			var err error
			if pc, err = p.Commit(id); errors.Is(err, store.ErrNotFound) {
				pruned++
				continue
			} else if err != nil {
				return nil, nil, fmt.Errorf("history: parent of %s: %w", c.ID, err)
			}
		}
		parents = append(parents, pc)
		w.push(pc)
	}
	if pruned > 0 && !w.loadedAll {
		w.loadedAll = true
		err := p.CommitIDs(nil, func(id store.CommitID) error {
			if w.seen[id] {
				return nil
			}
			sc, err := p.Commit(id)
			switch {
			case err != nil || newer(sc, c):
			case w.done[id]:
				// Passed over, yet what a commit whose parents were
				// pruned is compared with, if it is the next older
				// commit kept, as in a walk that passed over none.
				w.seen[id] = true
				heap.Push(&w.h, sc)
			default:
				w.push(sc)
			}
			return err
		})
		if err != nil {
			return nil, nil, fmt.Errorf("history: commits after %s: %w", c.ID, err)
		}
		w.push(store.FirstCommit())
	}
	if pruned > 0 && len(parents) == 0 && w.h.Len() > 0 {
		parents = append(parents, w.h[0]) // the next older commit kept
	}
	w.parents = parents
	return c, parents, nil
}

// Truncated reports whether history before c was pruned: a parent of c is
// no longer stored, so the parents Walk gave c are not its own.
func Truncated(c *store.Commit, parents []*store.Commit) bool {
	if len(parents) != len(c.Parents) {
		return true
	}
	for i, pc := range parents {
		if pc.ID != c.Parents[i] {
			return true
		}
	}
	return false
}

// AsOf returns the commit that was the page's head at t: the newest commit
// not after t. Before the first commit it is the empty first commit.
//
// A recent t is found by a walk from the heads, newest first. Past
// asOfWalk commits the walk gives way to a scan of every commit row: every
// stored commit is reachable from the heads (a landing writes commits and
// heads in one transaction; a collection deletes the commits it prunes),
// and a scan reads rows in order where the walk looks each commit up (an
// early time in a history of 20,000 commits: 190 ms cold).
func AsOf(p *store.Page, t time.Time) (*store.Commit, error) { return asOf(p, t, asOfWalk) }

// asOf is AsOf walking at most walk commits.
func asOf(p *store.Page, t time.Time, walk int) (*store.Commit, error) {
	ns := t.UnixNano()
	var found *store.Commit
	steps := 0
	err := Walk(p, func(c *store.Commit, _ []*store.Commit) error {
		if c.Timestamp <= ns {
			found = c
			return ErrStop
		}
		if steps++; steps == walk {
			return errFarBack
		}
		return nil
	})
	if errors.Is(err, errFarBack) {
		err = p.Commits(func(c *store.Commit) error {
			if c.Timestamp <= ns && (found == nil || newer(c, found)) {
				found = c
			}
			return nil
		})
	}
	if err != nil {
		return nil, err
	}
	if found == nil {
		found = store.FirstCommit()
	}
	return found, nil
}

// asOfWalk is how many commits AsOf walks before it scans them all
// instead: a scan costs about what a walk of a quarter of them does.
const asOfWalk = 512

// errFarBack ends AsOf's walk.
var errFarBack = errors.New("history: far back")

// ParseTime reads a time as RFC 3339 (with or without fractional seconds)
// or as Unix seconds.
func ParseTime(s string) (time.Time, error) {
	if secs, err := strconv.ParseInt(s, 10, 64); err == nil {
		return clampTime(time.Unix(secs, 0)), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("history: %q is neither RFC 3339 nor Unix seconds", s)
	}
	return clampTime(t), nil
}

// Commit times are Unix nanoseconds in an int64: from 1677 to 2262.
var lastTime, firstTime = time.Unix(0, math.MaxInt64), time.Unix(0, math.MinInt64)

// clampTime brings a time past what commit times can hold to the last (or
// first) they can: .ledger/at/9223372037, past 2262, is the head, not a
// time whose nanoseconds wrapped around to before the first commit.
func clampTime(t time.Time) time.Time {
	switch {
	case t.After(lastTime):
		return lastTime
	case t.Before(firstTime):
		return firstTime
	}
	return t
}

// ParseID reads a full commit id: 64 hex digits.
func ParseID(s string) (store.CommitID, bool) {
	var id store.CommitID
	if len(s) != 2*len(id) || strings.ToLower(s) != s {
		return id, false
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return id, false
	}
	return id, true
}

// Lookup returns the commit with a full id.
func Lookup(p *store.Page, id store.CommitID) (*store.Commit, error) {
	c, err := p.Commit(id)
	if err != nil {
		return nil, fmt.Errorf("%w %s", ErrNoCommit, id)
	}
	return c, nil
}

// Resolve returns the commit a user named: a full id, a unique prefix of
// at least 4 hex digits, or a time (see ParseTime).
func Resolve(p *store.Page, s string) (*store.Commit, error) {
	if id, ok := ParseID(s); ok {
		return Lookup(p, id)
	}
	if len(s) >= 4 && isHex(s) {
		id, err := byPrefix(p, s)
		if err == nil {
			return Lookup(p, id)
		}
		if !errors.Is(err, ErrNoCommit) {
			return nil, err
		}
		// Digits only: maybe Unix seconds.
	}
	t, err := ParseTime(s)
	if err != nil {
		return nil, fmt.Errorf("%q is no commit id, id prefix or time", s)
	}
	return AsOf(p, t)
}

func isHex(s string) bool {
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// byPrefix finds the one commit whose hex id starts with prefix.
func byPrefix(p *store.Page, prefix string) (store.CommitID, error) {
	var id store.CommitID
	matches := 0
	if strings.Repeat("0", len(prefix)) == prefix {
		matches++ // the first commit, which has no row; id is already its id
	}
	raw, err := hex.DecodeString(prefix[:len(prefix)&^1])
	if err != nil {
		return id, fmt.Errorf("history: commit prefix %q is not hex: %w", prefix, err)
	}
	err = p.CommitIDs(raw, func(c store.CommitID) error {
		if strings.HasPrefix(c.String(), prefix) {
			matches++
			id = c
		}
		return nil
	})
	switch {
	case err != nil:
		return id, err
	case matches == 0:
		return id, fmt.Errorf("%w with prefix %s", ErrNoCommit, prefix)
	case matches > 1:
		return id, fmt.Errorf("history: commit prefix %s is ambiguous", prefix)
	}
	return id, nil
}

// IDs calls fn with the id of every stored commit, in id order, and with the
// first commit's; it reads keys only.
func IDs(p *store.Page, fn func(store.CommitID) error) error {
	if err := fn(store.FirstCommitID); err != nil {
		return err
	}
	return p.CommitIDs(nil, fn)
}

// previous returns the parent a commit is compared with: its only parent,
// or for a merge the older one, the head the merge was made on.
func previous(parents []*store.Commit) *store.Commit {
	var prev *store.Commit
	for _, pc := range parents {
		if prev == nil || newer(prev, pc) {
			prev = pc
		}
	}
	return prev
}

// changed returns the number of keys a commit changed relative to its
// previous head (see previous), found by a tree diff.
func changed(p *store.Page, c *store.Commit, parents []*store.Commit) (int, error) {
	prev := previous(parents)
	if prev == nil {
		return 0, nil
	}
	n := 0
	err := p.Nodes().Diff(prev.Root, c.Root, func(btree.Change) error {
		n++
		return nil
	})
	return n, err
}

// TimeFormat is how commit times are shown: UTC with nanoseconds, so that
// any shown time names exactly its commit in an at/ view.
const TimeFormat = "2006-01-02T15:04:05.000000000Z07:00"

// FormatTime shows a commit time.
func FormatTime(ns int64) string { return time.Unix(0, ns).UTC().Format(TimeFormat) }

// WriteLog writes one line per commit, newest first: id, generation, time,
// parents (comma-separated, "-" for none; a parent a collection pruned is
// written "pruned:" and its id, and the count is then of the keys changed
// since the next older commit kept) and the number of keys changed.
func WriteLog(w io.Writer, p *store.Page) error {
	var line []byte
	return Walk(p, func(c *store.Commit, parents []*store.Commit) error {
		var err error
		if line, err = AppendLogLine(line[:0], p, c, parents); err == nil {
			_, err = w.Write(line)
		}
		return err
	})
}

// AppendLogLine appends WriteLog's line of commit c, with the parents a walk
// gave it.
func AppendLogLine(b []byte, p *store.Page, c *store.Commit, parents []*store.Commit) ([]byte, error) {
	n, err := changed(p, c, parents)
	if err != nil {
		return b, err
	}
	return appendLogLine(b, c, parents, n), nil
}

func appendLogLine(b []byte, c *store.Commit, parents []*store.Commit, changed int) []byte {
	b = hex.AppendEncode(b, c.ID[:])
	b = append(b, ' ')
	b = strconv.AppendUint(b, c.Generation, 10)
	b = append(b, ' ')
	b = append(b, FormatTime(c.Timestamp)...)
	b = append(b, ' ')
	if len(c.Parents) == 0 {
		b = append(b, '-')
	}
	for i, id := range c.Parents {
		if i > 0 {
			b = append(b, ',')
		}
		if !slices.ContainsFunc(parents, func(pc *store.Commit) bool { return pc.ID == id }) {
			b = append(b, "pruned:"...)
		}
		b = hex.AppendEncode(b, id[:])
	}
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(changed), 10)
	return append(b, '\n')
}
