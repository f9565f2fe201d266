package transport

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// maxLoggedError bounds the bytes of an error message the server logs.
const maxLoggedError = 64 << 10

// healthPrefix is the gRPC method prefix of the health service, which is
// exempt from the token check so that probes need no secret.
const healthPrefix = "/grpc.health.v1.Health/"

// Server is the Arrow Flight server: GetFlightInfo, GetSchema and DoGet over
// a Backend, with the health service beside them.
type Server struct {
	flight.BaseFlightServer

	cfg     *Config
	backend Backend
	codes   []ErrorCode // the backend's error codes (ErrorCoder)
	log     *slog.Logger
	gs      *grpc.Server
	health  *health.Server
	slots   chan struct{}
	budget  *budget
	// streams counts the DoGet streams' goroutines, which outlive their
	// call when the idle timeout gives up on a send (DoGet).
	streams sync.WaitGroup
	metrics Metrics
	// registry holds the Prometheus collectors served at /metrics.
	registry *prometheus.Registry

	mu         sync.Mutex
	metricsSrv *http.Server
	metricsLis net.Listener
	// The shared-memory wire (shm.go).
	shmLis    []*net.UnixListener
	shmConns  map[*net.UnixConn]struct{}
	shmClosed bool
	shmWG     sync.WaitGroup
}

// New validates the configuration built from opts (reporting every problem at
// once) and returns a server over backend. Call Listen and Serve to run it.
func New(backend Backend, opts ...Option) (*Server, error) {
	cfg := NewConfig(opts...)
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if backend == nil {
		return nil, fmt.Errorf("transport: %w: nil backend", ErrConfig)
	}
	if rb, ok := backend.(RootedBackend); ok {
		if err := rb.UseRoots(cfg.localRoots()); err != nil {
			return nil, fmt.Errorf("transport: %w: %w", ErrConfig, err)
		}
	}
	s := &Server{
		cfg:     cfg,
		backend: backend,
		log:     cfg.logger,
		health:  health.NewServer(),
		slots:   make(chan struct{}, cfg.maxStreams),
		budget:  newBudget(cfg.budget),
	}
	if lb, ok := backend.(LimitedBackend); ok {
		if err := lb.UseLimits(s.Limits()); err != nil {
			return nil, fmt.Errorf("transport: %w: %w", ErrConfig, err)
		}
	}
	if ec, ok := backend.(ErrorCoder); ok {
		s.codes = ec.ErrorCodes()
	}
	s.initMetrics()
	codec, err := newFlightCodec()
	if err != nil {
		return nil, err
	}
	gopts := []grpc.ServerOption{
		grpc.ForceServerCodecV2(codec),
		grpc.MaxSendMsgSize(cfg.maxMsg),
		grpc.MaxRecvMsgSize(MaxRecvMessageSize),
		grpc.ChainUnaryInterceptor(s.unaryEdge, s.unaryAuth),
		grpc.ChainStreamInterceptor(s.streamEdge, s.streamAuth),
	}
	if cfg.cert != nil {
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(&tls.Config{
			Certificates: []tls.Certificate{*cfg.cert},
			MinVersion:   tls.VersionTLS12,
		})))
	}
	s.gs = grpc.NewServer(gopts...)
	flight.RegisterFlightServiceServer(s.gs, s)
	healthpb.RegisterHealthServer(s.gs, s.health)
	return s, nil
}

// Listen binds the configured address (a Unix socket or TCP). A stale Unix
// socket file that nobody listens on is removed first.
func (s *Server) Listen() (net.Listener, error) {
	network, addr := s.cfg.listenNet, s.cfg.listenAddr
	if network == "unix" {
		removeStaleSocket(addr)
	}
	lis, err := net.Listen(network, addr)
	if err != nil {
		return nil, fmt.Errorf("transport: listen %s: %w", s.cfg.address, err)
	}
	return lis, nil
}

// removeStaleSocket removes path if it is a Unix socket that refuses
// connections.
func removeStaleSocket(path string) {
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode()&os.ModeSocket == 0 {
		return
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return
	}
	_ = os.Remove(path)
}

// Serve serves gRPC on lis (and the metrics endpoint, if configured) until
// Shutdown. It returns nil after Shutdown.
func (s *Server) Serve(lis net.Listener) error {
	if s.cfg.metrics != "" {
		network, addr, _, _ := parseAddress(s.cfg.metrics)
		mlis, err := net.Listen(network, addr)
		if err != nil {
			return fmt.Errorf("transport: metrics listen %s: %w", s.cfg.metrics, err)
		}
		srv := &http.Server{Handler: s.metricsHandler(), ReadHeaderTimeout: 10 * time.Second}
		s.mu.Lock()
		s.metricsSrv, s.metricsLis = srv, mlis
		s.mu.Unlock()
		go func() { _ = srv.Serve(mlis) }()
		s.log.Info("metrics serving", "addr", mlis.Addr().String(), "paths", "/metrics /debug/vars")
	}
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus("arrow.flight.protocol.FlightService", healthpb.HealthCheckResponse_SERVING)
	s.log.Info("serving", "addr", lis.Addr().String(), "tls", s.cfg.cert != nil, "token", s.cfg.token != "",
		"max_streams", s.cfg.maxStreams, "prefetch", s.cfg.prefetch, "memory_budget", s.cfg.budget,
		"max_message_size", s.cfg.maxMsg, "zstd", s.cfg.zstd)
	if err := s.gs.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("transport: serve: %w", err)
	}
	return nil
}

// MetricsAddr returns the metrics endpoint's address once Serve has bound it,
// else nil.
func (s *Server) MetricsAddr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.metricsLis == nil {
		return nil
	}
	return s.metricsLis.Addr()
}

// Shutdown stops accepting calls, marks the health service NOT_SERVING and
// lets the calls in flight finish. When ctx is done first, it cancels them
// and returns ctx's error once they have returned. Either way it returns
// once every stream has closed its backend stream (those ended by the idle
// timeout included), so the backend can be closed after it.
func (s *Server) Shutdown(ctx context.Context) error {
	s.health.Shutdown()
	s.shutdownShm()
	done := make(chan struct{})
	go func() {
		s.gs.GracefulStop()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		s.log.Warn("shutdown: drain timed out, cancelling streams", "streams_active", s.metrics.streamsActive.Load())
		s.gs.Stop()
		<-done
		err = ctx.Err()
	}
	// A stream the idle timeout abandoned has returned from its call but may
	// still be closing its backend stream: the caller may close the backend
	// next. Every call has returned, so no stream starts any more.
	s.streams.Wait()
	s.mu.Lock()
	srv := s.metricsSrv
	s.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
	return err
}

// Limits returns the limits a request's plan must fit on this server, with
// its memory account (what New hands a LimitedBackend).
func (s *Server) Limits() Limits {
	return Limits{
		MaxMessageSize: int64(s.cfg.maxMsg),
		MemoryBudget:   s.cfg.budget,
		Prefetch:       s.cfg.prefetch,
		IdleTimeout:    s.cfg.idle,
		Memory:         &MemoryAccount{b: s.budget},
	}
}

// Metrics returns a snapshot of the server's counters.
func (s *Server) Metrics() MetricsSnapshot {
	m := s.metrics.snapshot()
	m.BudgetInUse = s.budget.inUse()
	if r, ok := s.backend.(StatsReporter); ok {
		if st, ok := r.StorageStats(); ok {
			m.Storage = &st
		}
	}
	return m
}

// --- the edge: auth and error mapping -------------------------------------

// authorize checks the bearer token of the call (when a token is configured).
func (s *Server) authorize(ctx context.Context, method string) error {
	if s.cfg.token == "" || strings.HasPrefix(method, healthPrefix) {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	want := []byte("Bearer " + s.cfg.token)
	ok := 0
	for _, v := range md.Get("authorization") {
		ok |= subtle.ConstantTimeCompare([]byte(v), want)
	}
	if ok != 1 {
		if len(md.Get("authorization")) == 0 {
			return fmt.Errorf("transport: %w: missing \"authorization: Bearer <token>\" header", ErrUnauthenticated)
		}
		return fmt.Errorf("transport: %w: wrong token", ErrUnauthenticated)
	}
	return nil
}

func (s *Server) unaryAuth(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := s.authorize(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (s *Server) streamAuth(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := s.authorize(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return h(srv, ss)
}

// edge converts a handler's error to a gRPC status, once, and counts it.
func (s *Server) edge(method string, err error) error {
	if err == nil {
		return nil
	}
	st := toStatus(s.cfg.rules, s.codes, err)
	code := status.Code(st)
	s.metrics.countError(code)
	level := slog.LevelWarn
	switch code {
	case codes.Canceled, codes.DeadlineExceeded:
		level = slog.LevelDebug
	case codes.Internal, codes.Unknown, codes.DataLoss:
		level = slog.LevelError
	}
	s.log.Log(context.Background(), level, "call failed", "method", method, "code", code.String(), "err", capMessage(err.Error(), maxLoggedError))
	return st
}

func (s *Server) unaryEdge(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	resp, err := h(ctx, req)
	return resp, s.edge(info.FullMethod, err)
}

func (s *Server) streamEdge(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return s.edge(info.FullMethod, h(srv, ss))
}

// --- Flight methods -------------------------------------------------------

// request decodes a ticket or command and checks its URIs against the roots.
func (s *Server) request(data []byte) (*Request, error) {
	req, err := DecodeRequest(data)
	if err != nil {
		return nil, err
	}
	if err := checkRoots(req.AllDatasets(), s.cfg.rootLocs); err != nil {
		return nil, err
	}
	if m := req.Manifest; m != "" && m != "auto" && m != "off" {
		if err := checkRoots([]string{m}, s.cfg.rootLocs); err != nil {
			return nil, err
		}
	}
	if err := checkRootsOf("tokenizer", req.Tokenizers(), s.cfg.rootLocs); err != nil {
		return nil, err
	}
	return req, nil
}

// plan answers the request of a CMD descriptor from the backend.
func (s *Server) plan(ctx context.Context, desc *flight.FlightDescriptor) (*Request, *PlanInfo, error) {
	if desc.GetType() != flight.DescriptorCMD {
		return nil, nil, fmt.Errorf("transport: %w: FlightDescriptor type %v is not supported: send type CMD with the ticket JSON as cmd", ErrBadRequest, desc.GetType())
	}
	req, err := s.request(desc.GetCmd())
	if err != nil {
		return nil, nil, err
	}
	info, err := s.backend.Info(ctx, req)
	if err != nil {
		return nil, nil, fmt.Errorf("plan: %w", err)
	}
	if info == nil || info.Schema == nil {
		return nil, nil, errors.New("transport: backend returned no schema")
	}
	return req, info, nil
}

// GetFlightInfo answers the plan of the request in a CMD descriptor: the
// schema, one endpoint whose ticket is the request, and the PlanInfo as JSON
// app_metadata.
func (s *Server) GetFlightInfo(ctx context.Context, desc *flight.FlightDescriptor) (*flight.FlightInfo, error) {
	req, info, err := s.plan(ctx, desc)
	if err != nil {
		return nil, err
	}
	ticket, err := req.Encode()
	if err != nil {
		return nil, fmt.Errorf("transport: encode ticket: %w", err)
	}
	meta, err := json.Marshal(info)
	if err != nil {
		return nil, fmt.Errorf("transport: encode plan info: %w", err)
	}
	return &flight.FlightInfo{
		Schema:           flight.SerializeSchema(info.Schema, s.cfg.mem),
		FlightDescriptor: desc,
		Endpoint:         []*flight.FlightEndpoint{{Ticket: &flight.Ticket{Ticket: ticket}}},
		TotalRecords:     -1,
		TotalBytes:       -1,
		Ordered:          true,
		AppMetadata:      meta,
	}, nil
}

// GetSchema answers the schema of the request in a CMD descriptor.
func (s *Server) GetSchema(ctx context.Context, desc *flight.FlightDescriptor) (*flight.SchemaResult, error) {
	_, info, err := s.plan(ctx, desc)
	if err != nil {
		return nil, err
	}
	return &flight.SchemaResult{Schema: flight.SerializeSchema(info.Schema, s.cfg.mem)}, nil
}

// DoGet streams the steps of the request in the ticket: the schema first,
// then one message per step with StepMeta as JSON app_metadata.
func (s *Server) DoGet(t *flight.Ticket, fs flight.FlightService_DoGetServer) error {
	ctx := fs.Context()
	req, err := s.request(t.GetTicket())
	if err != nil {
		return err
	}
	leave, err := s.admitStream()
	if err != nil {
		return err
	}
	// The stream runs on its own goroutine, so that a send its client never
	// takes (a full flow-control window) can be given up after the idle
	// timeout: returning ends the call, which unblocks that send; the
	// stream's slot returns once the stream has released what it holds, and
	// Shutdown waits for it.
	idle := &idleClock{}
	done := make(chan error, 1)
	s.streams.Add(1)
	go func() {
		defer s.streams.Done()
		defer leave()
		st, err := s.backend.Open(ctx, req)
		if err != nil {
			done <- fmt.Errorf("open stream: %w", err)
			return
		}
		start := time.Now()
		n, err := s.stream(ctx, st, fs, idle)
		s.log.Debug("stream ended", "steps", n.steps, "rows", n.rows, "bytes", n.bytes,
			"seconds", time.Since(start).Seconds(), "err", err)
		done <- err
	}()
	return idle.wait(done, s.cfg.idle)
}
