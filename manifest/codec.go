package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress/zstd"
)

// Key-value metadata keys of a manifest file.
const (
	keyVersion = "meshfeed.manifest.version"
	keySchemas = "meshfeed.manifest.schemas"
	keyPart    = "meshfeed.manifest.part"
)

// Dir is the directory of uri, with its trailing slash: what relative URIs
// in a manifest at uri resolve against.
func Dir(uri string) string {
	return uri[:strings.LastIndexByte(uri, '/')+1]
}

// DefaultURI is the default manifest location for the dataset directory
// dir: dir/_meshfeed_manifest.parquet.
func DefaultURI(dir string) string {
	return strings.TrimRight(dir, "/") + "/" + DefaultName
}

func isAbs(uri string) bool {
	return strings.HasPrefix(uri, "/") || strings.Contains(uri, "://")
}

// Encode writes m as a manifest to be stored at uri: file URIs under uri's
// directory are stored relative to it.
func Encode(w io.Writer, m *Manifest, uri string) error {
	dir := Dir(uri)
	schemas, err := json.Marshal(m.Schemas)
	if err != nil {
		return fmt.Errorf("manifest: %s: %w", uri, err)
	}
	opts := []parquet.WriterOption{
		parquet.Compression(&zstd.Codec{Level: zstd.SpeedDefault}),
		parquet.KeyValueMetadata(keyVersion, strconv.Itoa(Version)),
		parquet.KeyValueMetadata(keySchemas, string(schemas)),
		parquet.CreatedBy("meshfeed", "manifest", strconv.Itoa(Version)),
	}
	if m.Part != nil {
		part, err := json.Marshal(m.Part)
		if err != nil {
			return fmt.Errorf("manifest: %s: %w", uri, err)
		}
		opts = append(opts, parquet.KeyValueMetadata(keyPart, string(part)))
	}
	pw := parquet.NewGenericWriter[File](w, opts...)
	rows := make([]File, len(m.Files))
	for i, f := range m.Files {
		if dir != "" && strings.HasPrefix(f.URI, dir) {
			f.URI = f.URI[len(dir):]
		}
		rows[i] = f
	}
	if _, err := pw.Write(rows); err != nil {
		return fmt.Errorf("manifest: writing %s: %w", uri, err)
	}
	if err := pw.Close(); err != nil {
		return fmt.Errorf("manifest: writing %s: %w", uri, err)
	}
	return nil
}

// Decode reads the manifest data stored at uri, resolving relative file
// URIs against uri's directory. Anything that is not a manifest of this
// version, or is truncated or inconsistent, is an error wrapping ErrInvalid
// that names uri.
func Decode(data []byte, uri string) (m *Manifest, err error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("manifest: %s: %s: %w; rebuild it with `meshfeed manifest` or remove it", uri, fmt.Sprintf(format, args...), ErrInvalid)
	}
	defer func() {
		if r := recover(); r != nil {
			m, err = nil, bad("undecodable (%v)", r)
		}
	}()
	pf, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, bad("not a Parquet file, or truncated (%v)", err)
	}
	v, ok := pf.Lookup(keyVersion)
	if !ok {
		return nil, bad("no %s metadata: not a meshfeed manifest", keyVersion)
	}
	if v != strconv.Itoa(Version) {
		return nil, bad("format version %q, this meshfeed reads version %d", v, Version)
	}
	m = &Manifest{}
	s, _ := pf.Lookup(keySchemas)
	if err := json.Unmarshal([]byte(s), &m.Schemas); err != nil {
		return nil, bad("schemas metadata: %v", err)
	}
	if p, ok := pf.Lookup(keyPart); ok {
		m.Part = &Part{}
		if err := json.Unmarshal([]byte(p), m.Part); err != nil {
			return nil, bad("part metadata: %v", err)
		}
	}
	n := pf.NumRows()
	if n < 0 || n > int64(len(data)) {
		return nil, bad("%d rows in %d bytes", n, len(data))
	}
	r := parquet.NewGenericReader[File](pf)
	defer r.Close()
	m.Files = make([]File, n)
	// Batches of rows: the reader's row buffers are sized by the batch and
	// reused, where one read of every row would allocate them for all.
	const batch = 256
	for got := 0; got < len(m.Files); {
		k, err := r.Read(m.Files[got:min(got+batch, len(m.Files))])
		got += k
		if err != nil && !(errors.Is(err, io.EOF) && got == len(m.Files)) {
			return nil, bad("reading row %d of %d: %v", got, n, err)
		}
		if k == 0 && err == nil {
			return nil, bad("reading row %d of %d: no progress", got, n)
		}
	}
	dir := Dir(uri)
	sorted := true
	for i := range m.Files {
		if !isAbs(m.Files[i].URI) {
			m.Files[i].URI = dir + m.Files[i].URI
		}
		sorted = sorted && (i == 0 || m.Files[i-1].URI < m.Files[i].URI)
	}
	if !sorted { // relative and absolute URIs sort otherwise after a move
		slices.SortStableFunc(m.Files, func(a, b File) int { return strings.Compare(a.URI, b.URI) })
	}
	if err := m.check(); err != nil {
		return nil, bad("%v", err)
	}
	return m, nil
}

// check verifies what planning indexes: schemas in range, columns per
// field, row groups consistent with the rows, files sorted and unique.
func (m *Manifest) check() error {
	for i := range m.Files {
		f := &m.Files[i]
		if i > 0 && m.Files[i-1].URI >= f.URI {
			return fmt.Errorf("files not sorted or repeated at %s", f.URI)
		}
		if f.Schema < 0 || int(f.Schema) >= len(m.Schemas) {
			return fmt.Errorf("%s: schema %d of %d", f.URI, f.Schema, len(m.Schemas))
		}
		if f.Format != "parquet" && f.Format != "arrow" {
			return fmt.Errorf("%s: format %q", f.URI, f.Format)
		}
		if f.Size < 0 {
			return fmt.Errorf("%s: size %d", f.URI, f.Size)
		}
		ncols := len(m.Schemas[f.Schema].Errors)
		if len(f.Columns) != ncols {
			return fmt.Errorf("%s: %d columns, its schema has %d", f.URI, len(f.Columns), ncols)
		}
		var rows int64
		for ri, rg := range f.RowGroups {
			if rg.Rows < 0 {
				return fmt.Errorf("%s row group %d: %d rows", f.URI, ri, rg.Rows)
			}
			rows += rg.Rows
			if f.Format == "parquet" && len(rg.Columns) != ncols {
				return fmt.Errorf("%s row group %d: %d columns, its schema has %d", f.URI, ri, len(rg.Columns), ncols)
			}
			if f.Format == "arrow" && len(rg.Batch) != 1 {
				return fmt.Errorf("%s record batch %d: %d ranges, want 1", f.URI, ri, len(rg.Batch))
			}
		}
		if rows != f.Rows {
			return fmt.Errorf("%s: row groups hold %d rows, the entry says %d", f.URI, rows, f.Rows)
		}
	}
	return nil
}
