package manifest

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meshfeed/meshfeed/objstore"
)

// Version is the manifest format this package writes and reads. A manifest
// of another version is refused (ErrInvalid): rebuild it.
const Version = 1

// DefaultName is the manifest's file name in a dataset's directory. It
// starts with '_', so listing the directory as a dataset skips it.
const DefaultName = "_meshfeed_manifest.parquet"

// Manifest is the files of a dataset and their plan-time facts, sorted by
// URI. URIs are absolute in memory (Decode resolves relative ones).
type Manifest struct {
	// Schemas are the distinct schemas, in order of first use by Files.
	Schemas []Schema
	// Files sorted by URI, each URI once.
	Files []File
	// Part is set on a part of a sharded build (Merge joins them).
	Part *Part

	index map[string]int32 // schemaKey -> index into Schemas (AddFile)
}

// Part says which share of a build a manifest holds: the files whose index
// in the sorted match of Patterns is Shard modulo Of.
type Part struct {
	Shard    int      `json:"shard"`
	Of       int      `json:"of"`
	Patterns []string `json:"patterns"`
}

// Schema is one distinct schema: the file's full Arrow schema and what each
// of its fields decodes to (or why it cannot be read).
type Schema struct {
	// Full is the IPC-serialized Arrow schema of the file (all fields).
	Full []byte `json:"full"`
	// Output is the IPC-serialized schema of the output fields, one per
	// field of Full; a field that cannot be read has type null here and
	// its error in Errors.
	Output []byte `json:"output"`
	// Errors are the output errors per field (empty Kind: none).
	Errors []Error `json:"errors"`
}

// Error is an error a planner re-raises: the sentinel's kind (as the
// builder classified it) and the message, with "{file}" where the file's
// URI stood.
type Error struct {
	Kind    string `parquet:"kind" json:"kind,omitempty"`
	Message string `parquet:"message" json:"message,omitempty"`
}

// FilePlaceholder stands for the file's URI in stored error messages.
const FilePlaceholder = "{file}"

// File is one data file's entry.
type File struct {
	URI        string `parquet:"uri"`
	Size       int64  `parquet:"size"`
	ModTimeNs  int64  `parquet:"mtime_ns"`
	Generation int64  `parquet:"generation"`
	ETag       string `parquet:"etag"`
	// Format is "parquet" or "arrow".
	Format string `parquet:"format"`
	// Schema indexes Manifest.Schemas.
	Schema int32 `parquet:"schema"`
	Rows   int64 `parquet:"rows"`
	// Columns are per field of the schema, in schema order.
	Columns []Column `parquet:"columns,list"`
	// RowGroups in file order (Arrow IPC: record batches).
	RowGroups []RowGroup `parquet:"row_groups,list"`
	// Facts are other features' per-file facts (PutFact, Fact).
	Facts []Fact `parquet:"facts,list"`
}

// Column is one top-level field's file-level facts.
type Column struct {
	Name string `parquet:"name"`
	// MayNull, Nulls, NullsKnown: whether the footer leaves room for a
	// null, how many it records, and whether that count is known.
	MayNull    bool  `parquet:"may_null"`
	Nulls      int64 `parquet:"nulls"`
	NullsKnown bool  `parquet:"nulls_known"`
	// DecodeErr: projecting the column without a fill value fails so;
	// FillErr: with one; NullErr: the nulls the footer records refuse it
	// when neither a fill value nor Arrow nulls are allowed.
	DecodeErr Error `parquet:"decode_err"`
	FillErr   Error `parquet:"fill_err"`
	NullErr   Error `parquet:"null_err"`
}

// RowGroup is one row group's facts.
type RowGroup struct {
	Rows int64 `parquet:"rows"`
	// Batch is the record batch's byte range (Arrow IPC only) and Decoded
	// its decoded-size estimate.
	Batch   []Chunk `parquet:"batch,list"`
	Decoded int64   `parquet:"decoded"`
	// Columns are per field of the schema (Parquet only).
	Columns []ColumnChunk `parquet:"columns,list"`
}

// ColumnChunk is one field's chunks in one row group: their byte ranges
// (one per leaf column), decoded-size estimate and read costs.
type ColumnChunk struct {
	Chunks  []Chunk `parquet:"chunks,list"`
	Decoded int64   `parquet:"decoded"`
	// Cost is what a piece of this row group streams and decodes whole
	// (compressed plus decoded bytes), and the decoded bytes per row;
	// NullableCost the same when the column is delivered with Arrow nulls
	// (a field made nullable).
	Cost         Cost `parquet:"cost"`
	NullableCost Cost `parquet:"nullable_cost"`
}

// Cost is the read cost of one column chunk.
type Cost struct {
	Streamed int64   `parquet:"streamed"`
	Whole    int64   `parquet:"whole"`
	RowBytes float64 `parquet:"row_bytes"`
}

// Chunk is the byte range of one leaf column chunk (or record batch) and
// the statistics its footer stores (NullCount -1: not stored).
type Chunk struct {
	Offset    int64  `parquet:"offset"`
	Length    int64  `parquet:"length"`
	NullCount int64  `parquet:"null_count"`
	Min       []byte `parquet:"min,optional"`
	Max       []byte `parquet:"max,optional"`
}

// Fact is a value another feature computed from one file, keyed by kind
// (what it is: "tokens", "filter") and key (under which settings: a
// tokenizer's hash, a filter's text), with the identity of the file it was
// computed from.
type Fact struct {
	Kind     string `parquet:"kind"`
	Key      string `parquet:"key"`
	Identity string `parquet:"identity"`
	Value    []byte `parquet:"value"`
}

// Identity is what identifies a version of a file: its size, modification
// time, GCS generation and ETag (zero where the store has none).
type Identity struct {
	Size       int64
	ModTimeNs  int64
	Generation int64
	ETag       string
}

// IdentityOf is obj's identity.
func IdentityOf(obj objstore.Object) Identity {
	return Identity{Size: obj.Size, ModTimeNs: obj.ModTime.UnixNano(), Generation: obj.Generation, ETag: obj.ETag}
}

// Identity is the file's identity as the manifest recorded it.
func (f *File) Identity() Identity {
	return Identity{Size: f.Size, ModTimeNs: f.ModTimeNs, Generation: f.Generation, ETag: f.ETag}
}

// Object is the file as an objstore.Object (for reading it).
func (f *File) Object() objstore.Object {
	return objstore.Object{URI: f.URI, Size: f.Size, Generation: f.Generation, ETag: f.ETag, ModTime: time.Unix(0, f.ModTimeNs)}
}

// String renders the identity compactly (the form facts store).
func (id Identity) String() string {
	s := "s" + strconv.FormatInt(id.Size, 10)
	if id.Generation != 0 {
		s += ";g" + strconv.FormatInt(id.Generation, 10)
	} else {
		s += ";m" + strconv.FormatInt(id.ModTimeNs, 10)
	}
	if id.ETag != "" {
		s += ";e" + id.ETag
	}
	return s
}

// Diff returns what changed from id (as recorded) to now, "" when nothing
// did. The size always counts; the generation where either has one (a GCS
// object's "updated" time moves without its content changing), else the
// modification time; the ETag where both have one.
func (id Identity) Diff(now Identity) string {
	var d []string
	if id.Size != now.Size {
		d = append(d, fmt.Sprintf("size %d -> %d", id.Size, now.Size))
	}
	if id.Generation != 0 || now.Generation != 0 {
		if id.Generation != now.Generation {
			d = append(d, fmt.Sprintf("generation %d -> %d", id.Generation, now.Generation))
		}
	} else if id.ModTimeNs != now.ModTimeNs {
		d = append(d, fmt.Sprintf("mtime %s -> %s", time.Unix(0, id.ModTimeNs).UTC().Format(time.RFC3339Nano), time.Unix(0, now.ModTimeNs).UTC().Format(time.RFC3339Nano)))
	}
	if id.ETag != "" && now.ETag != "" && id.ETag != now.ETag {
		d = append(d, fmt.Sprintf("etag %q -> %q", id.ETag, now.ETag))
	}
	return strings.Join(d, ", ")
}

// Lookup returns the entry of uri, or nil.
func (m *Manifest) Lookup(uri string) *File {
	i, ok := slices.BinarySearchFunc(m.Files, uri, func(f File, u string) int { return strings.Compare(f.URI, u) })
	if !ok {
		return nil
	}
	return &m.Files[i]
}

// PutFact stores value as the fact (kind, key) of the file obj, replacing
// an earlier one. obj is the file as the caller sees it now (Stat, List):
// a file the manifest does not name, or whose identity differs from its
// entry's, is an error (ErrStale: rebuild the manifest first).
func (m *Manifest) PutFact(obj objstore.Object, kind, key string, value []byte) error {
	f := m.Lookup(obj.URI)
	if f == nil {
		return fmt.Errorf("manifest: %s: not in the manifest: %w; rebuild the manifest", obj.URI, ErrStale)
	}
	if d := f.Identity().Diff(IdentityOf(obj)); d != "" {
		return fmt.Errorf("manifest: %s: %s: %w; rebuild the manifest", obj.URI, d, ErrStale)
	}
	fact := Fact{Kind: kind, Key: key, Identity: f.Identity().String(), Value: bytes.Clone(value)}
	for i := range f.Facts {
		if f.Facts[i].Kind == kind && f.Facts[i].Key == key {
			f.Facts[i] = fact
			return nil
		}
	}
	f.Facts = append(f.Facts, fact)
	slices.SortFunc(f.Facts, func(a, b Fact) int {
		if c := strings.Compare(a.Kind, b.Kind); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	return nil
}

// Fact returns the fact (kind, key) of the file obj, and whether there is
// one that holds for obj as it is now: the manifest names the file, the
// entry's identity is obj's, and the fact was computed from that identity.
// A stale fact is never returned.
func (m *Manifest) Fact(obj objstore.Object, kind, key string) ([]byte, bool) {
	f := m.Lookup(obj.URI)
	if f == nil || f.Identity().Diff(IdentityOf(obj)) != "" {
		return nil, false
	}
	for _, fact := range f.Facts {
		if fact.Kind == kind && fact.Key == key && fact.Identity == f.Identity().String() {
			return fact.Value, true
		}
	}
	return nil, false
}

// normalize sorts the files by URI and renumbers the schemas in order of
// first use, dropping unused ones: what makes two builds of the same files
// equal byte for byte. It refuses a URI listed twice.
func (m *Manifest) normalize() error {
	slices.SortFunc(m.Files, func(a, b File) int { return strings.Compare(a.URI, b.URI) })
	for i := 1; i < len(m.Files); i++ {
		if m.Files[i].URI == m.Files[i-1].URI {
			return fmt.Errorf("manifest: %s listed twice: %w", m.Files[i].URI, ErrMerge)
		}
	}
	var out []Schema
	index := map[string]int32{}
	for i := range m.Files {
		f := &m.Files[i]
		if f.Schema < 0 || int(f.Schema) >= len(m.Schemas) {
			return fmt.Errorf("manifest: %s: schema %d of %d: %w", f.URI, f.Schema, len(m.Schemas), ErrInvalid)
		}
		s := m.Schemas[f.Schema]
		k := schemaKey(s)
		j, ok := index[k]
		if !ok {
			j = int32(len(out))
			index[k] = j
			out = append(out, s)
		}
		f.Schema = j
	}
	m.Schemas = out
	m.index = nil
	return nil
}

func schemaKey(s Schema) string {
	var b strings.Builder
	b.Write(s.Full)
	b.WriteByte(0)
	b.Write(s.Output)
	for _, e := range s.Errors {
		b.WriteString("\x00" + e.Kind + "\x00" + e.Message)
	}
	return b.String()
}

// AddFile appends f with schema s (interned): for builders. Call Finish
// when every file is added.
func (m *Manifest) AddFile(f File, s Schema) {
	if m.index == nil {
		m.index = map[string]int32{}
		for i := range m.Schemas {
			m.index[schemaKey(m.Schemas[i])] = int32(i)
		}
	}
	k := schemaKey(s)
	j, ok := m.index[k]
	if !ok {
		j = int32(len(m.Schemas))
		m.index[k] = j
		m.Schemas = append(m.Schemas, s)
	}
	f.Schema = j
	m.Files = append(m.Files, f)
}

// Finish sorts and normalizes a built manifest.
func (m *Manifest) Finish() error { return m.normalize() }

// Merge joins the parts of a sharded build (each with Part set, all of the
// same patterns and shard count, every shard once) into the manifest a
// single build of the same files makes.
func Merge(parts []*Manifest) (*Manifest, error) {
	if len(parts) == 0 {
		return nil, fmt.Errorf("manifest: no parts to merge: %w", ErrMerge)
	}
	first := parts[0].Part
	if first == nil {
		return nil, fmt.Errorf("manifest: part 1 of %d is not a part of a sharded build (built without --shard): %w", len(parts), ErrMerge)
	}
	seen := make([]bool, first.Of)
	out := &Manifest{}
	for i, p := range parts {
		switch {
		case p.Part == nil:
			return nil, fmt.Errorf("manifest: part %d of %d is not a part of a sharded build: %w", i+1, len(parts), ErrMerge)
		case p.Part.Of != first.Of || !slices.Equal(p.Part.Patterns, first.Patterns):
			return nil, fmt.Errorf("manifest: part %d is shard %d/%d of %q, part 1 shard %d/%d of %q: %w; merge the parts of one build",
				i+1, p.Part.Shard, p.Part.Of, p.Part.Patterns, first.Shard, first.Of, first.Patterns, ErrMerge)
		case p.Part.Shard < 0 || p.Part.Shard >= first.Of:
			return nil, fmt.Errorf("manifest: part %d: shard %d of %d: %w", i+1, p.Part.Shard, p.Part.Of, ErrMerge)
		case seen[p.Part.Shard]:
			return nil, fmt.Errorf("manifest: shard %d/%d given twice: %w", p.Part.Shard, first.Of, ErrMerge)
		}
		seen[p.Part.Shard] = true
		for _, f := range p.Files {
			out.AddFile(f, p.Schemas[f.Schema])
		}
	}
	for s, ok := range seen {
		if !ok {
			return nil, fmt.Errorf("manifest: shard %d/%d missing: %w; build it (meshfeed manifest --shard %d/%d) and merge every part", s, first.Of, ErrMerge, s, first.Of)
		}
	}
	if err := out.normalize(); err != nil {
		return nil, err
	}
	return out, nil
}
