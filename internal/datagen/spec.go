package datagen

import (
	"errors"
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
)

// Format is the file format of a generated dataset.
type Format int

const (
	// FormatParquet writes Parquet files (part-NNNNN.parquet) with the
	// ARROW:schema key in their metadata.
	FormatParquet Format = iota
	// FormatArrow writes Arrow IPC files, Feather v2 (part-NNNNN.arrow).
	FormatArrow
)

var formatNames = []string{FormatParquet: "parquet", FormatArrow: "arrow"}

// String returns the name ParseFormat accepts.
func (f Format) String() string {
	if f < 0 || int(f) >= len(formatNames) {
		return fmt.Sprintf("Format(%d)", int(f))
	}
	return formatNames[f]
}

// Ext returns the file name extension, without the dot.
func (f Format) Ext() string { return f.String() }

// ParseFormat parses "parquet" or "arrow".
func ParseFormat(s string) (Format, error) {
	for i, n := range formatNames {
		if s == n {
			return Format(i), nil
		}
	}
	return 0, fmt.Errorf("%w: format %q (valid: %s)", ErrUnknownValue, s, strings.Join(formatNames, ", "))
}

// MarshalText implements encoding.TextMarshaler.
func (f Format) MarshalText() ([]byte, error) {
	if f < 0 || int(f) >= len(formatNames) {
		return nil, fmt.Errorf("%w: Format(%d)", ErrUnknownValue, int(f))
	}
	return []byte(f.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (f *Format) UnmarshalText(b []byte) error {
	v, err := ParseFormat(string(b))
	if err == nil {
		*f = v
	}
	return err
}

// Compression is the codec of a generated dataset's pages (Parquet) or
// record-batch bodies (Arrow IPC).
type Compression int

const (
	// CompressionNone writes uncompressed data.
	CompressionNone Compression = iota
	// CompressionSnappy is Parquet SNAPPY (Parquet only).
	CompressionSnappy
	// CompressionZstd is Parquet ZSTD or Arrow IPC ZSTD.
	CompressionZstd
	// CompressionGzip is Parquet GZIP (Parquet only).
	CompressionGzip
	// CompressionLZ4 is Parquet LZ4_RAW (the block format; never the deprecated
	// Hadoop-framed LZ4) or Arrow IPC LZ4_FRAME.
	CompressionLZ4
)

var compressionNames = []string{
	CompressionNone:   "none",
	CompressionSnappy: "snappy",
	CompressionZstd:   "zstd",
	CompressionGzip:   "gzip",
	CompressionLZ4:    "lz4",
}

// String returns the name ParseCompression accepts.
func (c Compression) String() string {
	if c < 0 || int(c) >= len(compressionNames) {
		return fmt.Sprintf("Compression(%d)", int(c))
	}
	return compressionNames[c]
}

// ParseCompression parses "none", "snappy", "zstd", "gzip" or "lz4".
func ParseCompression(s string) (Compression, error) {
	for i, n := range compressionNames {
		if s == n {
			return Compression(i), nil
		}
	}
	return 0, fmt.Errorf("%w: compression %q (valid: %s)", ErrUnknownValue, s, strings.Join(compressionNames, ", "))
}

// MarshalText implements encoding.TextMarshaler.
func (c Compression) MarshalText() ([]byte, error) {
	if c < 0 || int(c) >= len(compressionNames) {
		return nil, fmt.Errorf("%w: Compression(%d)", ErrUnknownValue, int(c))
	}
	return []byte(c.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (c *Compression) UnmarshalText(b []byte) error {
	v, err := ParseCompression(string(b))
	if err == nil {
		*c = v
	}
	return err
}

// Limits on a Spec, so that one row stays far below Arrow's 2^31 element limits.
const (
	// MaxFeatures bounds Spec.Features.
	MaxFeatures = 1 << 20
	// MaxTokens bounds Spec.TokensMax.
	MaxTokens = 1 << 20
	// MaxImageElems bounds H*W*C of Spec.Image.
	MaxImageElems = 1 << 24
	// MaxFiles bounds Spec.Files (file names have five digits).
	MaxFiles = 100000
)

// Spec describes a synthetic dataset completely: two equal Specs give
// byte-identical files from the same arrow-go version. It is plain data: it
// serializes to JSON (the CLI's _meshfeed_gen.json manifest) and compares with
// == (after Canonical).
//
// Columns, in order:
//
//	id       int64, not null: the global row number, 0..Rows-1 across files
//	label    int32, not null: Label(Seed, id)
//	features fixed_size_list<element: float32 not null>[Features], not null:
//	         Feature(Seed, id, j); omitted when Features == 0
//	tokens   list<element: int32 not null>, not null: Tokens(Seed, id, TokensMin,
//	         TokensMax); only when Tokens is set
//	image    arrow.fixed_shape_tensor over fixed_size_list<element: uint8>[H*W*C]
//	         with shape Image = [H, W, C], not null: Pixel(Seed, id, i); only when
//	         Image is set. The element is nullable (though never null): pyarrow
//	         rejects tensor storage with a non-nullable element.
type Spec struct {
	// Rows is the total row count; at least Files.
	Rows int64 `json:"rows"`
	// Files is the number of files; rows are spread evenly, the first Rows%Files
	// files holding one extra row.
	Files int `json:"files"`
	// RowGroupRows is the row count of every Parquet row group (or Arrow record
	// batch) except a file's last, which holds the rest.
	RowGroupRows int64 `json:"row_group_rows"`
	// Features is the length of the features vector; 0 omits the column.
	Features int `json:"features"`
	// Tokens adds the tokens column, with list lengths drawn from [TokensMin, TokensMax].
	Tokens bool `json:"tokens"`
	// TokensMin is the shortest tokens list (inclusive); ignored without Tokens.
	TokensMin int `json:"tokens_min"`
	// TokensMax is the longest tokens list (inclusive); ignored without Tokens.
	TokensMax int `json:"tokens_max"`
	// Image, when not zero, adds the image column with shape [H, W, C].
	Image [3]int `json:"image"`
	// Format is the file format.
	Format Format `json:"format"`
	// Compression is the codec; Arrow IPC supports only none, zstd and lz4.
	Compression Compression `json:"compression"`
	// Dictionary turns on Parquet dictionary encoding for every column (Parquet only).
	Dictionary bool `json:"dictionary"`
	// PageBytes is the Parquet data page size the writer aims at; 0 keeps
	// the writer's default (1 MiB). Parquet only.
	PageBytes int64 `json:"page_bytes,omitempty"`
	// PageIndex writes the Parquet page index (column and offset indexes).
	// Parquet only.
	PageIndex bool `json:"page_index,omitempty"`
	// Seed selects the values; see Label, Feature, Tokens, Pixel.
	Seed uint64 `json:"seed"`
}

// DefaultSpec returns the defaults: 1000 rows in one file, 65536-row row
// groups, 64 features, no tokens, no image, Parquet, uncompressed, no
// dictionary, seed 0.
func DefaultSpec() Spec {
	return Spec{Rows: 1000, Files: 1, RowGroupRows: 65536, Features: 64, Format: FormatParquet, Compression: CompressionNone}
}

// HasImage reports whether s has an image column.
func (s Spec) HasImage() bool { return s.Image != [3]int{} }

// Canonical returns s with the fields that do not matter zeroed (token lengths
// without tokens), so that two Specs of the same dataset compare equal with ==.
func (s Spec) Canonical() Spec {
	if !s.Tokens {
		s.TokensMin, s.TokensMax = 0, 0
	}
	return s
}

// Validate reports every problem with s at once, wrapped in ErrInvalidSpec.
func (s Spec) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if s.Files < 1 || s.Files > MaxFiles {
		bad("files = %d, want 1..%d", s.Files, MaxFiles)
	}
	if s.Rows < int64(max(s.Files, 1)) {
		bad("rows = %d, want at least files (%d)", s.Rows, s.Files)
	}
	if s.RowGroupRows < 1 {
		bad("row group rows = %d, want > 0", s.RowGroupRows)
	}
	if s.Features < 0 || s.Features > MaxFeatures {
		bad("features = %d, want 0..%d", s.Features, MaxFeatures)
	}
	if s.Tokens && (s.TokensMin < 0 || s.TokensMax < s.TokensMin || s.TokensMax > MaxTokens) {
		bad("tokens = %d:%d, want 0 <= min <= max <= %d", s.TokensMin, s.TokensMax, MaxTokens)
	}
	if s.HasImage() {
		if s.Image[0] < 1 || s.Image[1] < 1 || s.Image[2] < 1 ||
			int64(s.Image[0])*int64(s.Image[1])*int64(s.Image[2]) > MaxImageElems {
			bad("image shape %v, want positive dimensions with H*W*C <= %d", s.Image, MaxImageElems)
		}
	}
	switch s.Format {
	case FormatParquet:
		if s.Compression < 0 || int(s.Compression) >= len(compressionNames) {
			bad("compression %v, want one of %s", s.Compression, strings.Join(compressionNames, ", "))
		}
	case FormatArrow:
		switch s.Compression {
		case CompressionNone, CompressionZstd, CompressionLZ4:
		default:
			bad("compression %v is not supported by Arrow IPC, want none, zstd or lz4", s.Compression)
		}
		if s.Dictionary {
			bad("dictionary encoding applies only to format parquet")
		}
		if s.PageBytes != 0 || s.PageIndex {
			bad("page size and page index apply only to format parquet")
		}
	default:
		bad("format %v, want parquet or arrow", s.Format)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidSpec, errors.Join(errs...))
	}
	return nil
}

// FilePlan is where one file's rows come from.
type FilePlan struct {
	// Name is the file's base name, part-NNNNN.<ext>: sorted names are in row order.
	Name string
	// FirstRow is the global id of the file's first row.
	FirstRow int64
	// Rows is the file's row count.
	Rows int64
	// RowGroups holds the row count of each row group (Parquet) or record batch (Arrow).
	RowGroups []int64
}

// Plan returns the files of the dataset s describes, in order. s must be valid.
func (s Spec) Plan() ([]FilePlan, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	out := make([]FilePlan, s.Files)
	base, rem := s.Rows/int64(s.Files), s.Rows%int64(s.Files)
	first := int64(0)
	for i := range out {
		n := base
		if int64(i) < rem {
			n++
		}
		var groups []int64
		for left := n; left > 0; left -= s.RowGroupRows {
			groups = append(groups, min(left, s.RowGroupRows))
		}
		out[i] = FilePlan{Name: fmt.Sprintf("part-%05d.%s", i, s.Format.Ext()), FirstRow: first, Rows: n, RowGroups: groups}
		first += n
	}
	return out, nil
}

// elemField is the child field of every list column: named "element" (the
// Parquet LIST convention, which arrow-go's writer also stores in ARROW:schema)
// and not null.
func elemField(t arrow.DataType) arrow.Field {
	return arrow.Field{Name: "element", Type: t, Nullable: false}
}

// Schema returns the Arrow schema of the dataset s describes, with the image
// column (if any) as *TensorType. s must be valid.
func (s Spec) Schema() (*arrow.Schema, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	fields := []arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "label", Type: arrow.PrimitiveTypes.Int32},
	}
	if s.Features > 0 {
		fields = append(fields, arrow.Field{Name: "features",
			Type: arrow.FixedSizeListOfField(int32(s.Features), elemField(arrow.PrimitiveTypes.Float32))})
	}
	if s.Tokens {
		fields = append(fields, arrow.Field{Name: "tokens", Type: arrow.ListOfField(elemField(arrow.PrimitiveTypes.Int32))})
	}
	if s.HasImage() {
		t, err := NewTensorType(arrow.PrimitiveTypes.Uint8, s.Image[:])
		if err != nil {
			return nil, err
		}
		n := s.Image[0] * s.Image[1] * s.Image[2]
		// pyarrow accepts fixed_shape_tensor storage only with a nullable element.
		t.Storage = arrow.FixedSizeListOfField(int32(n), arrow.Field{Name: "element", Type: arrow.PrimitiveTypes.Uint8, Nullable: true})
		fields = append(fields, arrow.Field{Name: "image", Type: t})
	}
	return arrow.NewSchema(fields, nil), nil
}
