package datagen

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// TextSpec describes a text dataset: columns id (int64) and text (string),
// documents cut from real text (a source directory, e.g. the Python standard
// library) and mixed with other scripts, emoji, combining marks, unusual
// whitespace and special-token look-alikes. Documents are a pure function of
// (source, Seed, id): TextDoc.
type TextSpec struct {
	// Docs is the number of documents (rows).
	Docs int64 `json:"docs"`
	// Files is the number of Parquet files; documents are spread evenly.
	Files int `json:"files"`
	// RowGroupRows is the row count of each row group but a file's last.
	RowGroupRows int64 `json:"row_group_rows"`
	// MinChars and MaxChars bound a document's length in characters (code points).
	MinChars int `json:"min_chars"`
	MaxChars int `json:"max_chars"`
	// Seed selects the documents.
	Seed uint64 `json:"seed"`
}

// DefaultTextSpec: 2000 documents of 100 to 20,000 characters in one file of
// 500-row row groups.
func DefaultTextSpec() TextSpec {
	return TextSpec{Docs: 2000, Files: 1, RowGroupRows: 500, MinChars: 100, MaxChars: 20000}
}

// Validate reports the first problem of s.
func (s TextSpec) Validate() error {
	switch {
	case s.Docs < 1:
		return fmt.Errorf("%w: text docs %d must be >= 1", ErrInvalidSpec, s.Docs)
	case s.Files < 1 || s.Files > MaxFiles || int64(s.Files) > s.Docs:
		return fmt.Errorf("%w: text files %d must be in [1, min(docs, %d)]", ErrInvalidSpec, s.Files, MaxFiles)
	case s.RowGroupRows < 1:
		return fmt.Errorf("%w: row group rows %d must be >= 1", ErrInvalidSpec, s.RowGroupRows)
	case s.MinChars < 1 || s.MaxChars < s.MinChars || s.MaxChars > 1<<24:
		return fmt.Errorf("%w: text lengths [%d, %d] must satisfy 1 <= min <= max <= 2^24", ErrInvalidSpec, s.MinChars, s.MaxChars)
	}
	return nil
}

// TextSource is the real text documents are cut from: the concatenated
// files of a directory, in sorted path order.
type TextSource struct {
	text string
}

// maxSourceBytes bounds how much of a source directory is read.
const maxSourceBytes = 64 << 20

// LoadTextSource reads the *.py, *.txt, *.rst and *.md files under dir
// (sorted by path, at most 64 MiB, invalid UTF-8 files skipped).
func LoadTextSource(dir string) (*TextSource, error) {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // unreadable parts of a system tree are skipped
		}
		if d.IsDir() {
			if n := d.Name(); n != "." && strings.HasPrefix(n, ".") || n == "__pycache__" || n == "site-packages" {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(p) {
		case ".py", ".txt", ".rst", ".md":
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("datagen: text source %s: %w", dir, err)
	}
	sort.Strings(paths)
	var sb strings.Builder
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil || !utf8.Valid(b) {
			continue
		}
		if sb.Len()+len(b) > maxSourceBytes {
			break
		}
		sb.Write(b)
		sb.WriteByte('\n')
	}
	if sb.Len() < 1<<16 {
		return nil, fmt.Errorf("%w: text source %s holds %d bytes of text files; want at least 64 KiB (point --source at a tree of .py/.txt/.rst/.md files, e.g. Python's standard library)", ErrInvalidSpec, dir, sb.Len())
	}
	return &TextSource{text: sb.String()}, nil
}

// NewTextSource uses text as the source (tests).
func NewTextSource(text string) *TextSource { return &TextSource{text: text} }

// spice is text that stresses tokenizers, inserted into documents.
var spice = []string{
	"Съешь же ещё этих мягких французских булок, да выпей чаю.",
	"Ζαφείρι δέξου πάγκαλο, βαθῶν ψυχῆς τὸ σῆμα.",
	"色は匂へど散りぬるを 我が世誰ぞ常ならむ",
	"我能吞下玻璃而不伤身体。機器學習很有趣！",
	"키스의 고유조건은 입술끼리 만나야 하고",
	"نص حكيم له سر قاطع وذو شأن عظيم مكتوب على ثوب أخضر",
	"עטלף אבק נס דרך מזגן שהתפוצץ כי חם",
	"ऋषियों को सताने वाले दुष्ट राक्षसों के राजा रावण का सर्वनाश",
	"เป็นมนุษย์สุดประเสริฐเลิศคุณค่า",
	"Ǎ Ł ő ß ẞ ǅ ﬁ ﬀ Å Å K K ſ İ ı ℃ ① ⅷ ½ ²",
	"e\u0301 a\u0308 o\u0302\u0323 n\u0303 Z\u0351\u0352\u0353 \u0915\u094D\u0937",
	"😀 👍🏽 👨‍👩‍👧‍👦 🇯🇵 🏳️‍🌈 ❤️ ✈︎ 🫠",
	"tab\there\t\tand\u00a0nbsp\u00a0\u00a0x\u2028line\u2029para\u3000ideo\u200bzw\u2003em",
	"CRLF line\r\nnext line\r\n\r\nend\r",
	"I'M HE'S THEY'RE WE'VE YOU'LL I'D it'S don't O'Neil ''quoted'' 'ſ",
	"<|endoftext|> <s>x</s> [CLS] [SEP] <unk> <|begin_of_text|> <pad>",
	"0123456789 3.14159 1,000,000 ١٢٣٤ ٤٥٦ 一二三 Ⅻ",
	"\x00\x01\x7f\u0085\ufeff\ufffd\U000E0001",
}

// TextDoc returns document id: a slice of the source of a drawn length,
// with spice inserted at drawn places, and sometimes CRLF line ends, a long
// run of one character or of spaces. Its length in characters is within
// [MinChars, MaxChars] when the source is long enough.
func (src *TextSource) TextDoc(s TextSpec, id int64) string {
	h := rowBase(s.Seed, 0x74657874000006, id) // "text"
	next := func() uint64 { h = mix64(h + golden); return h }
	span := uint64(s.MaxChars - s.MinChars + 1)
	n := s.MinChars + int(next()%span)
	if next()%4 != 0 {
		// Most documents are short: three quarters within the first tenth.
		n = s.MinChars + int(next()%max(span/10, 1))
	}
	var b strings.Builder
	for chars := 0; chars < n; chars = utf8.RuneCountInString(b.String()) {
		start := int(next() % uint64(len(src.text)))
		for start > 0 && !utf8.RuneStart(src.text[start]) {
			start--
		}
		// Chunks shorter than half the document, so that spice lands inside it.
		take := min(len(src.text)-start, 1+int(next()%uint64(min(4096, max(32, n/2)))))
		chunk := src.text[start : start+take]
		for len(chunk) > 0 && !utf8.ValidString(chunk) {
			chunk = chunk[:len(chunk)-1]
		}
		b.WriteString(chunk)
		if next()%2 == 0 {
			b.WriteString(spice[next()%uint64(len(spice))])
		}
		switch next() % 16 {
		case 0:
			b.WriteString(strings.Repeat(string(rune('a'+next()%26)), 1+int(next()%3000)))
		case 1:
			b.WriteString(strings.Repeat(" ", 1+int(next()%200)))
		case 2:
			b.WriteString(strings.Repeat("\n", 1+int(next()%20)))
		}
	}
	doc := b.String()
	if next()%8 == 0 {
		doc = strings.ReplaceAll(doc, "\n", "\r\n")
	}
	// Cut to n characters.
	k := 0
	for i := range doc {
		if k == n {
			return doc[:i]
		}
		k++
	}
	return doc
}

// TextSchema is the schema of a text dataset.
func TextSchema() *arrow.Schema {
	return arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "text", Type: arrow.BinaryTypes.String},
	}, nil)
}

// WriteText writes s as Parquet files part-NNNNN.parquet (zstd) under dir.
func WriteText(ctx context.Context, c Creator, dir string, s TextSpec, src *TextSource) ([]FileResult, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	var res []FileResult
	first := int64(0)
	for f := 0; f < s.Files; f++ {
		rows := s.Docs / int64(s.Files)
		if int64(f) < s.Docs%int64(s.Files) {
			rows++
		}
		uri := JoinURI(dir, fmt.Sprintf("part-%05d.parquet", f))
		n, err := writeTextFile(ctx, c, uri, s, src, first, rows)
		if err != nil {
			return res, fmt.Errorf("datagen: %s: %w", uri, err)
		}
		res = append(res, FileResult{URI: uri, FirstRow: first, Rows: rows, Bytes: n})
		first += rows
	}
	return res, nil
}

func writeTextFile(ctx context.Context, c Creator, uri string, s TextSpec, src *TextSource, first, rows int64) (int64, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := c.Create(wctx, uri)
	if err != nil {
		return 0, err
	}
	cw := &countingWriter{w: w}
	fail := func(err error) (int64, error) {
		if a, ok := w.(interface{ Abort() error }); ok {
			_ = a.Abort()
		} else {
			cancel()
			_ = w.Close()
		}
		return 0, err
	}
	props := parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Zstd),
		parquet.WithMaxRowGroupLength(s.RowGroupRows), parquet.WithCreatedBy("meshfeed datagen (arrow-go v18)"))
	sc := TextSchema()
	fw, err := pqarrow.NewFileWriter(sc, cw, props, pqarrow.DefaultWriterProps())
	if err != nil {
		return fail(err)
	}
	for lo := int64(0); lo < rows; lo += s.RowGroupRows {
		if err := ctx.Err(); err != nil {
			fw.Close()
			return fail(err)
		}
		hi := min(rows, lo+s.RowGroupRows)
		ids := array.NewInt64Builder(memory.DefaultAllocator)
		texts := array.NewStringBuilder(memory.DefaultAllocator)
		for r := lo; r < hi; r++ {
			ids.Append(first + r)
			texts.Append(src.TextDoc(s, first+r))
		}
		ia, ta := ids.NewArray(), texts.NewArray()
		rec := array.NewRecordBatch(sc, []arrow.Array{ia, ta}, hi-lo)
		err := fw.Write(rec)
		rec.Release()
		ia.Release()
		ta.Release()
		if err != nil {
			fw.Close()
			return fail(err)
		}
	}
	if err := fw.Close(); err != nil {
		return fail(err)
	}
	if err := w.Close(); err != nil {
		return 0, err
	}
	return cw.n, nil
}
