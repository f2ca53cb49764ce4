// Package cloudsync keeps a repository's pages the same on every device
// that shares a remote store (package remote), as Ledger's cloud_sync kept
// them through its cloud: pieces go up before the commits that reach them,
// in pack files; commits go up in batches appended to a log per device;
// other devices' batches are read, their commits fetched with their
// pieces (verified against their digests), and merged with the local
// head, deterministically, so that devices that merge the same heads make
// the same commit.
//
// Layer: above store, journal and remote; below the command line.
package cloudsync

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ledgerfs/ledgerfs/cas"
	"github.com/ledgerfs/ledgerfs/internal/remote"
	"github.com/ledgerfs/ledgerfs/store"
)

// Names in the store (see DESIGN.md, "The remote store").
const (
	devicesDir = "devices/"
	packsDir   = "packs/"
	logsDir    = "logs/"
	feedDir    = "feed/"
)

// deviceName is the object that registers a device.
func deviceName(device string) string { return devicesDir + device }

// packName is the object of the pack of pieces refs, in order: named by
// the hash (nameHash) of their digests and lengths, which fix its bytes (a
// piece's digest names its content), so a pack written twice is the same
// object (sealed anew: the same content), and naming it costs no pass
// over its bytes.
func (s *Syncer) packName(refs []pieceRef) string {
	h := s.nameHash()
	var n [8]byte
	for _, r := range refs {
		binary.LittleEndian.PutUint64(n[:], uint64(len(r.Digest)))
		h.Write(n[:])
		h.Write(r.Digest)
		binary.LittleEndian.PutUint64(n[:], uint64(r.Len))
		h.Write(n[:])
	}
	x := hex.EncodeToString(h.Sum(nil))
	return packsDir + x[:2] + "/" + x
}

// batchName is the seq'th batch in device's log.
func batchName(device string, seq uint64) string {
	return fmt.Sprintf("%s%s/%016x", logsDir, device, seq)
}

// parseBatchName returns the device and number of a batch object.
func parseBatchName(name string) (device string, seq uint64, ok bool) {
	rest, ok := strings.CutPrefix(name, logsDir)
	if !ok {
		return "", 0, false
	}
	device, num, ok := strings.Cut(rest, "/")
	if !ok || len(num) != 16 {
		return "", 0, false
	}
	seq, err := strconv.ParseUint(num, 16, 64)
	return device, seq, err == nil
}

// feedName is the change feed's entry that says device's log holds
// batches up to seq, announced at t. Names sort by time, so a reader lists
// what was announced since it last looked in one request, whatever the
// number of devices and pages.
func feedName(t time.Time, device string, seq uint64) string {
	return fmt.Sprintf("%s%s-%s-%016x", feedDir, feedTime(t), device, seq)
}

// feedTime is the part of a feed name that orders it: milliseconds since
// 1970, 12 hex digits (until the year 10889).
func feedTime(t time.Time) string { return fmt.Sprintf("%012x", t.UnixMilli()) }

// parseFeedName returns the device and batch number a feed entry announces.
func parseFeedName(name string) (device string, seq uint64, ok bool) {
	rest, ok := strings.CutPrefix(name, feedDir)
	if !ok || len(rest) < 12+1+1+16 || rest[12] != '-' || rest[len(rest)-17] != '-' {
		return "", 0, false
	}
	seq, err := strconv.ParseUint(rest[len(rest)-16:], 16, 64)
	return rest[13 : len(rest)-17], seq, err == nil
}

// A batch is one object of a device's log: commits of pages, in
// generation order per page, and where the pieces they brought are.
type batch struct {
	Device string      `json:"device"`
	Seq    uint64      `json:"seq"`
	Pages  []pageBatch `json:"pages"`
	// Names are the device's changes of ledger and page names, in order;
	// a batch holds names or pages.
	Names []store.NameChange `json:"names,omitempty"`
	// Moved, in a batch a collection wrote (layout 5), are pieces it
	// copied out of packs mostly unreached: where they are now.
	Moved *movedPieces `json:"moved,omitempty"`
	// Applied are, per other device, the last batch of its log up to
	// which its writer had applied every batch when it read what it
	// pushes: the heads of the pages in those are ancestors of its pages'
	// heads here, whatever a collection pruned between (knownEdges).
	// Older builds write none, and ignore it.
	Applied map[string]uint64 `json:"applied,omitempty"`
	// checkpoint: the batch stands for a collection's checkpoint of its
	// device's pages (join), not for one of its log.
	checkpoint bool
}

// movedPieces are pieces a collection's repack copied, as stored, from
// packs whose reached pieces took less than repackBelow of them (From) to
// new packs (Pieces: where each is now). A device that reads them reads
// those pieces from the new packs from then on, whatever batch named the
// old ones; the old packs go as unreached packs do (see collectedDir).
type movedPieces struct {
	From   []string   `json:"from"`
	Pieces []pieceRef `json:"pieces"`
}

// A pageBatch is what one batch holds of one page.
type pageBatch struct {
	Ledger string `json:"ledger"`
	Page   string `json:"page"`
	// Commits are CommitStorage bytes, parents before children.
	Commits [][]byte   `json:"commits"`
	Pieces  []pieceRef `json:"pieces"`
	// Keep is the page's retention policy on the device that wrote the
	// batch (retention.Policy's text): the devices that collect the
	// store keep what any device's policy keeps.
	Keep string `json:"keep,omitempty"`
	// Polynomial, if set, is the chunker polynomial (hex) of a page
	// chunked with its own, not the store's: one made before its
	// repository joined (store.Repository.AdoptPolynomial). A device
	// where the page holds no commit yet takes it, so that every device
	// chunks the page alike. Only in a store of layout 3 or later.
	Polynomial string `json:"polynomial,omitempty"`
	// Incarnations are the page's (store.Incarnation's String): a batch
	// lands in the page holding one of them, wherever it is named on the
	// device that pulls it. Only in a store of layout 4 or later.
	Incarnations []string `json:"inc,omitempty"`
	// Makers names the device that made each commit of the batch (by
	// hex id) that the device writing it did not make: one it took from
	// another page (mergeAway), or a page's head sent whole. A device
	// landing the batch names conflict files after them. Older builds
	// ignore it, and take every commit for the writer's.
	Makers map[string]string `json:"made,omitempty"`
	// In a checkpoint only: per device, its retention policy of the page
	// (Keep is the collecting device's), and the page's batch heads
	// (store.BatchHead).
	Keeps map[string]string `json:"keeps,omitempty"`
	Heads []deviceHead      `json:"heads,omitempty"`
}

// newest returns the id of pb's newest commit, its head when it went up,
// if it holds any.
func (pb pageBatch) newest() (store.CommitID, bool) {
	if len(pb.Commits) == 0 {
		return store.CommitID{}, false
	}
	return store.CommitID(cas.Hash(pb.Commits[len(pb.Commits)-1])), true
}

// A pieceRef says where a piece is: Len bytes at Off of a pack.
type pieceRef struct {
	Digest []byte `json:"d"`
	Pack   string `json:"p"`
	Off    int64  `json:"o"`
	Len    int64  `json:"n"`
}

// stateWritten is the repository's sync state row (+ writtenPrefix, the
// SHA-256 of the body in hex) of each batch this device went to write at
// a number not passed yet: a batch found at that number later
// (adoptBatch) is its own if it is one of them, even when what it holds
// is no longer here (a page deleted or made anew since).
const stateWritten = "written/"

func writtenPrefix(seq uint64) string { return fmt.Sprintf("%s%020d/", stateWritten, seq) }

func hexHash(b []byte) string {
	h := cas.Hash(b)
	return hex.EncodeToString(h[:])
}

func writtenKey(seq uint64, body []byte) string {
	return writtenPrefix(seq) + hexHash(body)
}

// writeBatch writes b to its device's log: remote.ErrExists if a batch of
// its number is there already.
func (s *Syncer) writeBatch(ctx context.Context, b *batch) (name string, err error) {
	if err := s.raise(ctx, remote.VersionIncarnations); err != nil {
		return "", err
	}
	body, err := json.Marshal(b)
	if err != nil {
		return "", err
	}
	if err := s.repo.SetSyncState(map[string][]byte{writtenKey(b.Seq, body): {1}}); err != nil {
		return "", err
	}
	// The record must outlive a power loss that the batch survives: else
	// the next round would take its own batch for another copy's.
	if err := s.repo.Sync(); err != nil {
		return "", err
	}
	name = batchName(b.Device, b.Seq)
	return name, s.be.Create(ctx, name, s.seal(name, body))
}

func decodeBatch(name string, body []byte) (*batch, error) {
	var b batch
	if err := json.Unmarshal(body, &b); err != nil {
		return nil, fmt.Errorf("cloudsync: batch %s: %w", name, err)
	}
	dev, seq, ok := parseBatchName(name)
	if !ok || dev != b.Device || seq != b.Seq {
		return nil, fmt.Errorf("cloudsync: batch %s names device %s, number %d", name, b.Device, b.Seq)
	}
	return &b, nil
}

// readBatch reads and decodes the batch at name.
func (s *Syncer) readBatch(ctx context.Context, name string) (*batch, error) {
	body, err := s.get(ctx, name)
	if err != nil {
		return nil, err
	}
	return decodeBatch(name, body)
}
