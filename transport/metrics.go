package transport

import (
	"encoding/json"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"
)

// Metrics are the server's counters. On the metrics address they are served
// in the Prometheus text format at /metrics (metric names in
// docs/PROTOCOL.md) and as one JSON object at /debug/vars.
//
// The hot path adds to atomics (and observes two histograms) once per step,
// never per row; everything else is read when scraped.
type Metrics struct {
	streamsActive atomic.Int64
	streamsTotal  atomic.Int64
	steps         atomic.Int64
	rows          atomic.Int64
	bytes         atomic.Int64
	queued        atomic.Int64
	shmInPlace    atomic.Int64
	shmSpills     atomic.Int64

	// sendSeconds observes how long each step took to hand to gRPC; waitSeconds
	// how long the send loop waited for each step from the backend.
	sendSeconds prometheus.Histogram
	waitSeconds prometheus.Histogram

	mu     sync.Mutex
	errors map[string]int64
}

// MetricsSnapshot is a copy of the counters, as served in JSON.
type MetricsSnapshot struct {
	// StreamsActive is the number of DoGet streams being served.
	StreamsActive int64 `json:"streams_active"`
	// StreamsTotal counts DoGet streams opened.
	StreamsTotal int64 `json:"streams_total"`
	// Steps counts step messages sent.
	Steps int64 `json:"steps_sent"`
	// Rows counts rows sent (padding included).
	Rows int64 `json:"rows_sent"`
	// Bytes counts the Arrow buffer bytes of the records sent, before IPC
	// framing and compression.
	Bytes int64 `json:"record_bytes_sent"`
	// QueuedSteps is the steps read from the backend and not yet sent (queued
	// for the send loop, or handed to gRPC and not yet written), summed over
	// streams.
	QueuedSteps int64 `json:"queued_steps"`
	// ShmInPlaceBytes counts the step bytes the shared-memory wire sent by
	// reference to its arena, where the backend decoded or gathered them,
	// instead of copying them into a slot.
	ShmInPlaceBytes int64 `json:"shm_in_place_bytes"`
	// ShmArenaSpills counts buffers of 16 KiB and more that a shared-memory
	// stream allocated outside its arena for want of room there (each is
	// copied into a slot: raise --shm-arena).
	ShmArenaSpills int64 `json:"shm_arena_spills"`
	// Errors counts calls that ended in an error, by gRPC code name.
	Errors map[string]int64 `json:"errors_by_code"`
	// BudgetInUse is the bytes of records queued across streams now.
	BudgetInUse int64 `json:"memory_budget_in_use"`
	// Storage is the backend's storage counters (the same as the
	// meshfeed_storage_* metrics); absent when the backend reports none.
	Storage *StorageStats `json:"storage,omitempty"`
}

// stepSecondsBuckets are the buckets of the per-step histograms: 100µs to
// about 26s, by factors of 4 (an 8 MiB step takes a few ms on loopback).
var stepSecondsBuckets = prometheus.ExponentialBuckets(0.0001, 4, 10)

// initMetrics sets up the histograms and the server's own Prometheus
// registry (not the global one, so that one process can run several
// servers).
func (s *Server) initMetrics() {
	s.metrics.sendSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "meshfeed_step_send_seconds",
		Help: "Seconds each step took to hand to gRPC, over all streams. gRPC blocks while the client's " +
			"flow-control window is full, so high values mean the client (or network) is slower than the server.",
		Buckets: stepSecondsBuckets,
	})
	s.metrics.waitSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "meshfeed_step_wait_seconds",
		Help: "Seconds the send loop waited for each step from the backend (reading, decoding, cutting), over all " +
			"streams. High values mean the client is starved: the server, not the client, is the bottleneck.",
		Buckets: stepSecondsBuckets,
	})
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		&serverCollector{s: s},
		s.metrics.sendSeconds,
		s.metrics.waitSeconds,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	s.registry = reg
}

// Gatherer returns the server's Prometheus registry: what /metrics serves.
// Programs that serve metrics elsewhere can gather from it.
func (s *Server) Gatherer() prometheus.Gatherer { return s.registry }

func (m *Metrics) countError(c codes.Code) {
	m.mu.Lock()
	if m.errors == nil {
		m.errors = make(map[string]int64)
	}
	m.errors[c.String()]++
	m.mu.Unlock()
}

func (m *Metrics) snapshot() MetricsSnapshot {
	s := MetricsSnapshot{
		StreamsActive:   m.streamsActive.Load(),
		StreamsTotal:    m.streamsTotal.Load(),
		Steps:           m.steps.Load(),
		Rows:            m.rows.Load(),
		Bytes:           m.bytes.Load(),
		QueuedSteps:     m.queued.Load(),
		ShmInPlaceBytes: m.shmInPlace.Load(),
		ShmArenaSpills:  m.shmSpills.Load(),
		Errors:          map[string]int64{},
	}
	m.mu.Lock()
	for k, v := range m.errors {
		s.Errors[k] = v
	}
	m.mu.Unlock()
	return s
}

// Descriptions of the metrics that serverCollector reads at scrape time.
var (
	descStreamsActive = prometheus.NewDesc("meshfeed_streams_active",
		"DoGet streams being served.", nil, nil)
	descStreamsTotal = prometheus.NewDesc("meshfeed_streams_total",
		"DoGet streams opened.", nil, nil)
	descSteps = prometheus.NewDesc("meshfeed_sent_steps_total",
		"Step messages sent.", nil, nil)
	descRows = prometheus.NewDesc("meshfeed_sent_rows_total",
		"Rows sent, padding rows included.", nil, nil)
	descBytes = prometheus.NewDesc("meshfeed_sent_bytes_total",
		"Arrow buffer bytes of the step records sent, before IPC framing and compression.", nil, nil)
	descQueue = prometheus.NewDesc("meshfeed_queue_steps",
		"Steps read from the backend and not yet sent (queued for the send loop, or handed to gRPC and not yet "+
			"written), summed over streams.", nil, nil)
	descShmInPlace = prometheus.NewDesc("meshfeed_shm_in_place_bytes_total",
		"Step bytes the shared-memory wire sent by reference to its arena (where the backend decoded or gathered "+
			"them) instead of copying them into a slot.", nil, nil)
	descShmSpills = prometheus.NewDesc("meshfeed_shm_arena_spills_total",
		"Buffers of 16 KiB and more that shared-memory streams allocated outside their arena for want of room "+
			"there; each is copied into a slot instead of sent by reference (raise --shm-arena).", nil, nil)
	descBudget = prometheus.NewDesc("meshfeed_memory_budget_in_use_bytes",
		"Bytes of step records queued across streams, held against the memory budget.", nil, nil)
	descErrors = prometheus.NewDesc("meshfeed_errors_total",
		"Calls that ended in an error, by gRPC status code name.", []string{"code"}, nil)
	descStorageBytes = prometheus.NewDesc("meshfeed_storage_read_bytes_total",
		"Bytes returned by reads from the backend's storage (row group data and footers). Counted by the "+
			"store, so shared by every server over the same store; absent when the backend reports none.", nil, nil)
	descStorageReads = prometheus.NewDesc("meshfeed_storage_reads_total",
		"Successful ranged reads from the backend's storage; absent when the backend reports none.", nil, nil)
	descStorageRetries = prometheus.NewDesc("meshfeed_storage_retries_total",
		"Storage requests re-issued after a failed one (an error status, a broken or stalled connection), "+
			"resumes included; absent when the backend reports none.", nil, nil)
	descStorageResumes = prometheus.NewDesc("meshfeed_storage_resumes_total",
		"Storage retries that continued a ranged read past the bytes already received; absent when the "+
			"backend reports none.", nil, nil)
	descCacheHits = prometheus.NewDesc("meshfeed_storage_cache_hits_total",
		"Blocks of remote objects read from the local disk cache (serve --cache-dir), or from another read's fetch "+
			"of the same block, with no storage request; absent when the backend reports no storage counters.", nil, nil)
	descCacheMisses = prometheus.NewDesc("meshfeed_storage_cache_misses_total",
		"Blocks of remote objects the local disk cache fetched from the storage.", nil, nil)
	descCacheSaved = prometheus.NewDesc("meshfeed_storage_cache_saved_bytes_total",
		"Bytes served by local disk cache hits instead of the storage.", nil, nil)
	descCacheEvictions = prometheus.NewDesc("meshfeed_storage_cache_evictions_total",
		"Local disk cache entries removed to keep the cache within --cache-size.", nil, nil)
	descCacheCorrupt = prometheus.NewDesc("meshfeed_storage_cache_corrupt_total",
		"Local disk cache entries found truncated or corrupt on read; each was removed and fetched again.", nil, nil)
	descCacheWriteErrors = prometheus.NewDesc("meshfeed_storage_cache_write_errors_total",
		"Blocks the local disk cache could not write (a full or failing disk); those reads went on uncached.", nil, nil)
)

// storageDescs are the descriptions of the storage metrics, in the order
// storageCounters gives their values.
var storageDescs = []*prometheus.Desc{descStorageBytes, descStorageReads, descStorageRetries, descStorageResumes,
	descCacheHits, descCacheMisses, descCacheSaved, descCacheEvictions, descCacheCorrupt, descCacheWriteErrors}

// storageCounters returns st's counters in the order of storageDescs.
func storageCounters(st StorageStats) []int64 {
	return []int64{st.BytesRead, st.Reads, st.Retries, st.Resumes,
		st.CacheHits, st.CacheMisses, st.CacheBytesSaved, st.CacheEvictions, st.CacheCorrupt, st.CacheWriteErrors}
}

// serverCollector reads the server's atomics, and its backend's storage
// counters (when the backend is a StatsReporter), at scrape time.
type serverCollector struct{ s *Server }

// Describe implements prometheus.Collector.
func (c *serverCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descStreamsActive, descStreamsTotal, descSteps, descRows, descBytes,
		descQueue, descShmInPlace, descShmSpills, descBudget, descErrors} {
		ch <- d
	}
	for _, d := range storageDescs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *serverCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	m := s.metrics.snapshot()
	gauge := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge(descStreamsActive, m.StreamsActive)
	counter(descStreamsTotal, m.StreamsTotal)
	counter(descSteps, m.Steps)
	counter(descRows, m.Rows)
	counter(descBytes, m.Bytes)
	gauge(descQueue, m.QueuedSteps)
	counter(descShmInPlace, m.ShmInPlaceBytes)
	counter(descShmSpills, m.ShmArenaSpills)
	gauge(descBudget, s.budget.inUse())
	for code, n := range m.Errors {
		counter(descErrors, n, code)
	}
	if r, ok := s.backend.(StatsReporter); ok {
		if st, ok := r.StorageStats(); ok {
			for i, v := range storageCounters(st) {
				counter(storageDescs[i], v)
			}
		}
	}
}

// metricsHandler serves the server's registry at /metrics (Prometheus text
// format) and its snapshot as JSON at /debug/vars.
func (s *Server) metricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	mux.HandleFunc("/debug/vars", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(s.Metrics())
	})
	return mux
}
