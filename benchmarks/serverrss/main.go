package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meshfeed/meshfeed/transport"
)

type result struct {
	PeakRSS     int64   `json:"peak_rss"`
	PeakRSSAnon int64   `json:"peak_rss_anon"`
	PeakRSSFile int64   `json:"peak_rss_file"`
	Steps       int     `json:"steps"`
	Seconds     float64 `json:"seconds"`
	Error       string  `json:"error,omitempty"`
}

func main() {
	bin := flag.String("meshfeed", "bin/meshfeed", "the meshfeed binary")
	data := flag.String("data", "", "dataset directory (its *.parquet files are read)")
	readAhead := flag.Int64("read-ahead", 128<<20, "the server's --read-ahead")
	budget := flag.Int64("memory-budget", 256<<20, "the server's --memory-budget")
	batch := flag.Int("batch", 256, "global batch size")
	slices := flag.Int("slices", 8, "slices (data-parallel degree), all read by the one client")
	cols := flag.String("columns", "", "comma-separated columns (default: all)")
	window := flag.Int("window", 0, "shuffle window in rows (0: file order)")
	every := flag.Duration("sample", 2*time.Millisecond, "sampling interval of /proc/PID/status")
	flag.Parse()
	if *data == "" {
		fmt.Fprintln(os.Stderr, "serverrss: --data is required")
		os.Exit(2)
	}
	res, err := run(*bin, *data, *readAhead, *budget, *batch, *slices, *cols, *window, *every)
	if err != nil {
		res.Error = err.Error()
	}
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
	if err != nil {
		os.Exit(3)
	}
}

// run measures one configuration: it starts the server, samples its memory
// while one epoch streams, and stops it.
//
// Length: the measurement is one procedure read top to bottom (start, sample,
// stream, stop); its steps share the server process and the sampler.
func run(bin, data string, readAhead, budget int64, batch, slices int, cols string, window int, every time.Duration) (result, error) {
	var res result
	data, err := filepath.Abs(data)
	if err != nil {
		return res, err
	}
	dir, err := os.MkdirTemp("", "serverrss")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "s.sock")
	cmd := exec.Command(bin, "serve", "--addr", "unix://"+sock, "--allow", data,
		"--read-ahead", strconv.FormatInt(readAhead, 10), "--memory-budget", strconv.FormatInt(budget, 10), "--log-level", "error")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return res, err
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			return res, errors.New("the server did not listen within 30 s")
		}
	}

	// Sample the server's memory until the epoch is read.
	var mu sync.Mutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			if st, err := status(cmd.Process.Pid); err == nil {
				mu.Lock()
				res.PeakRSS = max(res.PeakRSS, st["VmRSS"])
				res.PeakRSSAnon = max(res.PeakRSSAnon, st["RssAnon"])
				res.PeakRSSFile = max(res.PeakRSSFile, st["RssFile"])
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()

	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(transport.DefaultMaxMessageSize)))
	if err != nil {
		return res, err
	}
	defer conn.Close()
	client := flight.NewClientFromConn(conn, nil)
	req := &transport.Request{Version: transport.Version, Datasets: []string{data + "/*.parquet"}, GlobalBatchSize: batch,
		NumSlices: slices, LastBatch: transport.LastBatchDrop, Epochs: 1, Shuffle: transport.Shuffle{Enabled: window > 0, Window: window}}
	for d := 0; d < slices; d++ {
		req.Slices = append(req.Slices, d)
	}
	for _, c := range strings.Split(cols, ",") {
		if c != "" {
			req.Columns = append(req.Columns, transport.Column{Name: c})
		}
	}
	tk, err := req.Encode()
	if err != nil {
		return res, err
	}
	start := time.Now()
	ctx := context.Background()
	stream, err := client.DoGet(ctx, &flight.Ticket{Ticket: tk})
	if err == nil {
		var rd *flight.Reader
		if rd, err = flight.NewRecordReader(stream); err == nil {
			for rd.Next() {
				res.Steps++
			}
			if err = rd.Err(); errors.Is(err, io.EOF) {
				err = nil
			}
			rd.Release()
		}
	}
	res.Seconds = time.Since(start).Seconds()
	close(stop)
	wg.Wait()
	return res, err
}

// status returns the byte counts of /proc/PID/status (the kB fields).
func status(pid int) (map[string]int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fs := strings.Fields(v)
		if len(fs) == 2 && fs[1] == "kB" {
			if n, err := strconv.ParseInt(fs[0], 10, 64); err == nil {
				out[k] = n << 10
			}
		}
	}
	return out, sc.Err()
}
