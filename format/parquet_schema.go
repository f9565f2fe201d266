package format

// Mapping Parquet schemas to the Arrow schema format decodes to. Planning uses
// this (a file's Arrow schema comes from its footer alone); the page decoder in
// parquet_decode.go uses it to check that a column's physical type fits.

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/parquet-go/parquet-go"
)

// outputField maps a file's Arrow field to the field format decodes to:
// extension types become their storage type with the extension's name and
// metadata kept in the field metadata; large string/binary become
// string/binary; dictionary<_, string> becomes string. Types format does
// not decode are ErrUnsupported.
func outputField(f arrow.Field) (arrow.Field, error) {
	out := arrow.Field{Name: f.Name, Type: f.Type, Nullable: false, Metadata: f.Metadata}
	if ext, ok := f.Type.(arrow.ExtensionType); ok {
		md := map[string]string{"ARROW:extension:name": ext.ExtensionName(), "ARROW:extension:metadata": ext.Serialize()}
		for i, k := range f.Metadata.Keys() {
			md[k] = f.Metadata.Values()[i]
		}
		out.Type = ext.StorageType()
		out.Metadata = arrow.MetadataFrom(md)
	}
	switch t := out.Type.(type) {
	case *arrow.DictionaryType:
		out.Type = t.ValueType
	case *arrow.LargeStringType:
		out.Type = arrow.BinaryTypes.String
	case *arrow.LargeBinaryType:
		out.Type = arrow.BinaryTypes.Binary
	}
	switch t := out.Type.(type) {
	case *arrow.StringType, *arrow.BinaryType:
		out.Nullable = true
		return out, nil
	case *arrow.FixedSizeListType:
		if _, ok := primitiveSize(t.Elem()); !ok {
			return out, fmt.Errorf("fixed_size_list of %s: %w; only lists of bool, integers and floats are decoded", t.Elem(), ErrUnsupported)
		}
		out.Type = arrow.FixedSizeListOfNonNullable(t.Len(), t.Elem())
		return out, nil
	case *arrow.ListType:
		if _, ok := primitiveSize(t.Elem()); !ok {
			return out, fmt.Errorf("list of %s: %w; only lists of bool, integers and floats are decoded", t.Elem(), ErrUnsupported)
		}
		out.Type = arrow.ListOfNonNullable(t.Elem())
		return out, nil
	case *arrow.LargeListType:
		if _, ok := primitiveSize(t.Elem()); !ok {
			return out, fmt.Errorf("large_list of %s: %w", t.Elem(), ErrUnsupported)
		}
		out.Type = arrow.ListOfNonNullable(t.Elem())
		return out, nil
	}
	if _, ok := primitiveSize(out.Type); !ok {
		return out, fmt.Errorf("type %s: %w; decoded types are bool, int8-64, uint8-64, float16/32/64, fixed_size_list and list of those, string and binary", out.Type, ErrUnsupported)
	}
	return out, nil
}

// primitiveSize is the byte width of a fixed-width type format decodes
// (0 for bool, which is bit-packed).
func primitiveSize(t arrow.DataType) (int, bool) {
	switch t.ID() {
	case arrow.BOOL:
		return 0, true
	case arrow.INT8, arrow.UINT8:
		return 1, true
	case arrow.INT16, arrow.UINT16, arrow.FLOAT16:
		return 2, true
	case arrow.INT32, arrow.UINT32, arrow.FLOAT32, arrow.DATE32:
		return 4, true
	case arrow.INT64, arrow.UINT64, arrow.FLOAT64, arrow.TIMESTAMP, arrow.DATE64, arrow.DURATION:
		return 8, true
	}
	return 0, false
}

func fieldByName(n parquet.Node, name string) parquet.Node {
	for _, f := range n.Fields() {
		if f.Name() == name {
			return f
		}
	}
	return nil
}

func physicalFits(t arrow.DataType, k parquet.Kind, length int) bool {
	switch t.ID() {
	case arrow.BOOL:
		return k == parquet.Boolean
	case arrow.INT8, arrow.UINT8, arrow.INT16, arrow.UINT16, arrow.INT32, arrow.UINT32, arrow.DATE32:
		return k == parquet.Int32
	case arrow.INT64, arrow.UINT64, arrow.TIMESTAMP, arrow.DATE64, arrow.DURATION:
		return k == parquet.Int64
	case arrow.FLOAT32:
		return k == parquet.Float
	case arrow.FLOAT64:
		return k == parquet.Double
	case arrow.FLOAT16:
		return k == parquet.FixedLenByteArray && length == 2
	}
	return false
}
