package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/meshfeed/meshfeed/batching"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/transport"
)

// rootFlags is the repeatable --allow flag (no comma splitting: a root may contain one).
type rootFlags []string

func (s *rootFlags) String() string     { return strings.Join(*s, ",") }
func (s *rootFlags) Set(v string) error { *s = append(*s, v); return nil }

// gcLimit returns the Go runtime's soft memory limit for a server of these
// flags (-1: leave it), from the environment getenv reads.
//
// Memory is bounded by configuration (DESIGN.md invariant 6): queued steps
// (--memory-budget) plus each stream's read-ahead, plus 128 MiB for the
// program; the runtime is told, so that garbage-collector headroom does not
// double it. GOMEMLIMIT, when set, wins; so does an unbounded budget. GOGC
// is left at the runtime's default: collecting at GOGC=25 held 70 MiB less at
// peak on shuffled tabular rows, but delivered 5-13% less on images and
// tabular in bench-memcpy (BENCHMARKS.md; likely because the pool's
// sync.Pools drop their buffers every two collections).
func gcLimit(getenv func(string) string, budget, readAhead int64, maxStreams int) int64 {
	if getenv("GOMEMLIMIT") == "" && budget > 0 && maxStreams > 0 {
		return budget + readAhead*int64(maxStreams) + 128<<20
	}
	return -1
}

// serveFlags are the serve command's flags, as parsed.
type serveFlags struct {
	allow      rootFlags
	addr       *string
	cert       *string
	key        *string
	token      *string
	insecure   *bool
	maxStreams *int
	prefetch   *int
	readAhead  *int64
	mapCache   *int64
	budget     *int64
	maxMsg     *int
	metrics    *string
	zstd       *bool
	shmAddr    *string
	shmArena   *int64
	idle       *time.Duration
	drain      *time.Duration
	backend    *string
	demoRows   *int64
	logLevel   *string
	parentPID  *int
	remote     *remoteFlags
	azureURL   *string
	cache      *cacheFlags
}

// newServeFlags defines the serve command's flags on fs.
func newServeFlags(fs *flag.FlagSet) *serveFlags {
	f := &serveFlags{}
	f.addr = fs.String("addr", transport.DefaultAddress, "listen address: unix:///path/to.sock or host:port (port 0 picks a free one)")
	fs.StringVar(f.addr, "listen", transport.DefaultAddress, "same as --addr")
	f.cert = fs.String("tls-cert", "", "PEM certificate chain file (TLS)")
	f.key = fs.String("tls-key", "", "PEM private key file (TLS)")
	f.token = fs.String("token-file", "", "file holding the bearer token every call must carry")
	f.insecure = fs.Bool("insecure-network", false, "allow a non-loopback address without TLS and a token")
	fs.Var(&f.allow, "allow", "dataset root that requests may read under (gs://bucket/prefix, s3://bucket/prefix, az://container/prefix, https://host/prefix or a path); repeatable, at least one")
	f.maxStreams = fs.Int("max-streams", transport.DefaultMaxStreams, "maximum concurrent DoGet streams")
	f.prefetch = fs.Int("prefetch", transport.DefaultPrefetch, "steps each stream reads ahead of the one being sent")
	f.readAhead = fs.Int64("read-ahead", loader.DefaultReadAhead, "bytes of row groups each stream reads ahead (compressed + decoded), split among its slices; larger row groups are read in pieces, and a request that cannot fit is refused at plan time; 0: one whole row group per slice at a time")
	f.mapCache = fs.Int64("map-cache", 0, "keep local files of up to this many bytes in all mapped between reads (faster repeated epochs of page-cache-warm data; mapped pages count in RSS); 0: off")
	f.budget = fs.Int64("memory-budget", transport.DefaultMemoryBudget, "bytes of records queued across all streams (0: unbounded)")
	f.maxMsg = fs.Int("max-message-size", transport.DefaultMaxMessageSize, "largest gRPC message sent, bytes (clients must accept at least this)")
	f.metrics = fs.String("metrics-addr", "", "serve Prometheus metrics at http://ADDR/metrics (and JSON counters at /debug/vars); off when empty")
	f.zstd = fs.Bool("zstd", false, "compress IPC bodies with zstd")
	f.shmAddr = fs.String("shm", "", "also serve the same-host shared-memory wire on this Unix socket (unix:///path.sock; docs/PROTOCOL.md); off when empty")
	f.shmArena = fs.Int64("shm-arena", transport.DefaultShmArena, "bytes of each shared-memory stream's arena, which the stream decodes and gathers into so that steps travel without a copy into a slot (address space: only the pages in use are touched); 0: off, every step is copied")
	f.idle = fs.Duration("idle-timeout", transport.DefaultIdleTimeout, "end a stream whose client takes no step for this long (a full flow-control window, a shared-memory window or slots held), freeing its slot and memory; the client sees UNAVAILABLE; 0: never")
	f.drain = fs.Duration("drain-timeout", 30*time.Second, "on SIGTERM, how long streams in flight may finish before they are cancelled")
	f.backend = fs.String("backend", "pipeline", "pipeline (loader+batching) or demo (synthetic rows, for tests)")
	f.demoRows = fs.Int64("demo-rows", 1000, "rows of the demo backend's dataset")
	f.logLevel = fs.String("log-level", "info", "debug, info, warn or error")
	f.remote = newRemoteFlags(fs)
	f.cache = newCacheFlags(fs)
	f.parentPID = fs.Int("parent-pid", 0, "stop (streams cancelled, no drain) once process PID is no longer this server's parent: the process that started it ended, even by SIGKILL; checked every 200ms; 0: off")
	f.azureURL = fs.String("azure-endpoint", "", "blob service URL for az:// and abfs:// (Azurite: http://127.0.0.1:10000/devstoreaccount1; a sovereign cloud: https://ACCOUNT.blob.core.chinacloudapi.cn); credentials from AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_ACCOUNT_NAME with AZURE_STORAGE_ACCOUNT_KEY or AZURE_STORAGE_SAS_TOKEN, else the default Azure credential chain; empty: the credentials' endpoint, or Azure's")
	return f
}

func runServe(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: meshfeed serve --allow ROOT [--allow ROOT ...] [flags]\n\n"+
			"Serves Arrow Flight (see docs/PROTOCOL.md). On start it prints one line\n"+
			"\"meshfeed: listening on ADDR\" to stdout; SIGTERM or SIGINT drains and exits.\n\nflags:")
		fs.PrintDefaults()
	}
	f := newServeFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*f.logLevel)); err != nil {
		return fmt.Errorf("--log-level %q: %v", *f.logLevel, err)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if *f.parentPID > 0 {
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		go watchParent(ctx, *f.parentPID, os.Getppid, parentPoll, func() { cancel(errParentGone) })
	}

	var be transport.Backend
	var beOpts []transport.Option
	switch *f.backend {
	case "demo":
		be = &transport.DemoBackend{NumRows: *f.demoRows, Plan: demoPlan}
	case "pipeline":
		remote, err := f.remote.muxOptions()
		if err != nil {
			return err
		}
		_, cacheOpts, err := f.cache.open()
		if err != nil {
			return err
		}
		storeOpts := append(append(remote, azureStoreOptions(*f.azureURL)...), cacheOpts...)
		p, err := newPipelineBackend(ctx, *f.readAhead, *f.mapCache, storeOpts...)
		if err != nil {
			return err
		}
		defer p.Close()
		// Steps whose slices cannot be sent as they are get joined from the
		// pipeline's pool, like the slices themselves.
		be, beOpts = p, []transport.Option{transport.WithAllocator(p.Allocator())}
	default:
		return fmt.Errorf("--backend %q: want pipeline or demo", *f.backend)
	}

	if limit := gcLimit(os.Getenv, *f.budget, *f.readAhead, *f.maxStreams); limit >= 0 {
		debug.SetMemoryLimit(limit)
	}
	srv, err := transport.New(be, append([]transport.Option{
		transport.WithAddress(*f.addr),
		transport.WithTLS(*f.cert, *f.key),
		transport.WithTokenFile(*f.token),
		transport.WithInsecureNetwork(*f.insecure),
		transport.WithAllowedRoots(f.allow...),
		transport.WithMaxStreams(*f.maxStreams),
		transport.WithPrefetch(*f.prefetch),
		transport.WithMemoryBudget(*f.budget),
		transport.WithMaxMessageSize(*f.maxMsg),
		transport.WithMetricsAddress(*f.metrics),
		transport.WithZstd(*f.zstd),
		transport.WithShmArena(*f.shmArena),
		transport.WithIdleTimeout(*f.idle),
		transport.WithLogger(log),
	}, beOpts...)...)
	if err != nil {
		return err
	}
	return serveUntilSignal(ctx, srv, *f.shmAddr, *f.drain, log)
}

// parentPoll is how often watchParent asks for the parent's pid.
const parentPoll = 200 * time.Millisecond

// errParentGone ends serve when the process of --parent-pid is gone.
var errParentGone = errors.New("parent process gone")

// watchParent calls gone once getppid no longer returns pid (the parent
// ended and this process was handed to another), checking at once and then
// every interval until ctx is done. Polling rather than Linux's
// PR_SET_PDEATHSIG: that signal fires when the parent *thread* that started
// this process ends, which in a threaded client (a JAX process) is not the
// client ending; and polling works on every platform.
func watchParent(ctx context.Context, pid int, getppid func() int, interval time.Duration, gone func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if getppid() != pid {
			gone()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// serveUntilSignal binds srv's address (and the shared-memory socket shmAddr,
// when set), prints the ready lines a client waits for, serves until ctx is
// done (SIGTERM, SIGINT), then drains for at most drain (not at all when the
// parent is gone: errParentGone).
func serveUntilSignal(ctx context.Context, srv *transport.Server, shmAddr string, drain time.Duration, log *slog.Logger) error {
	lis, err := srv.Listen()
	if err != nil {
		return err
	}
	bound := lis.Addr().String()
	if lis.Addr().Network() == "unix" {
		bound = "unix://" + bound
	}
	served := make(chan error, 2)
	if shmAddr != "" {
		slis, err := transport.ListenShm(shmAddr)
		if err != nil {
			lis.Close()
			return err
		}
		go func() {
			if err := srv.ServeShm(slis); err != nil {
				served <- err
			}
		}()
		// Printed before the Flight line, which tells a client the server is ready.
		fmt.Printf("meshfeed: shared memory on unix://%s\n", slis.Addr().String())
	}
	go func() { served <- srv.Serve(lis) }()
	fmt.Printf("meshfeed: listening on %s\n", bound)

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	if errors.Is(context.Cause(ctx), errParentGone) {
		// No drain: the streams' reader went with the parent (or, for a
		// meshfeed.ray actor's server, a new actor serves them now).
		drain = 0
		log.Info("parent process gone: stopping")
	} else {
		log.Info("signal received: draining", "timeout", drain.String())
	}
	sctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("drain timed out: streams cancelled", "err", err)
	}
	if err := <-served; err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}

// demoPlan is the demo backend's plan: batching's, the one the pipeline
// follows.
func demoPlan(rows int64, globalBatch, slices int, lastBatch string) (transport.DemoPlan, error) {
	p, err := batching.RowsPlan(rows, globalBatch, slices, lastBatch)
	if err != nil {
		return nil, err // not a nil *batching.Plan in a non-nil interface
	}
	return p, nil
}
