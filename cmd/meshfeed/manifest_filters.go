package main

import (
	"context"
	"fmt"

	"github.com/meshfeed/meshfeed/feed"
	"github.com/meshfeed/meshfeed/filter"
	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/manifest"
	"github.com/meshfeed/meshfeed/objstore"
)

// storeSelections evaluates each filter (the ticket's JSON form) on every
// file of m and stores the selections as facts (filter.SelectionFactKind,
// keyed by the filter's canonical form), so that planning a request with
// that filter from the manifest reads no filter column.
//
// The files are listed again before and after: a file whose identity is
// not its entry's (changed since the build) or that changed while it was
// evaluated is an error, so a fact is only stored for the version of the
// file the manifest describes.
func storeSelections(ctx context.Context, store objstore.Store, patterns []string, m *manifest.Manifest, filters []string) error {
	if len(filters) == 0 || len(m.Files) == 0 {
		return nil
	}
	return withListedFiles(ctx, store, patterns, m, "filters were evaluated", func(files []objstore.Object) error {
		for _, fj := range filters {
			pred, err := filter.Parse([]byte(fj))
			if err != nil {
				return fmt.Errorf("--filters %s: %w", fj, err)
			}
			ds, err := loader.OpenObjects(ctx, store, files, loader.WithColumns(pred.Columns()...), loader.WithNullsAsValidity())
			if err != nil {
				return fmt.Errorf("--filters %s: %w", fj, err)
			}
			fsels, canon, counts, err := feed.FileSelections(ctx, ds, []byte(fj))
			if err != nil {
				return fmt.Errorf("--filters %s: %w", fj, err)
			}
			for i, fs := range fsels {
				if err := m.PutFact(ds.Files[i].Object, filter.SelectionFactKind, canon, filter.EncodeFileSelection(fs)); err != nil {
					return fmt.Errorf("--filters %s: %w", fj, err)
				}
			}
			fmt.Printf("filter %s: %d files; row groups: %d pruned, %d whole, %d evaluated\n", canon, len(fsels), counts.Pruned, counts.Whole, counts.Evaluated)
		}
		return nil
	})
}

// withListedFiles runs compute on the files of m as the store lists them
// now, listing them again after: a file whose identity is not its entry's
// (changed since the build: PutFact refuses it) or that changed while
// compute ran (what: "filters were evaluated") is an error, so a fact is
// only stored for the version of the file the manifest describes.
func withListedFiles(ctx context.Context, store objstore.Store, patterns []string, m *manifest.Manifest, what string, compute func([]objstore.Object) error) error {
	before, err := listed(ctx, store, patterns, m)
	if err != nil {
		return err
	}
	if err := compute(before); err != nil {
		return err
	}
	after, err := listed(ctx, store, patterns, m)
	if err != nil {
		return err
	}
	for i, o := range after {
		if d := manifest.IdentityOf(before[i]).Diff(manifest.IdentityOf(o)); d != "" {
			return fmt.Errorf("%s changed while its %s (%s): %w; build the manifest again", o.URI, what, d, manifest.ErrStale)
		}
	}
	return nil
}

// filterFlag appends each --filters to filters, refusing one that does
// not parse before anything is read.
func filterFlag(filters *[]string) func(string) error {
	return func(s string) error {
		if _, err := filter.Parse([]byte(s)); err != nil {
			return err
		}
		*filters = append(*filters, s)
		return nil
	}
}

// listed is the files of m as the store lists them now, in m's order; a
// file m names that is no longer listed is an error.
func listed(ctx context.Context, store objstore.Store, patterns []string, m *manifest.Manifest) ([]objstore.Object, error) {
	objs, err := objstore.Match(ctx, store, patterns)
	if err != nil {
		return nil, err
	}
	byURI := make(map[string]objstore.Object, len(objs))
	for _, o := range objs {
		byURI[o.URI] = o
	}
	out := make([]objstore.Object, len(m.Files))
	for i, f := range m.Files {
		o, ok := byURI[f.URI]
		if !ok {
			return nil, fmt.Errorf("%s is no longer listed: %w; build the manifest again", f.URI, manifest.ErrStale)
		}
		out[i] = o
	}
	return out, nil
}
