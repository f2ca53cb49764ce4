// Package metrics reports what a mount does as Prometheus metrics: the
// kernel's requests (every FUSE operation, timed), bytes read and written
// through the mount, commits and their sizes, and the repository's figures
// (pieces stored and deduplicated, open pages and the size of their dbs).
//
// Layer: beside fs, above store and journal; internal/server serves it.
package metrics

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"

	"github.com/ledgerfs/ledgerfs/internal/gc"
	"github.com/ledgerfs/ledgerfs/internal/scrub"
	"github.com/ledgerfs/ledgerfs/store"
)

// Metrics are a mount's metrics, in a registry of their own.
type Metrics struct {
	reg          *prometheus.Registry
	ops          *prometheus.HistogramVec
	bytesRead    prometheus.Counter
	bytesWritten prometheus.Counter
	commitSize   *prometheus.HistogramVec
	collections  *prometheus.CounterVec
	collected    *prometheus.CounterVec
	collectTime  prometheus.Histogram
	scrubbed     *prometheus.CounterVec
	sync         *syncMetrics
}

// New returns the metrics of a mount of repo.
func New(repo *store.Repository) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		ops: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ledgerfs_fuse_op_duration_seconds",
			Help:    "Time to serve a FUSE request, by operation.",
			Buckets: prometheus.ExponentialBuckets(10e-6, 4, 10), // 10 µs to 2.6 s
		}, []string{"op"}),
		bytesRead: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ledgerfs_read_bytes_total", Help: "Bytes read through the mount.",
		}),
		bytesWritten: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ledgerfs_written_bytes_total", Help: "Bytes written through the mount.",
		}),
		commitSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ledgerfs_commit_changes",
			Help:    "Keys changed by a commit: a group commit of queued changes (closes, unlinks, mkdirs) or a transaction's.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 7), // 1 to 4096
		}, []string{"kind"}),
		collections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ledgerfs_collections_total",
			Help: "Collections of pages, by result: done, busy (the page was in use; it stays due) or failed.",
		}, []string{"result"}),
		collected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ledgerfs_collected_total",
			Help: "What collections removed: commits pruned, pieces deleted and the bytes those pieces held.",
		}, []string{"what"}),
		collectTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ledgerfs_collection_duration_seconds",
			Help:    "Time a page's collection took, reclaiming the space included.",
			Buckets: prometheus.ExponentialBuckets(1e-3, 4, 10), // 1 ms to 4.4 min
		}),
		scrubbed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ledgerfs_scrubbed_total",
			Help: "What the background scrub hashed against digests: pages scrubbed whole, bytes read, and damaged pieces found.",
		}, []string{"what"}),
		sync: newSyncMetrics(),
	}
	m.sync.register(m.reg)
	m.reg.MustRegister(m.ops, m.bytesRead, m.bytesWritten, m.commitSize, m.collections, m.collected, m.collectTime, m.scrubbed,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		repoCollector{repo})
	return m
}

// Wrap returns raw with every request timed.
func (m *Metrics) Wrap(raw fuse.RawFileSystem) fuse.RawFileSystem {
	return &timedFS{RawFileSystem: raw, m: m}
}

// ObserveCommit records a commit of changes keys (see
// journal.Observers).
func (m *Metrics) ObserveCommit(explicit bool, changes int) {
	kind := "queued"
	if explicit {
		kind = "transaction"
	}
	m.commitSize.WithLabelValues(kind).Observe(float64(changes))
}

// ObserveCollection records a page's collection (see gc.Collector).
func (m *Metrics) ObserveCollection(r gc.Result, err error) {
	switch {
	case errors.Is(err, store.ErrBusy):
		m.collections.WithLabelValues("busy").Inc()
		return
	case err != nil:
		m.collections.WithLabelValues("failed").Inc()
		return
	}
	m.collections.WithLabelValues("done").Inc()
	m.collected.WithLabelValues("commits").Add(float64(r.Pruned))
	m.collected.WithLabelValues("pieces").Add(float64(r.Deleted))
	m.collected.WithLabelValues("bytes").Add(float64(r.Freed))
	m.collectTime.Observe(r.Took.Seconds())
}

// ObserveScrub counts a page's scrub.
func (m *Metrics) ObserveScrub(r scrub.Result) {
	m.scrubbed.WithLabelValues("pages").Inc()
	m.scrubbed.WithLabelValues("bytes").Add(float64(r.Bytes))
	m.scrubbed.WithLabelValues("damaged").Add(float64(len(r.Damaged)))
}

// Text returns the metrics in Prometheus's text format, for the .stats
// file.
func (m *Metrics) Text() []byte {
	var b bytes.Buffer
	mfs, err := m.reg.Gather()
	if err != nil {
		fmt.Fprintf(&b, "# some metrics are missing: %v\n", err)
	}
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			fmt.Fprintf(&b, "# %s: %v\n", mf.GetName(), err)
		}
	}
	return b.Bytes()
}

// Handler serves the metrics in Prometheus's text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

func (m *Metrics) observe(op string, start time.Time) {
	m.ops.WithLabelValues(op).Observe(time.Since(start).Seconds())
}

// timedFS times every request it passes on (rawfs.go).
// Requests for the mount's .stats file are passed on untimed: ledgerfs
// stats reads it every second, and counted them as the mount's work
// (14 operations a second on an idle mount).
type timedFS struct {
	fuse.RawFileSystem
	m *Metrics
	// stats is the node ID the kernel knows .stats by, once looked up.
	stats atomic.Uint64
}

// observe times a request for node, unless node is .stats.
func (f *timedFS) observe(op string, node uint64, start time.Time) {
	if node != 0 && node == f.stats.Load() {
		return
	}
	f.m.observe(op, start)
}

// repoCollector reads the repository's figures at each scrape.
type repoCollector struct{ repo *store.Repository }

var (
	piecesDesc   = prometheus.NewDesc("ledgerfs_pieces_written_total", "Pieces (chunks, index pieces, tree nodes) written, by whether they were new or already stored.", []string{"result"}, nil)
	bytesDesc    = prometheus.NewDesc("ledgerfs_piece_bytes_written_total", "Bytes of pieces written, by whether they were new (stored) or already stored (deduplicated).", []string{"result"}, nil)
	editsDesc    = prometheus.NewDesc("ledgerfs_value_edits_total", "File contents committed by editing the value before them, not by chunking the whole file again.", nil, nil)
	editDesc     = prometheus.NewDesc("ledgerfs_value_edit_bytes_total", "Bytes those edits chunked and hashed (chunked: new content; probed: old chunks read again to learn where their cuts close index levels).", []string{"what"}, nil)
	syncsDesc    = prometheus.NewDesc("ledgerfs_syncs_total", "Syncs that made changes durable, by what was synced (db: a page's db, checkpointing its sync log; log: a page's sync log alone).", []string{"what"}, nil)
	copiesDesc   = prometheus.NewDesc("ledgerfs_fsynced_commits_from_copy_total", "Commits of fsynced changes whose value was computed from a copy of them while the file went on being written and fsynced.", nil, nil)
	queuedDesc   = prometheus.NewDesc("ledgerfs_queued_in_log_total", "Journal changes of names and metadata (unlinks, renames, mkdirs, chmods) recorded in their page's sync log in place of a journal row in its db.", nil, nil)
	promotedDesc = prometheus.NewDesc("ledgerfs_promoted_in_log_total", "Changes a sync of their page (a directory's fsync after creates, renames and unlinks) recorded whole in its sync log rather than sync its db.", nil, nil)
	openDesc     = prometheus.NewDesc("ledgerfs_open_pages", "Page dbs open.", nil, nil)
	cacheDesc    = prometheus.NewDesc("ledgerfs_cache_lookups_total", "Lookups in the caches of decoded tree nodes (node) and value index pieces (index), by whether they found what they looked for.", []string{"cache", "result"}, nil)
	pageSizeDesc = prometheus.NewDesc("ledgerfs_page_db_bytes", "Size on disk of an open page's db, by part (lsm: tables; vlog: value log).", []string{"ledger", "page", "part"}, nil)
)

func (c repoCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- piecesDesc
	ch <- bytesDesc
	ch <- editsDesc
	ch <- editDesc
	ch <- syncsDesc
	ch <- copiesDesc
	ch <- queuedDesc
	ch <- promotedDesc
	ch <- openDesc
	ch <- cacheDesc
	ch <- pageSizeDesc
}

func (c repoCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.repo.Stats()
	ch <- prometheus.MustNewConstMetric(piecesDesc, prometheus.CounterValue, float64(s.PiecesStored), "stored")
	ch <- prometheus.MustNewConstMetric(piecesDesc, prometheus.CounterValue, float64(s.PiecesDeduplicated), "deduplicated")
	ch <- prometheus.MustNewConstMetric(bytesDesc, prometheus.CounterValue, float64(s.BytesStored), "stored")
	ch <- prometheus.MustNewConstMetric(bytesDesc, prometheus.CounterValue, float64(s.BytesDeduplicated), "deduplicated")
	ch <- prometheus.MustNewConstMetric(editsDesc, prometheus.CounterValue, float64(s.Edits))
	ch <- prometheus.MustNewConstMetric(editDesc, prometheus.CounterValue, float64(s.EditChunked), "chunked")
	ch <- prometheus.MustNewConstMetric(editDesc, prometheus.CounterValue, float64(s.EditProbed), "probed")
	ch <- prometheus.MustNewConstMetric(syncsDesc, prometheus.CounterValue, float64(s.DBSyncs), "db")
	ch <- prometheus.MustNewConstMetric(syncsDesc, prometheus.CounterValue, float64(s.LogSyncs), "log")
	ch <- prometheus.MustNewConstMetric(copiesDesc, prometheus.CounterValue, float64(s.CopyCommits))
	ch <- prometheus.MustNewConstMetric(queuedDesc, prometheus.CounterValue, float64(s.QueuedInLog))
	ch <- prometheus.MustNewConstMetric(promotedDesc, prometheus.CounterValue, float64(s.Promoted))
	ch <- prometheus.MustNewConstMetric(openDesc, prometheus.GaugeValue, float64(c.repo.OpenPages()))
	cs := c.repo.CacheStats()
	for _, v := range []struct {
		cache, result string
		n             uint64
	}{{"node", "hit", cs.NodeHits}, {"node", "miss", cs.NodeMisses}, {"index", "hit", cs.IndexHits}, {"index", "miss", cs.IndexMisses}} {
		ch <- prometheus.MustNewConstMetric(cacheDesc, prometheus.CounterValue, float64(v.n), v.cache, v.result)
	}
	for _, p := range c.repo.OpenPageSizes() {
		ch <- prometheus.MustNewConstMetric(pageSizeDesc, prometheus.GaugeValue, float64(p.LSM), p.Ledger, p.Page, "lsm")
		ch <- prometheus.MustNewConstMetric(pageSizeDesc, prometheus.GaugeValue, float64(p.ValueLog), p.Ledger, p.Page, "vlog")
	}
}
