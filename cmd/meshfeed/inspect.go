package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/meshfeed/meshfeed/loader"
	"github.com/meshfeed/meshfeed/objstore"
)

// inspectStdout is where inspect prints (a variable for tests).
var inspectStdout io.Writer = os.Stdout

type inspectColumn struct {
	Name  string `json:"name"`
	Type  string `json:"type"`
	Bytes int64  `json:"bytes"` // compressed bytes over all files (Parquet only)
}

type inspectFile struct {
	URI       string  `json:"uri"`
	Format    string  `json:"format"`
	Size      int64   `json:"size"`
	NumRows   int64   `json:"num_rows"`
	RowGroups []int64 `json:"row_groups"` // rows per row group
}

type inspectReport struct {
	Files   []inspectFile   `json:"files"`
	Columns []inspectColumn `json:"columns"`
	NumRows int64           `json:"num_rows"`
	Bytes   int64           `json:"bytes"`
}

func runInspect(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	cols := stringList{}
	fs.Var(&cols, "columns", "comma-separated columns to report (default: all)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: meshfeed inspect [--json] [--columns a,b] URI...\n\nURIs are files, directories or globs, local, gs://bucket/prefix or s3://bucket/prefix, or https:// URLs of files.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return fmt.Errorf("inspect: no dataset URI given")
	}
	store, err := objstore.NewStore(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	ds, err := loader.Open(ctx, store, fs.Args(), loader.WithColumns(cols...))
	if err != nil {
		return err
	}
	rep := inspectReport{NumRows: ds.NumRows()}
	perCol := map[string]int64{}
	for _, f := range ds.Files {
		fi := inspectFile{URI: f.Object.URI, Format: f.Format.String(), Size: f.Object.Size, NumRows: f.NumRows, RowGroups: []int64{}}
		for _, rg := range f.RowGroups {
			fi.RowGroups = append(fi.RowGroups, rg.Rows)
			for _, c := range rg.Chunks {
				perCol[c.Column] += c.Length
			}
		}
		rep.Bytes += f.Object.Size
		rep.Files = append(rep.Files, fi)
	}
	for _, fld := range ds.Schema.Fields() {
		rep.Columns = append(rep.Columns, inspectColumn{Name: fld.Name, Type: fld.Type.String(), Bytes: perCol[fld.Name]})
	}
	if *asJSON {
		enc := json.NewEncoder(inspectStdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	w := tabwriter.NewWriter(inspectStdout, 2, 4, 2, ' ', 0)
	fmt.Fprintf(w, "%d files, %d rows, %s\n\n", len(rep.Files), rep.NumRows, humanBytes(rep.Bytes))
	fmt.Fprintln(w, "COLUMN\tTYPE\tBYTES")
	for _, c := range rep.Columns {
		b := humanBytes(c.Bytes)
		if c.Bytes == 0 {
			b = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", c.Name, c.Type, b)
	}
	fmt.Fprintln(w, "\nFILE\tFORMAT\tSIZE\tROWS\tROW GROUPS")
	for _, f := range rep.Files {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\n", f.URI, f.Format, humanBytes(f.Size), f.NumRows, len(f.RowGroups))
	}
	return w.Flush()
}

// stringList is a flag holding a comma-separated list, repeatable.
type stringList []string

func (s *stringList) String() string { return fmt.Sprint([]string(*s)) }
func (s *stringList) Set(v string) error {
	for _, p := range splitComma(v) {
		*s = append(*s, p)
	}
	return nil
}

func splitComma(v string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(v); i++ {
		if i == len(v) || v[i] == ',' {
			if i > start {
				out = append(out, v[start:i])
			}
			start = i + 1
		}
	}
	return out
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
