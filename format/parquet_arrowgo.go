package format

// The Arrow schema of a Parquet file as arrow-go's reader (pqarrow) decodes
// it: the same mapping pyarrow's reader makes (arrow-go ports Arrow C++), so
// that every logical type keeps its meaning (DECIMAL as decimal128/256 with
// precision and scale, TIMESTAMP with its unit and time zone, INT96 as
// timestamp[ns], DATE, TIME, FLOAT16, fixed-size binary, structs, maps and
// nested lists). The primary decoder takes the columns it covers; every other
// column is decoded by arrow-go (parquet_fallback.go) to exactly this type.

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	apq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	pqschema "github.com/apache/arrow-go/v18/parquet/schema"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	pqformat "github.com/parquet-go/parquet-go/format"
)

// arrowMD is arrow-go's parse of the footer (its own thrift structures,
// which the fallback decoder and exact null counts need), made from the
// footer's bytes on first use: planning parses a footer once (parquet-go's
// parse), and arrow-go's only for files with columns arrow-go decodes, a
// schema not derived before (derived), or null counts parquet-go cannot tell
// from zero (chunkNulls).
func (p *parquetFooter) arrowMD() (*metadata.FileMetaData, error) {
	af := &p.arrow
	af.once.Do(func() {
		defer func() {
			if r := recover(); r != nil {
				af.md, af.err = nil, fmt.Errorf("arrow-go footer: undecodable (%v): %w", r, ErrCorrupt)
			}
		}()
		md, err := metadata.NewFileMetaData(p.raw, nil)
		if err != nil {
			af.err = fmt.Errorf("arrow-go footer: %w", classify(err, p.kept))
			return
		}
		md.SetSourceFileSize(p.size) // readers of sections past the footer (bloom filters) need it
		af.md = md
	})
	return af.md, af.err
}

// arrowDerived is what arrow-go derives from a file's Parquet schema and
// stored ARROW:schema: the same for every file whose footer has that schema,
// so it is cached by it (derivedCache) and derived once for a dataset of many
// files written alike.
type arrowDerived struct {
	node  *pqschema.Schema // arrow-go's Parquet schema
	asch  *arrow.Schema    // the schema arrow-go (like pyarrow) decodes to
	pysch *arrow.Schema    // asch with pyarrow's top-level corrections (pyarrowSchema)
	err   error            // why there is none (asch, pysch nil)
}

// derivedCache holds the derivations of recent schemas, by schemaKey: one
// entry per schema, derived once however many footers of it are read at once.
var derivedCache = struct {
	sync.Mutex
	m map[[sha256.Size]byte]*derivedEntry
}{m: map[[sha256.Size]byte]*derivedEntry{}}

type derivedEntry struct {
	once sync.Once
	d    *arrowDerived // nil when the footer it was to be derived from did not parse
}

// derivedCacheSize bounds derivedCache; it is emptied when full.
const derivedCacheSize = 256

// schemaKey identifies what arrow-go derives from: the schema elements and
// the ARROW:schema values of the footer.
func (p *parquetFooter) schemaKey() (key [sha256.Size]byte, ok bool) {
	md := p.pf.Metadata()
	b, err := thrift.Marshal(new(thrift.CompactProtocol), &struct {
		Schema []pqformat.SchemaElement `thrift:"1,required"`
	}{md.Schema})
	if err != nil {
		return key, false
	}
	h := sha256.New()
	h.Write(b)
	for _, kv := range md.KeyValueMetadata {
		if kv.Key == "ARROW:schema" {
			h.Write([]byte{0})
			h.Write([]byte(kv.Value))
		}
	}
	copy(key[:], h.Sum(nil))
	return key, true
}

// derived returns arrow-go's derivation for this file's schema: from the
// cache, else from arrow-go's parse of the footer (cached when that parse
// succeeds: a file whose footer arrow-go cannot parse keeps its error).
func (p *parquetFooter) derived() *arrowDerived {
	p.derivedOnce.Do(func() {
		if key, ok := p.schemaKey(); ok {
			derivedCache.Lock()
			e := derivedCache.m[key]
			if e == nil {
				if len(derivedCache.m) >= derivedCacheSize {
					clear(derivedCache.m)
				}
				e = &derivedEntry{}
				derivedCache.m[key] = e
			}
			derivedCache.Unlock()
			e.once.Do(func() {
				if md, err := p.arrowMD(); err == nil {
					e.d = deriveArrow(md)
				}
			})
			if e.d != nil {
				p.der = e.d
				return
			}
		}
		md, err := p.arrowMD()
		if err != nil {
			p.der = &arrowDerived{err: err}
			return
		}
		p.der = deriveArrow(md)
	})
	return p.der
}

// deriveArrow derives the schema arrow-go decodes a file of footer md to.
func deriveArrow(md *metadata.FileMetaData) (d *arrowDerived) {
	d = &arrowDerived{node: md.Schema}
	defer func() {
		if r := recover(); r != nil {
			d.asch, d.pysch, d.err = nil, nil, fmt.Errorf("Parquet schema has no Arrow form (%v): %w; pyarrow cannot read it either: rewrite the file", r, ErrUnsupported)
		}
	}()
	sch, err := pqarrow.FromParquet(md.Schema, &pqarrow.ArrowReadProperties{}, md.KeyValueMetadata())
	if err != nil {
		d.err = fmt.Errorf("Parquet schema has no Arrow form (%v): %w; pyarrow cannot read it either: rewrite the file", err, ErrUnsupported)
		return d
	}
	// INT96 (what Spark and Impala write): pyarrow reads it as timestamp[ns]
	// without a time zone, arrow-go labels it UTC; the values are the same.
	fields := sch.Fields()
	for i, f := range fields {
		if i < md.Schema.Root().NumFields() {
			if n, ok := md.Schema.Root().Field(i).(*pqschema.PrimitiveNode); ok && n.PhysicalType() == apq.Types.Int96 {
				if ts, ok := f.Type.(*arrow.TimestampType); ok && ts.TimeZone != "" {
					fields[i].Type = &arrow.TimestampType{Unit: ts.Unit}
				}
			}
		}
	}
	smd := sch.Metadata()
	d.asch = arrow.NewSchema(fields, &smd)
	d.pysch = pyarrowSchema(d.asch, md.Schema)
	return d
}

// pyarrowSchema is asch with pyarrow's differences from arrow-go: at the top
// level, a BYTE_ARRAY annotated JSON is pyarrow's extension arrow.json over
// string (arrow-go says binary; the bytes are the same); anywhere, a legacy
// two-level list of lists is a list of lists, not of structs (legacyLists).
func pyarrowSchema(asch *arrow.Schema, node *pqschema.Schema) *arrow.Schema {
	fields := asch.Fields()
	root := node.Root()
	for i := range fields {
		if i >= root.NumFields() {
			break
		}
		n := root.Field(i)
		fields[i].Type = legacyLists(fields[i].Type, n) // parquet_legacylist.go
		_, isJSON := n.LogicalType().(pqschema.JSONLogicalType)
		if _, ok := n.LogicalType().(*pqschema.JSONLogicalType); (ok || isJSON) && fields[i].Type.ID() == arrow.BINARY {
			// pyarrow reads it as the canonical extension arrow.json over
			// string: the same on the wire, as the extension's field metadata.
			fields[i].Type = arrow.BinaryTypes.String
			fields[i].Metadata = arrow.MetadataFrom(map[string]string{"ARROW:extension:name": "arrow.json", "ARROW:extension:metadata": ""})
		}
	}
	md2 := asch.Metadata()
	return arrow.NewSchema(fields, &md2)
}

// arrowField is the field arrow-go decodes top-level column name to, as
// pyarrow reads it (arrow-go's arrays are made to fit it: conformArrow).
func (p *parquetFooter) arrowField(name string) (arrow.Field, error) {
	d := p.derived()
	if d.err != nil {
		return arrow.Field{}, d.err
	}
	idx := d.asch.FieldIndices(name)
	if len(idx) == 0 {
		return arrow.Field{}, fmt.Errorf("not in arrow-go's schema of the file: %w", ErrUnsupported)
	}
	f := d.asch.Field(idx[0])
	if root := d.node.Root(); idx[0] < root.NumFields() {
		f.Type = legacyLists(f.Type, root.Field(idx[0])) // pyarrow's type (parquet_legacylist.go)
	}
	return f, nil
}

// primaryFits reports whether the primary decoder (parquet-go pages and the
// fast paths) decodes column name to type t exactly: one leaf, a primitive,
// fixed-size list or list of primitives, string or binary, stored in a
// physical type that holds it bit for bit.
func (p *parquetFooter) primaryFits(name string, t arrow.DataType) bool {
	leaves := p.leaves[name]
	if len(leaves) != 1 {
		return false
	}
	path := p.pf.Schema().Columns()[leaves[0]]
	leaf, ok := p.pf.Schema().Lookup(path...)
	if !ok {
		return false
	}
	kind, length, ok := leafKind(leaf.Node)
	if !ok {
		return false
	}
	elem := t
	rep := 0
	switch tt := t.(type) {
	case *arrow.StringType, *arrow.BinaryType:
		return kind == parquet.ByteArray && leaf.MaxRepetitionLevel == 0
	case *arrow.FixedSizeListType:
		elem, rep = tt.Elem(), 1
	case *arrow.ListType:
		elem, rep = tt.Elem(), 1
	}
	if leaf.MaxRepetitionLevel != rep {
		return false
	}
	if _, ok := primitiveSize(elem); !ok {
		return false
	}
	return physicalFits(elem, kind, length)
}

// leafKind returns the physical kind and length of a leaf's type, or false
// for a type that has none: parquet-go panics on Kind of a group's logical
// type (MAP, LIST) that a corrupt schema put on a leaf.
func leafKind(n parquet.Node) (kind parquet.Kind, length int, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	t := n.Type()
	return t.Kind(), t.Length(), true
}

// OutputField is the field format decodes for field j of the file: the
// primary decoder's output where it covers the column, else what arrow-go
// (like pyarrow) decodes it to, or ErrUnsupported naming the type and what to
// do.
func (p *parquetFooter) OutputField(j int) (arrow.Field, error) {
	f := p.sch.Field(j)
	out, err := outputField(f)
	if err == nil && p.primaryFits(f.Name, out.Type) {
		return out, nil
	}
	if reason := p.refused(f.Name); reason != "" {
		return out, fmt.Errorf("%s: %w", reason, ErrUnsupported)
	}
	af, aerr := p.arrowField(f.Name)
	if aerr != nil {
		if err != nil {
			return out, err
		}
		return out, aerr
	}
	af.Metadata = f.Metadata
	if ext, ok := af.Type.(arrow.ExtensionType); ok {
		md := map[string]string{"ARROW:extension:name": ext.ExtensionName(), "ARROW:extension:metadata": ext.Serialize()}
		for i, k := range f.Metadata.Keys() {
			md[k] = f.Metadata.Values()[i]
		}
		af.Type = ext.StorageType()
		af.Metadata = arrow.MetadataFrom(md)
	}
	if bad := undeliverable(af.Type); bad != "" {
		return out, fmt.Errorf("Arrow type %s (%s): %w; leave the column out or rewrite it", af.Type, bad, ErrUnsupported)
	}
	return af, nil
}

// refused names why a column's Parquet types are refused although arrow-go
// would decode them: INTERVAL (arrow-go reads the 12 bytes as
// fixed_size_binary, losing the months/days/millis meaning); INT96 and JSON
// inside a nested type (arrow-go labels such a timestamp UTC and reads such
// JSON as binary, where pyarrow reads timestamp[ns] without a zone and
// arrow.json: format corrects both at the top level only).
func (p *parquetFooter) refused(name string) string {
	node := p.derived().node
	if node == nil {
		return ""
	}
	for _, leaf := range p.leaves[name] {
		if leaf >= node.NumColumns() {
			continue
		}
		col := node.Column(leaf)
		if _, ok := col.LogicalType().(pqschema.IntervalLogicalType); ok || col.ConvertedType() == pqschema.ConvertedTypes.Interval {
			return fmt.Sprintf("Parquet INTERVAL (leaf %s) has no exact Arrow form", col.Path())
		}
		if !strings.Contains(col.Path(), ".") {
			continue // a top-level leaf: corrected where needed
		}
		if col.PhysicalType() == apq.Types.Int96 {
			return fmt.Sprintf("Parquet INT96 inside a nested type (leaf %s) would not arrive as pyarrow reads it (timestamp[ns] without a time zone); rewrite the file with INT64 timestamps (pyarrow's default), or project top-level INT96 columns only", col.Path())
		}
		_, isJSON := col.LogicalType().(pqschema.JSONLogicalType)
		if _, ok := col.LogicalType().(*pqschema.JSONLogicalType); ok || isJSON || col.ConvertedType() == pqschema.ConvertedTypes.JSON {
			return fmt.Sprintf("Parquet JSON inside a nested type (leaf %s) would arrive as binary, not as pyarrow reads it (arrow.json over string); rewrite it as a plain string, or project top-level JSON columns only", col.Path())
		}
	}
	return ""
}

// undeliverable says why values of t cannot travel (records use no
// dictionaries; nested extension types lose their meaning), or "".
func undeliverable(t arrow.DataType) string {
	switch t.ID() {
	case arrow.DICTIONARY:
		return "dictionary inside a nested type"
	case arrow.EXTENSION:
		return "extension type inside a nested type"
	}
	if nt, ok := t.(arrow.NestedType); ok {
		for _, f := range nt.Fields() {
			if f.Type.ID() == arrow.DURATION {
				return "duration inside a nested type: arrow-go reads no durations"
			}
			if bad := undeliverable(f.Type); bad != "" {
				return bad
			}
		}
	}
	return ""
}

// reconcile corrects a stored ARROW:schema where pyarrow's reader does not
// restore the stored type: timestamp[s] is written as milliseconds (Parquet
// has no seconds) and read back as timestamp[ms]; the values are
// milliseconds, so the stored unit would be wrong data.
func (p *parquetFooter) reconcile(stored *arrow.Schema) *arrow.Schema {
	hasTimestamp := false
	for _, f := range stored.Fields() {
		hasTimestamp = hasTimestamp || f.Type.ID() == arrow.TIMESTAMP
	}
	if !hasTimestamp {
		return stored
	}
	asch := p.derived().asch
	if asch == nil {
		return stored
	}
	fields := stored.Fields()
	changed := false
	for i, f := range fields {
		ts, ok := f.Type.(*arrow.TimestampType)
		if !ok {
			continue
		}
		idx := asch.FieldIndices(f.Name)
		if len(idx) == 0 {
			continue
		}
		if ats, ok := asch.Field(idx[0]).Type.(*arrow.TimestampType); ok && ats.Unit != ts.Unit {
			fields[i].Type = &arrow.TimestampType{Unit: ats.Unit, TimeZone: ts.TimeZone}
			changed = true
		}
	}
	if !changed {
		return stored
	}
	md := stored.Metadata()
	return arrow.NewSchema(fields, &md)
}
