package metrics

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ledgerfs/ledgerfs/internal/cloudsync"
	"github.com/ledgerfs/ledgerfs/internal/remote"
)

// syncMetrics are a mount's sync figures: ledgerfs_sync_*.
type syncMetrics struct {
	requests  *prometheus.CounterVec
	bytes     *prometheus.CounterVec
	commits   *prometheus.CounterVec
	rounds    *prometheus.CounterVec
	merges    prometheus.Counter
	conflicts prometheus.Counter
	lastOK    atomic.Int64 // Unix ns of the last round that went through
}

func newSyncMetrics() *syncMetrics {
	return &syncMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ledgerfs_sync_requests_total",
			Help: "Requests to the remote store, by kind (create, put, get, get_range, list) and result (ok, error).",
		}, []string{"kind", "result"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ledgerfs_sync_bytes_total", Help: "Bytes of packs sent up and fetched down.",
		}, []string{"direction"}),
		commits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ledgerfs_sync_commits_total", Help: "Commits pushed up and pulled down.",
		}, []string{"direction"}),
		rounds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ledgerfs_sync_rounds_total", Help: "Sync rounds (pull, then push), by result (ok, error).",
		}, []string{"result"}),
		merges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ledgerfs_sync_merges_total", Help: "Merges of another device's head with the local one.",
		}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ledgerfs_sync_conflicts_total", Help: "Conflict files a merge kept (the losing side of an entry changed on two devices).",
		}),
	}
}

func (s *syncMetrics) register(reg *prometheus.Registry) {
	reg.MustRegister(s.requests, s.bytes, s.commits, s.rounds, s.merges, s.conflicts,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ledgerfs_sync_seconds_since_success",
			Help: "Seconds since the last sync round that went through (-1: none yet).",
		}, func() float64 {
			t := s.lastOK.Load()
			if t == 0 {
				return -1
			}
			return time.Since(time.Unix(0, t)).Seconds()
		}))
}

// ObserveSync records a sync round's figures.
func (m *Metrics) ObserveSync(st cloudsync.Stats, err error) {
	s := m.sync
	s.bytes.WithLabelValues("up").Add(float64(st.BytesUp))
	s.bytes.WithLabelValues("down").Add(float64(st.BytesDown))
	s.commits.WithLabelValues("up").Add(float64(st.CommitsUp))
	s.commits.WithLabelValues("down").Add(float64(st.CommitsDown))
	s.merges.Add(float64(st.Merges))
	s.conflicts.Add(float64(st.Conflicts))
	if err != nil {
		s.rounds.WithLabelValues("error").Inc()
		return
	}
	s.rounds.WithLabelValues("ok").Inc()
	s.lastOK.Store(time.Now().UnixNano())
}

// CountRequests returns be with every request counted.
func (m *Metrics) CountRequests(be remote.Backend) remote.Backend {
	return &countedBackend{Backend: be, m: m.sync}
}

type countedBackend struct {
	remote.Backend
	m *syncMetrics
}

func (c *countedBackend) count(kind string, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	c.m.requests.WithLabelValues(kind, result).Inc()
}

func (c *countedBackend) Create(ctx context.Context, name string, body []byte) error {
	err := c.Backend.Create(ctx, name, body)
	c.count("create", err)
	return err
}

func (c *countedBackend) Put(ctx context.Context, name string, body []byte) error {
	err := c.Backend.Put(ctx, name, body)
	c.count("put", err)
	return err
}

func (c *countedBackend) Get(ctx context.Context, name string) ([]byte, error) {
	b, err := c.Backend.Get(ctx, name)
	c.count("get", err)
	return b, err
}

func (c *countedBackend) GetRange(ctx context.Context, name string, off, n int64) ([]byte, error) {
	b, err := c.Backend.GetRange(ctx, name, off, n)
	c.count("get_range", err)
	return b, err
}

func (c *countedBackend) Delete(ctx context.Context, name string) error {
	err := c.Backend.Delete(ctx, name)
	c.count("delete", err)
	return err
}

// List counts one request per listing; a long one is several pages of
// 1,000 keys on S3, counted as one.
func (c *countedBackend) List(ctx context.Context, prefix, startAfter string, fn func(remote.Object) error) error {
	err := c.Backend.List(ctx, prefix, startAfter, fn)
	c.count("list", err)
	return err
}
