package format

import (
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	pqschema "github.com/apache/arrow-go/v18/parquet/schema"
)

// Legacy two-level lists (what parquet-avro writes for a list of lists):
//
//	required group a (LIST) {
//	  repeated group array (LIST) {
//	    repeated int32 array;
//	  }
//	}
//
// By the Parquet format's backward-compatibility rules (LogicalTypes.md), a
// repeated group of one field named array or <list>_tuple is the list's
// element itself; being annotated LIST, it is a list: pyarrow reads
// list<array: list<array: int32 not null> not null>. arrow-go makes the
// element a struct holding the group's field (list<struct<array:
// list<int32>>>), the same values one struct deeper. The plan takes
// pyarrow's type (legacyLists) and arrow-go's arrays are unwrapped to it
// (unwrapLegacy).

// isListNode reports whether n is annotated LIST.
func isListNode(n pqschema.Node) bool {
	if n.ConvertedType() == pqschema.ConvertedTypes.List {
		return true
	}
	switch n.LogicalType().(type) {
	case pqschema.ListLogicalType, *pqschema.ListLogicalType:
		return true
	}
	return false
}

// legacyLists returns t, arrow-go's type of Parquet node n, with every
// legacy list of lists under it as pyarrow reads it.
func legacyLists(t arrow.DataType, n pqschema.Node) arrow.DataType {
	g, ok := n.(*pqschema.GroupNode)
	if !ok {
		return t
	}
	switch tt := t.(type) {
	case *arrow.StructType:
		if tt.NumFields() != g.NumFields() {
			return t
		}
		fields := tt.Fields()
		for i := range fields {
			fields[i].Type = legacyLists(fields[i].Type, g.Field(i))
		}
		return arrow.StructOf(fields...)
	case *arrow.ListType:
		if !isListNode(g) || g.NumFields() != 1 {
			return t
		}
		rep, ok := g.Field(0).(*pqschema.GroupNode)
		if !ok {
			return t
		}
		elem := tt.ElemField()
		st, isStruct := elem.Type.(*arrow.StructType)
		if rep.NumFields() == 1 && (rep.Name() == "array" || rep.Name() == g.Name()+"_tuple") && isListNode(rep) && isStruct && st.NumFields() == 1 {
			inner := st.Field(0).Type
			if il, ok := inner.(*arrow.ListType); ok {
				leaf := rep.Field(0)
				inner = arrow.ListOfField(arrow.Field{Name: leaf.Name(), Type: legacyLists(il.Elem(), leaf), Nullable: false})
			}
			return arrow.ListOfField(arrow.Field{Name: rep.Name(), Type: inner, Nullable: false})
		}
		if rep.NumFields() == 1 { // three levels: the element is the repeated group's field
			elem.Type = legacyLists(elem.Type, rep.Field(0))
		} else {
			elem.Type = legacyLists(elem.Type, rep)
		}
		return arrow.ListOfField(elem)
	}
	return t
}

// unwrapLegacy returns data, decoded by arrow-go, with each list of structs
// of one field that t (legacyLists' type) has as a list of that field's type
// unwrapped: the structs' field is the list's values. ok is false when data
// does not fit t that way (or a struct there is null).
func unwrapLegacy(data arrow.ArrayData, t arrow.DataType) (out arrow.ArrayData, ok bool) {
	switch tt := t.(type) {
	case *arrow.ListType:
		if _, isList := data.DataType().(*arrow.ListType); !isList || len(data.Children()) != 1 {
			return nil, false
		}
		child := data.Children()[0]
		child.Retain()
		defer func() { child.Release() }()
		_, wantStruct := tt.Elem().(*arrow.StructType)
		if st, isStruct := child.DataType().(*arrow.StructType); isStruct && !wantStruct && st.NumFields() == 1 {
			if child.NullN() > 0 {
				return nil, false
			}
			field := array.NewSliceData(child.Children()[0], int64(child.Offset()), int64(child.Offset()+child.Len()))
			child.Release()
			child = field
		}
		inner, ok := unwrapLegacy(child, tt.Elem())
		if !ok {
			return nil, false
		}
		defer inner.Release()
		lt := arrow.ListOfField(arrow.Field{Name: "item", Type: inner.DataType(), Nullable: true})
		return array.NewData(lt, data.Len(), data.Buffers(), []arrow.ArrayData{inner}, data.NullN(), data.Offset()), true
	case *arrow.StructType:
		st, isStruct := data.DataType().(*arrow.StructType)
		if !isStruct || st.NumFields() != tt.NumFields() {
			return nil, false
		}
		children := make([]arrow.ArrayData, 0, st.NumFields())
		defer func() {
			for _, c := range children {
				c.Release()
			}
		}()
		fields := st.Fields()
		for i, c := range data.Children() {
			u, ok := unwrapLegacy(c, tt.Field(i).Type)
			if !ok {
				return nil, false
			}
			children = append(children, u)
			fields[i].Type = u.DataType()
		}
		return array.NewData(arrow.StructOf(fields...), data.Len(), data.Buffers(), children, data.NullN(), data.Offset()), true
	}
	data.Retain()
	return data, true
}
