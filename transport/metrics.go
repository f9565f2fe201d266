package transport

import (
	"encoding/json"
	"net/http"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
)

// Metrics are the server's counters. They are served as one JSON object at
// /debug/vars on the metrics address (expvar style; Prometheus is not a
// dependency yet).
type Metrics struct {
	streamsActive atomic.Int64
	streamsTotal  atomic.Int64
	steps         atomic.Int64
	rows          atomic.Int64
	bytes         atomic.Int64

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
	// Errors counts calls that ended in an error, by gRPC code name.
	Errors map[string]int64 `json:"errors_by_code"`
	// BudgetInUse is the bytes of records queued across streams now.
	BudgetInUse int64 `json:"memory_budget_in_use"`
}

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
		StreamsActive: m.streamsActive.Load(),
		StreamsTotal:  m.streamsTotal.Load(),
		Steps:         m.steps.Load(),
		Rows:          m.rows.Load(),
		Bytes:         m.bytes.Load(),
		Errors:        map[string]int64{},
	}
	m.mu.Lock()
	for k, v := range m.errors {
		s.Errors[k] = v
	}
	m.mu.Unlock()
	return s
}

// metricsHandler serves the snapshot returned by snap as JSON.
func metricsHandler(snap func() MetricsSnapshot) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/vars", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(snap())
	})
	return mux
}
