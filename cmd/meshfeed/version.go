package main

import (
	"context"
	"fmt"
	"os"
)

// version is set at build time from pyclient/meshfeed/_version.py, the one
// place the version is written (-ldflags "-X main.version=..." in the
// Makefile and in pyclient/setup.py); a plain `go build` says "devel".
var version = "devel"

func init() {
	commands["version"] = command{"print the version of this binary", runVersion}
}

func runVersion(_ context.Context, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("takes no arguments, got %q", args)
	}
	_, err := fmt.Fprintln(os.Stdout, "meshfeed", version)
	return err
}
