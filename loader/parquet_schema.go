package loader

// Mapping Parquet schemas to the Arrow schema the loader emits. Planning uses
// this (a file's Arrow schema comes from its footer alone); the page decoder in
// parquet_decode.go uses it to check that a column's physical type fits.

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"
)

// outputField maps a file's Arrow field to the field the loader emits:
// extension types become their storage type with the extension's name and
// metadata kept in the field metadata; large string/binary become
// string/binary; dictionary<_, string> becomes string. Types the loader does
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

// primitiveSize is the byte width of a fixed-width type the loader decodes
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
	case arrow.INT64, arrow.UINT64, arrow.FLOAT64, arrow.TIMESTAMP, arrow.DATE64:
		return 8, true
	}
	return 0, false
}

// arrowSchemaFromParquet derives an Arrow schema for files written without
// ARROW:schema metadata: primitive leaves by physical and logical type, LIST of
// primitives as list<T>, BYTE_ARRAY as string or binary.
func arrowSchemaFromParquet(s *parquet.Schema, elems []format.SchemaElement) (*arrow.Schema, error) {
	// Leaf schema elements in order: parquet-go's node types do not carry
	// every logical type (FLOAT16), the flat footer schema does.
	var leafElems []*format.SchemaElement
	for i := range elems {
		if i > 0 && (!elems[i].NumChildren.Valid || elems[i].NumChildren.V == 0) {
			leafElems = append(leafElems, &elems[i])
		}
	}
	float16Leaf := map[string]bool{}
	for i, path := range s.Columns() {
		if i < len(leafElems) {
			if _, ok := leafElems[i].LogicalType.Value.(*format.Float16Type); ok {
				float16Leaf[path[0]] = true
			}
		}
	}
	var fields []arrow.Field
	for _, f := range s.Fields() {
		t, err := arrowTypeOfNode(f)
		if err != nil && float16Leaf[f.Name()] && f.Leaf() {
			t, err = arrow.FixedWidthTypes.Float16, nil
		}
		if err != nil {
			return nil, fmt.Errorf("column %q: %w", f.Name(), err)
		}
		fields = append(fields, arrow.Field{Name: f.Name(), Type: t, Nullable: f.Optional()})
	}
	return arrow.NewSchema(fields, nil), nil
}

func arrowTypeOfNode(n parquet.Node) (arrow.DataType, error) {
	if n.Leaf() {
		t, err := arrowTypeOfLeaf(n)
		if err != nil {
			return nil, err
		}
		if n.Repeated() {
			return arrow.ListOf(t), nil
		}
		return t, nil
	}
	// LIST: group (LIST) { repeated group list { element } } or legacy
	// two-level forms; anything with exactly one primitive leaf below one
	// repeated level is a list of that primitive.
	fields := n.Fields()
	if len(fields) != 1 {
		return nil, fmt.Errorf("group with %d fields: %w; only lists of primitives are decoded", len(fields), ErrUnsupported)
	}
	rep := fields[0]
	if !rep.Repeated() {
		return nil, fmt.Errorf("group without a repeated field: %w", ErrUnsupported)
	}
	if rep.Leaf() {
		t, err := arrowTypeOfLeaf(rep)
		if err != nil {
			return nil, err
		}
		return arrow.ListOf(t), nil
	}
	inner := rep.Fields()
	if len(inner) != 1 || !inner[0].Leaf() || inner[0].Repeated() {
		return nil, fmt.Errorf("nested list or struct: %w; only lists of primitives are decoded", ErrUnsupported)
	}
	t, err := arrowTypeOfLeaf(inner[0])
	if err != nil {
		return nil, err
	}
	return arrow.ListOf(t), nil
}

func arrowTypeOfLeaf(n parquet.Node) (arrow.DataType, error) {
	typ := n.Type()
	var lv any
	if lt := typ.LogicalType(); lt != nil {
		lv = lt.Value
	}
	switch typ.Kind() {
	case parquet.Boolean:
		return arrow.FixedWidthTypes.Boolean, nil
	case parquet.Int32:
		if it, ok := lv.(*format.IntType); ok {
			switch {
			case it.BitWidth == 8 && it.IsSigned:
				return arrow.PrimitiveTypes.Int8, nil
			case it.BitWidth == 8:
				return arrow.PrimitiveTypes.Uint8, nil
			case it.BitWidth == 16 && it.IsSigned:
				return arrow.PrimitiveTypes.Int16, nil
			case it.BitWidth == 16:
				return arrow.PrimitiveTypes.Uint16, nil
			case !it.IsSigned:
				return arrow.PrimitiveTypes.Uint32, nil
			}
		}
		return arrow.PrimitiveTypes.Int32, nil
	case parquet.Int64:
		if it, ok := lv.(*format.IntType); ok && !it.IsSigned {
			return arrow.PrimitiveTypes.Uint64, nil
		}
		return arrow.PrimitiveTypes.Int64, nil
	case parquet.Float:
		return arrow.PrimitiveTypes.Float32, nil
	case parquet.Double:
		return arrow.PrimitiveTypes.Float64, nil
	case parquet.ByteArray:
		switch lv.(type) {
		case *format.StringType, *format.EnumType, *format.JsonType:
			return arrow.BinaryTypes.String, nil
		}
		return arrow.BinaryTypes.Binary, nil
	case parquet.FixedLenByteArray:
		if _, ok := lv.(*format.Float16Type); ok {
			return arrow.FixedWidthTypes.Float16, nil
		}
	}
	return nil, fmt.Errorf("parquet type %s: %w", typ, ErrUnsupported)
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
	case arrow.INT64, arrow.UINT64, arrow.TIMESTAMP, arrow.DATE64:
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
