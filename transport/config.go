package transport

import (
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"
)

// Defaults of the server's configuration.
const (
	// DefaultAddress binds loopback on a free port.
	DefaultAddress = "127.0.0.1:0"
	// DefaultMaxStreams is the default limit of concurrent DoGet streams.
	DefaultMaxStreams = 64
	// DefaultPrefetch is the default per-stream prefetch depth in steps.
	DefaultPrefetch = 2
	// DefaultMemoryBudget is the default budget of record bytes queued
	// across all streams (1 GiB).
	DefaultMemoryBudget = 1 << 30
	// DefaultMaxMessageSize is the default largest gRPC message the server
	// sends (256 MiB). Arrow steps exceed gRPC's 4 MiB default: clients must
	// raise their receive limit to at least this.
	DefaultMaxMessageSize = 256 << 20
	// DefaultIdleTimeout is how long a stream may wait for its client to
	// read (a step handed to gRPC and not taken, a shared-memory window
	// full) before the server ends it (10 minutes: longer than a training
	// loop's evaluation or checkpoint pauses, short enough that clients that
	// stopped reading give their slots back).
	DefaultIdleTimeout = 10 * time.Minute
	// MaxRecvMessageSize is the largest gRPC message the server receives
	// (tickets and descriptors are at most MaxTicketBytes).
	MaxRecvMessageSize = 1 << 20
)

// Option configures a Server.
type Option func(*Config)

// Config is a server's configuration. Build it with NewConfig; New builds one
// from the same options and refuses it unless Validate passes.
type Config struct {
	address    string
	certFile   string
	keyFile    string
	tokenFile  string
	insecure   bool
	roots      []string
	maxStreams int
	prefetch   int
	budget     int64
	maxMsg     int
	metrics    string
	zstd       bool
	logger     *slog.Logger
	mem        memory.Allocator
	shmArena   int64
	idle       time.Duration
	rules      []codeRule

	// Loaded by Validate.
	cert       *tls.Certificate
	token      string
	rootLocs   []location
	listenNet  string // "tcp" or "unix"
	listenAddr string
}

// NewConfig returns the configuration with every default set and opts
// applied.
func NewConfig(opts ...Option) *Config {
	c := &Config{
		address:    DefaultAddress,
		maxStreams: DefaultMaxStreams,
		prefetch:   DefaultPrefetch,
		budget:     DefaultMemoryBudget,
		maxMsg:     DefaultMaxMessageSize,
		logger:     slog.Default(),
		mem:        memory.DefaultAllocator,
		shmArena:   DefaultShmArena,
		idle:       DefaultIdleTimeout,
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// WithAddress sets the listen address: "unix:///path/to.sock" or "host:port"
// (default DefaultAddress, "127.0.0.1:0"; port 0 picks a free port). Anything
// but loopback or a Unix socket needs WithTLS and WithTokenFile, or
// WithInsecureNetwork.
func WithAddress(addr string) Option { return func(c *Config) { c.address = addr } }

// WithTLS serves TLS with the PEM certificate chain and key in the given files
// (default: no TLS).
func WithTLS(certFile, keyFile string) Option {
	return func(c *Config) { c.certFile, c.keyFile = certFile, keyFile }
}

// WithTokenFile requires every call to carry "authorization: Bearer <token>",
// the token being the file's content with surrounding whitespace trimmed
// (default: no token).
func WithTokenFile(path string) Option { return func(c *Config) { c.tokenFile = path } }

// WithInsecureNetwork allows binding a non-loopback address without TLS and a
// token (default false).
func WithInsecureNetwork(v bool) Option { return func(c *Config) { c.insecure = v } }

// WithAllowedRoots adds dataset roots ("gs://bucket/prefix", "/data"); every
// URI in a request must lie under one. At least one is required; "/" or
// "gs://bucket" allow everything on disk or in a bucket. Relative local roots
// are made absolute against the working directory.
func WithAllowedRoots(roots ...string) Option {
	return func(c *Config) { c.roots = append(c.roots, roots...) }
}

// WithMaxStreams limits concurrent DoGet streams (default DefaultMaxStreams;
// must be > 0). One more is refused with ResourceExhausted.
func WithMaxStreams(n int) Option { return func(c *Config) { c.maxStreams = n } }

// WithPrefetch sets how many steps each stream reads ahead of the step being
// sent (default DefaultPrefetch; 0 means no read-ahead beyond the step being
// produced; must be >= 0).
func WithPrefetch(depth int) Option { return func(c *Config) { c.prefetch = depth } }

// WithMemoryBudget bounds the bytes of records queued across all streams
// (default DefaultMemoryBudget; 0 means unbounded; must be >= 0). When the
// budget is spent, producers wait. A single step larger than the budget is
// admitted alone.
func WithMemoryBudget(bytes int64) Option { return func(c *Config) { c.budget = bytes } }

// WithMaxMessageSize sets the largest gRPC message the server sends
// (default DefaultMaxMessageSize; at least 1 MiB, below 2 GiB). A step larger
// than this fails with ResourceExhausted.
func WithMaxMessageSize(bytes int) Option { return func(c *Config) { c.maxMsg = bytes } }

// WithMetricsAddress serves Prometheus metrics at http://addr/metrics and
// the same counters as JSON at http://addr/debug/vars
// (default "": off). The same loopback rule as the listen address applies
// (there is no TLS for metrics).
func WithMetricsAddress(addr string) Option { return func(c *Config) { c.metrics = addr } }

// WithZstd compresses IPC bodies with zstd (default false).
func WithZstd(v bool) Option { return func(c *Config) { c.zstd = v } }

// WithLogger sets the structured logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(c *Config) { c.logger = l } }

// WithAllocator sets the allocator of IPC encoding buffers (default
// memory.DefaultAllocator).
func WithAllocator(mem memory.Allocator) Option { return func(c *Config) { c.mem = mem } }

// WithShmArena sets the bytes of each shared-memory stream's arena, the
// region its backend (an AllocatingBackend) decodes and gathers into, so
// that steps lying there are sent by reference instead of copied (default
// DefaultShmArena; 0 turns it off: every step is copied into its slot; must
// be >= 0). It is address space: the pages in use are the ones touched. An
// allocation that finds no room comes from the server's allocator and is
// copied.
func WithShmArena(bytes int64) Option { return func(c *Config) { c.shmArena = bytes } }

// WithIdleTimeout sets how long a stream may wait for its client to read
// before the server ends it with Unavailable (ErrIdle), giving back its
// stream slot and memory: over Flight, a step handed to gRPC that the
// client's flow-control window does not take, or the wait for the next step
// while steps gRPC took are still unwritten; over shared memory, a window
// of unread steps or slots the client holds. Default DefaultIdleTimeout; 0
// turns it off (a stream then waits for its client forever); must be >= 0.
func WithIdleTimeout(d time.Duration) Option { return func(c *Config) { c.idle = d } }

// WithErrorCode maps every error for which errors.Is(err, target) holds to
// code. Rules are tried in the order given, before this package's own
// sentinels; use it to register the backend's sentinels (for example
// loader.ErrNotFound -> codes.NotFound).
func WithErrorCode(target error, code codes.Code) Option {
	return func(c *Config) { c.rules = append(c.rules, codeRule{target, code}) }
}

// Validate reports every problem of the configuration at once, in one error
// wrapping ErrConfig. It reads the TLS and token files to check them.
//
// Length: one flat list of independent checks, a few lines each, so that
// every problem is reported in one error (pebble's Options.Validate).
func (c *Config) Validate() error {
	var p problems
	c.cert, c.token, c.rootLocs = nil, "", nil

	network, addr, loopback, addrErr := parseAddress(c.address)
	if addrErr != nil {
		p.add("listen address: %v", addrErr)
	}
	c.listenNet, c.listenAddr = network, addr

	hasTLS := c.certFile != "" || c.keyFile != ""
	switch {
	case c.certFile != "" && c.keyFile == "":
		p.add("TLS certificate %q given without a key file (--tls-key)", c.certFile)
	case c.certFile == "" && c.keyFile != "":
		p.add("TLS key %q given without a certificate file (--tls-cert)", c.keyFile)
	case hasTLS:
		cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
		if err != nil {
			p.add("TLS certificate %q / key %q: %v", c.certFile, c.keyFile, err)
		} else {
			c.cert = &cert
		}
	}
	if c.tokenFile != "" {
		tok, err := readToken(c.tokenFile)
		if err != nil {
			p.add("token file: %v", err)
		}
		c.token = tok
	}
	if addrErr == nil && !loopback && !c.insecure && (!hasTLS || c.tokenFile == "") {
		p.add("listen address %q is not loopback or a Unix socket: set --tls-cert, --tls-key and --token-file, or --insecure-network to serve it unprotected", c.address)
	}
	if c.metrics != "" {
		_, _, mloop, err := parseAddress(c.metrics)
		switch {
		case err != nil:
			p.add("metrics address: %v", err)
		case !mloop && !c.insecure:
			p.add("metrics address %q is not loopback or a Unix socket: metrics have no TLS; set --insecure-network to expose them", c.metrics)
		}
	}
	if len(c.roots) == 0 {
		p.add("no allowed roots: add at least one (--allow gs://bucket/prefix, --allow /data)")
	}
	for _, r := range c.roots {
		loc, err := parseRoot(r)
		if err != nil {
			p.add("allowed root: %v", err)
			continue
		}
		c.rootLocs = append(c.rootLocs, loc)
	}
	if c.maxStreams <= 0 {
		p.add("max streams %d must be > 0", c.maxStreams)
	}
	if c.prefetch < 0 {
		p.add("prefetch depth %d must be >= 0", c.prefetch)
	}
	if c.shmArena < 0 {
		p.add("shared-memory arena %d must be >= 0 (0 turns it off)", c.shmArena)
	}
	if c.idle < 0 {
		p.add("idle timeout %v must be >= 0 (0 turns it off)", c.idle)
	}
	if c.budget < 0 {
		p.add("memory budget %d must be >= 0 (0 means unbounded)", c.budget)
	}
	if c.maxMsg < 1<<20 || c.maxMsg >= 1<<31 {
		p.add("max message size %d must be in [1 MiB, 2 GiB)", c.maxMsg)
	}
	if c.logger == nil {
		p.add("logger is nil")
	}
	if c.mem == nil {
		p.add("allocator is nil")
	}
	for _, r := range c.rules {
		if r.target == nil {
			p.add("error code rule for %v has a nil target error", r.code)
		}
	}
	return p.err("transport", ErrConfig)
}

// readToken reads and trims a token file.
func readToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return "", fmt.Errorf("%s: %v", path, err)
	}
	tok := strings.TrimSpace(string(b))
	switch {
	case tok == "":
		return "", fmt.Errorf("%s is empty", path)
	case strings.ContainsAny(tok, " \t\r\n"):
		return "", fmt.Errorf("%s: the token contains whitespace", path)
	}
	return tok, nil
}

// parseAddress splits "unix:///path" or "host:port" into a network and
// address for net.Listen, and says whether it is loopback or a Unix socket.
func parseAddress(a string) (network, addr string, loopback bool, err error) {
	if p, ok := strings.CutPrefix(a, "unix://"); ok {
		if p == "" {
			return "", "", false, fmt.Errorf("%q has no socket path", a)
		}
		return "unix", p, true, nil
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return "", "", false, fmt.Errorf("%q: want unix:///path or host:port: %v", a, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return "", "", false, fmt.Errorf("%q: bad port %q", a, port)
	}
	if host == "localhost" {
		return "tcp", a, true, nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		// A host name other than localhost may resolve anywhere.
		return "tcp", a, false, nil
	}
	return "tcp", a, ip.IsLoopback(), nil
}
