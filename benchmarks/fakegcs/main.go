package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/fsouza/fake-gcs-server/fakestorage"
)

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "fakegcs:", err)
		os.Exit(1)
	}
}

func run(args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("fakegcs", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: fakegcs [--bucket NAME] OBJECT=PATH ...")
		fs.PrintDefaults()
	}
	bucket := fs.String("bucket", "meshfeed-bench", "bucket name")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("name at least one OBJECT=PATH")
	}
	objs, err := readObjects(*bucket, fs.Args())
	if err != nil {
		return err
	}
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{
		InitialObjects: objs,
		Scheme:         "http",
		Host:           "127.0.0.1",
	})
	if err != nil {
		return fmt.Errorf("start fake GCS: %w", err)
	}
	defer srv.Stop()
	if _, err := fmt.Fprintf(stdout, "fakegcs: serving %s gs://%s\n", srv.URL(), *bucket); err != nil {
		return err
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	eof := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, bufio.NewReader(stdin))
		close(eof)
	}()
	select {
	case <-sig:
	case <-eof:
	}
	return nil
}

// readObjects reads each OBJECT=PATH argument into an object of bucket.
func readObjects(bucket string, args []string) ([]fakestorage.Object, error) {
	var objs []fakestorage.Object
	seen := map[string]bool{}
	for _, a := range args {
		name, p, ok := strings.Cut(a, "=")
		if !ok || name == "" || p == "" {
			return nil, fmt.Errorf("argument %q: want OBJECT=PATH", a)
		}
		if seen[name] {
			return nil, fmt.Errorf("argument %q: object %q named twice", a, name)
		}
		seen[name] = true
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("object %q: %w", name, err)
		}
		objs = append(objs, fakestorage.Object{
			ObjectAttrs: fakestorage.ObjectAttrs{BucketName: bucket, Name: name},
			Content:     data,
		})
	}
	return objs, nil
}
