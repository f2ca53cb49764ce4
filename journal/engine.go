package journal

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/store"
)

// Engine is the journal machinery of one program's repository: the
// committer of each open page, what is told of commits, and the clock and
// crash points tests move. A program makes one, opens its repository with
// its Hooks and writes pages through it; nothing of it is global, so
// engines (tests) run side by side.
type Engine struct {
	committers   sync.Map // *store.Page → *Committer
	lastImplicit atomic.Int64
	observers    atomic.Pointer[Observers]
	unseen       atomic.Pointer[UnseenFunc]
	// clock tells when changes are queued and times commits for the
	// pace; a test moves it on to make a commit look slow, or changes
	// distinct in time.
	clock func() time.Time
	// stamp, if set (StampWith), gives commits their times instead of the
	// wall clock.
	stamp func() time.Time
	// crashAt, when set by a test, is called at each step of a commit; an
	// error stops the commit there, as a crash would.
	crashAt func(step string) error
}

// Observers are told of commits of journals this engine filled (not of
// recovery's).
type Observers struct {
	// Commit is told of every commit: its page, whether a transaction's
	// (explicit) or of queued changes, and how many keys it changed. A
	// mount reports them as metrics and pushes the page soon.
	Commit func(ledger, page string, explicit bool, changes int)
	// Removed is told of every commit that deleted or replaced content:
	// how many bytes of values its page's head no longer holds (history
	// may). A mount collects a page once enough was removed.
	Removed func(ledger, page string, bytes uint64)
	// Landed is told of the commits a journal landed, and of the commits
	// they were made on (their parents not among them), with the page's
	// lock still held, so that no collection prunes them meanwhile: a
	// mount indexes their versions (history.IndexLanded). Its error is
	// logged; the commit stands.
	Landed func(p *store.Page, commits, on []*store.Commit) error
}

// NewEngine returns an engine with no observers.
func NewEngine() *Engine { return &Engine{clock: time.Now} }

// StampWith makes commits take their times from clock, not the wall clock:
// the sync simulation runs its devices on one simulated clock, so that a
// run follows from its seed (merges order versions by time). Batching
// still paces by the wall clock. Call it before the first commit.
func (e *Engine) StampWith(clock func() time.Time) { e.stamp = clock }

// stampAt is the time a change recorded at now gives its commit.
func (e *Engine) stampAt(now time.Time) int64 {
	if e.stamp != nil {
		return e.stamp().UnixNano()
	}
	return now.UnixNano()
}

// Observe sets who is told of commits from now on.
func (e *Engine) Observe(o Observers) { e.observers.Store(&o) }

// An UnseenFunc is called at the commit of a put whose writer worked from
// value saw (Op.Saw) while the head holds another version, e, at its key:
// a version the writer never saw if another device wrote it — landed by
// a sync while the file was open or its close queued — and so concurrent
// with the put, which must not bury it. It keeps in t, the tree the put
// is about to change, what must stay (a conflict file of e); a version of
// this device the put replaces, as one descriptor's close replaces
// another's.
type UnseenFunc func(p *store.Page, head *store.Commit, t *btree.Tree, key string, saw cas.ObjectIdentifier, e btree.Entry) error

// KeepUnseen sets who decides about versions a put's writer never saw
// (UnseenFunc); a syncer does, once connected. Without one a put replaces
// whatever its key holds.
func (e *Engine) KeepUnseen(f UnseenFunc) { e.unseen.Store(&f) }

func (e *Engine) unseenFunc() UnseenFunc {
	if f := e.unseen.Load(); f != nil {
		return *f
	}
	return nil
}

func (e *Engine) observing() Observers {
	if o := e.observers.Load(); o != nil {
		return *o
	}
	return Observers{}
}

func (e *Engine) step(name string) error {
	if e.crashAt != nil {
		return e.crashAt(name)
	}
	return nil
}

// Hooks returns o with the engine's hooks for pages opening and closing:
// Recover of what a crash left, and Close of the page's committer. Every
// program that opens a repository whose pages it reads or changes opens it
// with them; this is the one place the store and the journal are wired.
func (e *Engine) Hooks(o store.Options) store.Options {
	o.OnOpen, o.OnClose = e.Recover, e.Close
	return o
}
