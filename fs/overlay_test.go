package fs

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/ledgerfs/ledgerfs/internal/btree"
	"github.com/ledgerfs/ledgerfs/journal"
	"github.com/ledgerfs/ledgerfs/store"
)

func markerAt(ns int64) btree.Entry {
	return dirMarker(btree.Meta{Mode: 0o755, MtimeNs: ns, HasMtime: true})
}

// TestOverlayShowsUntilItsOwnChangeLands draws queued deletes and markers
// of a few keys and their landings in any order, against a model: a key
// shows what its latest change shows until that change lands, whatever
// earlier changes of the key land meanwhile.
func TestOverlayShowsUntilItsOwnChangeLands(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var o overlay
		keys := []string{"a", "b/", "b/c", "d/"}
		type change struct {
			key    string
			marker bool
			seq    uint64
		}
		var queued []change
		latest := map[string]change{} // the model: latest change per key, until it lands
		for range rapid.IntRange(1, 40).Draw(t, "steps") {
			if len(queued) > 0 && rapid.Bool().Draw(t, "land") {
				i := rapid.IntRange(0, len(queued)-1).Draw(t, "which")
				c := queued[i]
				queued = slices.Delete(queued, i, i+1)
				if c.marker {
					o.landMarker(c.key, c.seq)
				} else {
					o.landGone(c.key, c.seq)
				}
				if latest[c.key] == c {
					delete(latest, c.key)
				}
			} else {
				c := change{key: rapid.SampledFrom(keys).Draw(t, "key"), marker: rapid.Bool().Draw(t, "marker"), seq: o.next()}
				if c.marker {
					o.showMarker(c.key, markerAt(int64(c.seq)), c.seq)
				} else {
					o.showGone(c.key, c.seq)
				}
				if prev, ok := latest[c.key]; ok && prev.marker != c.marker {
					// A delete after a marker (rmdir after mkdir) or a
					// marker after a delete: each kind shows on its own.
					if prev.marker {
						o.landMarker(prev.key, prev.seq)
					} else {
						o.landGone(prev.key, prev.seq)
					}
				}
				latest[c.key] = c
				queued = append(queued, c)
			}
			for _, k := range keys {
				want, shown := latest[k]
				e, isMarker := o.marker(k)
				gone := o.goneNow()
				_, isGone := gone.Get(k)
				switch {
				case shown && want.marker && (!isMarker || e.Meta.MtimeNs != int64(want.seq) || isGone):
					t.Fatalf("key %q: want the marker of change %d shown; marker %v (%d), gone %v", k, want.seq, isMarker, e.Meta.MtimeNs, isGone)
				case shown && !want.marker && (!isGone || isMarker):
					t.Fatalf("key %q: want the delete of change %d shown; gone %v, marker %v", k, want.seq, isGone, isMarker)
				case !shown && (isMarker || isGone):
					t.Fatalf("key %q: every change landed, still shown: marker %v, gone %v", k, isMarker, isGone)
				}
			}
		}
	})
}

// TestOverlayTouchesRideOnce: a directory's new times ride with one change,
// show until that change lands, and never hide a later touch of the same
// directory; a change of the directory's own marker replaces its touch.
func TestOverlayTouchesRideOnce(t *testing.T) {
	var o overlay
	o.showTouch("d/", markerAt(1))
	o.showTouch("e/", markerAt(2))
	if !o.touchesWaiting() {
		t.Fatal("touches noted, none waiting")
	}
	own := []journal.Op{{Key: "e/", Kind: store.OpMarker, Entry: markerAt(3)}}
	ops, taken := o.takeTouches(own, 10)
	if len(ops) != 1 || ops[0].Key != "d/" || ops[0].Kind != store.OpMarker || ops[0].Entry.Meta.MtimeNs != 1 {
		t.Fatalf("touches taken with a change of e/: %+v, want d/'s alone", ops)
	}
	if o.touchesWaiting() {
		t.Fatal("touches taken still wait for another change")
	}
	if again, _ := o.takeTouches(nil, 10); len(again) != 0 {
		t.Fatalf("touches taken twice: %+v", again)
	}
	if _, ok := o.marker("d/"); !ok {
		t.Fatal("a touch stopped showing before its change landed")
	}
	o.showTouch("d/", markerAt(4)) // the directory changes again meanwhile
	o.landTouches(taken)
	if e, ok := o.marker("d/"); !ok || e.Meta.MtimeNs != 4 {
		t.Fatalf("the landing of an older touch hid the newer: %v, mtime %d", ok, e.Meta.MtimeNs)
	}
	if _, ok := o.marker("e/"); ok {
		t.Fatal("a touch replaced by its directory's own change still shows after it landed")
	}
	ops, _ = o.takeTouches(nil, 0)
	if len(ops) != 0 || !o.touchesWaiting() {
		t.Fatalf("no room: took %d touches, waiting %v", len(ops), o.touchesWaiting())
	}
}

// TestOverlayAccessTimes: a read's access time is taken to be kept once,
// shows until that lands, waits again if keeping failed, is replaced by a
// newer read's, and waits for at most maxWaitingAtimes files.
func TestOverlayAccessTimes(t *testing.T) {
	var o overlay
	o.noteAtime("a", 10)
	o.noteAtime("b", 20)
	taken := o.takeAtimes(1)
	if len(taken) != 1 || taken["a"] != 10 {
		t.Fatalf("access times taken: %v, want a's alone", taken)
	}
	if again := o.takeAtimes(10); len(again) != 1 || again["b"] != 20 {
		t.Fatalf("second take: %v, want b's alone (a's is being kept)", again)
	}
	if n := o.atimesWaiting(); n != 0 {
		t.Fatalf("every access time taken, %d still waiting", n)
	}
	o.noteAtime("a", 30) // read again before it was kept
	o.landAtimes(taken, true)
	if ns, ok := o.atime("a"); !ok || ns != 30 {
		t.Fatalf("a newer access time lost when the older was kept: %d, %v", ns, ok)
	}
	o.landAtimes(map[string]int64{"b": 20}, false)
	if n := o.atimesWaiting(); n != 2 {
		t.Fatalf("%d access times waiting after keeping b's failed, want a's and b's", n)
	}
	o.forgetAtimes("")
	if _, ok := o.atime("a"); ok {
		t.Fatal("forgotten access time still waits")
	}
	for i := range maxWaitingAtimes + 10 {
		o.noteAtime(fmt.Sprintf("f%06d", i), 1)
	}
	if n := o.atimes.Len(); n != maxWaitingAtimes {
		t.Fatalf("%d access times waiting, want at most %d", n, maxWaitingAtimes)
	}
	if o.takeAtimes(5); o.atimes.Len() != maxWaitingAtimes {
		t.Fatal("taking access times dropped some")
	}
}

// TestOverlayPendingFiles: a pending file shows at its key and makes its
// directories exist, a later file at the key is not dropped by the
// earlier's landing, and a dropped file takes its access time with it.
func TestOverlayPendingFiles(t *testing.T) {
	var o overlay
	f1, f2 := &fileNode{}, &fileNode{}
	o.setPending("d/e/f", f1)
	if o.pending("d/e/f") != f1 || !o.dirShown("d/") || !o.dirShown("d/e/") || o.dirShown("x/") {
		t.Fatal("a pending file does not show, or its directories do not")
	}
	o.setPending("d/e/f", f2) // created again under the same name
	if o.unpend("d/e/f", f1) || o.pending("d/e/f") != f2 {
		t.Fatal("the first file's landing dropped the second")
	}
	o.setPending("d/g", f1)
	if got := o.pendingUnder("d/e/"); len(got) != 1 || got["d/e/f"] != f2 {
		t.Fatalf("pending under d/e/: %v", got)
	}
	o.noteAtime("d/g", 5)
	o.dropPending("d/g")
	if _, ok := o.atime("d/g"); ok || o.pending("d/g") != nil {
		t.Fatal("a dropped file still pending, or its access time waits")
	}
	if !o.unpend("d/e/f", f2) || o.dirShown("d/") {
		t.Fatal("the last pending file landed; its directory still shows by it")
	}
	o.showMarker("m/", markerAt(1), o.next())
	if !o.dirShown("m/") {
		t.Fatal("a queued marker does not make its directory exist")
	}
}
