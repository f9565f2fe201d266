package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one subcommand of the binary. run parses args itself (with its own
// flag.FlagSet) and returns an error to print; flag.ErrHelp exits 0.
type command struct {
	summary string
	run     func(ctx context.Context, args []string) error
}

var commands = map[string]command{
	"gen":      {"write a synthetic Parquet or Arrow IPC dataset (local path, gs://, s3:// or az://)", runGen},
	"gen-text": {"write a text dataset (id, text) cut from real text, for tokenizer tests and benchmarks", runGenText},
	"manifest": {"write a dataset's manifest (one read per host at job start instead of every footer); manifest merge joins sharded parts", runManifest},
	"index":    {"store the token counts of a text column in the dataset's manifest (plans pack \"concat\" without tokenizing)", runIndex},
	"inspect":  {"print files, schema, row groups, rows and bytes per column", runInspect},
	"plan":     {"print the epoch plan for a mesh: steps, dropped/padded rows, per-process streams (--mixture: a mixture's steps and sources)", runPlanOrMixture},
	"read":     {"read a dataset through the loader and print throughput", runRead},
	"serve":    {"serve Arrow Flight: stream each client its slices (see docs/PROTOCOL.md)", runServe},
	"tokenize": {"print the token ids of a text column per a tokenizer.json, row by row", runTokenize},
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: meshfeed <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-8s %s\n", n, commands[n].summary)
	}
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	cmd, ok := commands[os.Args[1]]
	if !ok {
		if os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
			usage()
			return
		}
		fmt.Fprintf(os.Stderr, "meshfeed: unknown command %q\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := cmd.run(ctx, os.Args[2:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintf(os.Stderr, "meshfeed %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}
