package datagen

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// TensorExtensionName is the name of Arrow's canonical fixed-shape tensor
// extension type, as written in the field metadata key ARROW:extension:name.
const TensorExtensionName = "arrow.fixed_shape_tensor"

// TensorType is Arrow's canonical fixed_shape_tensor extension type
// (https://arrow.apache.org/docs/format/CanonicalExtensions.html): every value
// is a row-major tensor of a fixed shape, stored as fixed_size_list<value>[prod(shape)].
// arrow-go v18.8.0 does not ship this type, so datagen carries a minimal one:
// only the `shape` key of the metadata is written; dim_names and permutation
// are accepted on read and ignored.
type TensorType struct {
	arrow.ExtensionBase
	shape []int
}

// TensorArray is the array type of TensorType; its Storage() is the
// fixed_size_list array.
type TensorArray struct {
	array.ExtensionArrayBase
}

// NewTensorType returns the fixed_shape_tensor type of the given value type and
// shape. Every dimension must be positive.
func NewTensorType(value arrow.DataType, shape []int) (*TensorType, error) {
	if len(shape) == 0 {
		return nil, errors.New("datagen: tensor shape has no dimensions")
	}
	n := 1
	for i, d := range shape {
		if d <= 0 {
			return nil, fmt.Errorf("datagen: tensor shape %v: dimension %d is %d, must be > 0", shape, i, d)
		}
		if n > (1<<31-1)/d {
			return nil, fmt.Errorf("datagen: tensor shape %v has more than 2^31-1 elements", shape)
		}
		n *= d
	}
	return &TensorType{
		ExtensionBase: arrow.ExtensionBase{Storage: arrow.FixedSizeListOf(int32(n), value)},
		shape:         append([]int(nil), shape...),
	}, nil
}

// Shape returns the tensor's shape (a copy).
func (t *TensorType) Shape() []int { return append([]int(nil), t.shape...) }

// ExtensionName implements arrow.ExtensionType.
func (*TensorType) ExtensionName() string { return TensorExtensionName }

// ArrayType implements arrow.ExtensionType.
func (*TensorType) ArrayType() reflect.Type { return reflect.TypeOf(TensorArray{}) }

// String implements fmt.Stringer.
func (t *TensorType) String() string {
	return fmt.Sprintf("extension<%s[value_type=%s, shape=%v]>", TensorExtensionName,
		t.Storage.(*arrow.FixedSizeListType).Elem(), t.shape)
}

type tensorMeta struct {
	Shape       []int    `json:"shape"`
	DimNames    []string `json:"dim_names,omitempty"`
	Permutation []int    `json:"permutation,omitempty"`
}

// Serialize implements arrow.ExtensionType: the JSON metadata {"shape":[...]}.
func (t *TensorType) Serialize() string {
	b, _ := json.Marshal(tensorMeta{Shape: t.shape}) // cannot fail for []int
	return string(b)
}

// Deserialize implements arrow.ExtensionType.
func (*TensorType) Deserialize(storage arrow.DataType, data string) (arrow.ExtensionType, error) {
	fsl, ok := storage.(*arrow.FixedSizeListType)
	if !ok {
		return nil, fmt.Errorf("datagen: %s storage must be fixed_size_list, got %s", TensorExtensionName, storage)
	}
	var m tensorMeta
	if err := json.Unmarshal([]byte(data), &m); err != nil {
		return nil, fmt.Errorf("datagen: %s metadata %q: %w", TensorExtensionName, data, err)
	}
	t, err := NewTensorType(fsl.Elem(), m.Shape)
	if err != nil {
		return nil, err
	}
	if t.Storage.(*arrow.FixedSizeListType).Len() != fsl.Len() {
		return nil, fmt.Errorf("datagen: %s shape %v does not match storage %s", TensorExtensionName, m.Shape, storage)
	}
	t.Storage = storage // keep the element field's name and nullability
	return t, nil
}

// ExtensionEquals implements arrow.ExtensionType.
func (t *TensorType) ExtensionEquals(other arrow.ExtensionType) bool {
	o, ok := other.(*TensorType)
	return ok && arrow.TypeEqual(t.Storage, o.Storage) && fmt.Sprint(t.shape) == fmt.Sprint(o.shape)
}

// RegisterTensorType registers TensorType with arrow-go's extension registry,
// so that IPC and Parquet readers return *TensorType columns instead of their
// fixed_size_list storage. It is idempotent, and a no-op when another
// implementation already registered the name.
func RegisterTensorType() {
	t, _ := NewTensorType(arrow.PrimitiveTypes.Uint8, []int{1}) // valid shape: cannot fail
	// The registry's only error is "name already registered", which is what
	// this function promises to tolerate.
	_ = arrow.RegisterExtensionType(t)
}
