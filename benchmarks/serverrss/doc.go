// Command serverrss measures the peak resident memory of a meshfeed server
// while one client reads an epoch: it starts `meshfeed serve` on a Unix
// socket, streams one epoch of every slice over Arrow Flight (one client
// holding all slices, as a JAX process of D devices does), samples the
// server's /proc/PID/status while it does, and prints one line of JSON:
//
//	{"peak_rss":..., "peak_rss_anon":..., "peak_rss_file":..., "steps":..., "seconds":...}
//
// peak_rss_anon is the most anonymous memory (heap: decoded row groups,
// pieces, queued steps) and peak_rss_file the most file-backed pages mapped
// (mmap'd Parquet pages), each its own maximum over the samples.
//
//	serverrss --meshfeed bin/meshfeed --data DIR --read-ahead 134217728 \
//	    --batch 256 --slices 8 --columns image
//
// A server that refuses the plan (a budget too small for it) makes serverrss
// print {"error": "..."} and exit 3.
package main
