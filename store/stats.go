package store

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
)

// Stats count a repository's writes of pieces since it was opened.
type Stats struct {
	// PiecesStored and BytesStored are the pieces written that were new.
	PiecesStored, BytesStored uint64
	// PiecesDeduplicated and BytesDeduplicated are the pieces written
	// that were stored already, and so cost nothing.
	PiecesDeduplicated, BytesDeduplicated uint64
	// Edits are the values stored by editing the value before them (a
	// small write's commit); EditChunked and EditProbed the bytes those
	// edits chunked and hashed, and chunked again to learn old cuts.
	Edits, EditChunked, EditProbed uint64
	// DBSyncs are the syncs of page dbs (checkpoints of their sync logs);
	// LogSyncs the syncs of sync logs alone, each an fsync or a
	// directory's fsync that did not need the db synced.
	DBSyncs, LogSyncs uint64
	// CopyCommits are the commits through an intent (Logged.Through): of
	// fsynced changes, computed from a copy while the file was written.
	CopyCommits uint64
	// QueuedInLog are the journal changes of names and metadata
	// recorded in their page's sync log in place of a journal row.
	QueuedInLog uint64
	// Promoted are the changes a sync of their page recorded in its sync
	// log, whole, rather than sync its db (a directory's fsync after
	// creates, renames and unlinks).
	Promoted uint64
}

type counters struct {
	piecesStored, bytesStored, piecesDedup, bytesDedup atomic.Uint64
	edits, editChunked, editProbed                     atomic.Uint64
	dbSyncs, logSyncs                                  atomic.Uint64
	copyCommits, queuedInLog, promoted                 atomic.Uint64
}

// CacheStats are the hits and misses of the repository's caches of decoded
// tree nodes and value index pieces.
type CacheStats struct {
	NodeHits, NodeMisses, IndexHits, IndexMisses uint64
}

// CacheStats returns the caches' counts so far.
func (r *Repository) CacheStats() CacheStats {
	var c CacheStats
	c.NodeHits, c.NodeMisses = r.nodes.Stats()
	c.IndexHits, c.IndexMisses = r.indexes.Stats()
	return c
}

// Stats returns the repository's counts so far.
func (r *Repository) Stats() Stats {
	c := &r.counters
	return Stats{
		PiecesStored: c.piecesStored.Load(), BytesStored: c.bytesStored.Load(),
		PiecesDeduplicated: c.piecesDedup.Load(), BytesDeduplicated: c.bytesDedup.Load(),
		Edits: c.edits.Load(), EditChunked: c.editChunked.Load(), EditProbed: c.editProbed.Load(),
		DBSyncs: c.dbSyncs.Load(), LogSyncs: c.logSyncs.Load(),
		CopyCommits: c.copyCommits.Load(), QueuedInLog: c.queuedInLog.Load(),
		Promoted: c.promoted.Load(),
	}
}

// PageSize is the disk space an open page's db takes: its tables and
// their manifest (LSM), and its value log (the space allocated: value-log
// files are made sparse at their full size).
type PageSize struct {
	Ledger, Page  string
	LSM, ValueLog int64
}

// OpenPageSizes returns the sizes of the open pages' dbs.
func (r *Repository) OpenPageSizes() []PageSize {
	r.mu.Lock()
	pages := make([]*Page, 0, len(r.open))
	for _, p := range r.open {
		pages = append(pages, p)
	}
	r.mu.Unlock()
	out := make([]PageSize, 0, len(pages))
	for _, p := range pages {
		if p.closed.Load() {
			continue
		}
		// Badger's own Size is refreshed once a minute.
		ps := PageSize{Ledger: p.Ledger, Page: p.Name}
		es, _ := os.ReadDir(p.Dir()) // a page closed meanwhile: no sizes
		for _, e := range es {
			info, err := e.Info()
			if err != nil {
				continue
			}
			used := info.Size()
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				used = min(used, st.Blocks*512)
			}
			switch filepath.Ext(e.Name()) {
			case ".vlog":
				ps.ValueLog += used
			case ".sst", "":
				ps.LSM += used
			}
		}
		out = append(out, ps)
	}
	return out
}
