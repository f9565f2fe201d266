package feed

// First-fit packing in a mixture (DESIGN.md, "Mixtures", "Packing"): the
// composition stays in source rows; each slice's b rows, source blocks in
// the step's order, are packed first-fit in slice order into ceil(b/r) rows
// of L tokens by one packer over the sources' common (unpacked) schema, as a
// single dataset's slice is packed.

import (
	"fmt"
	"slices"
	"strings"

	"github.com/meshfeed/meshfeed/batching"
	"github.com/meshfeed/meshfeed/shape"
	"github.com/meshfeed/meshfeed/transport"
)

// errMixtureConcat refuses pack "concat" in a mixture.
const errMixtureConcat = "pack \"concat\" is not supported in a mixture: the composition counts rows (documents) per source, " +
	"concatenate-then-split counts tokens, so a step could not hold each source's share of rows; use pack_ratio " +
	"(first-fit packing of each step's composed rows, the same pack_ratio, length, overflow and fill in every source), " +
	"or read the sources as one dataset with pack \"concat\""

// splitPacking splits a source's shaping into what the source does alone
// (its cast and fill of the packed columns, every other column's shaping)
// and the packed columns, renamed by the source's rename map, which the
// mixture's packer applies to the composed slice.
func splitPacking(shaping []shape.Column, rename map[string]string) (own, packed []shape.Column) {
	for _, c := range shaping {
		if c.PackRatio == 0 {
			own = append(own, c)
			continue
		}
		if c.DType != shape.Keep || c.Fill.IsSet() {
			own = append(own, shape.Column{Name: c.Name, DType: c.DType, Fill: c.Fill})
		}
		if to, ok := rename[c.Name]; ok {
			c.Name = to
		}
		packed = append(packed, c)
	}
	return own, packed
}

// packSpec describes packed columns for errors.
func packSpec(cols []shape.Column) string {
	if len(cols) == 0 {
		return "no column"
	}
	var out []string
	for _, c := range cols {
		out = append(out, fmt.Sprintf("%q (length %d, pack_ratio %v, overflow %v, fill %v, dtype %v)", c.Name, c.Length, c.PackRatio, c.Overflow, c.Fill, c.DType))
	}
	return strings.Join(out, ", ")
}

// samePacking checks that every source packs the same columns the same way
// (packs[i]: source i's packed columns, splitPacking), naming both sources
// otherwise, and returns them (nil: no packing).
func samePacking(srcs []*mixSource, packs [][]shape.Column) ([]shape.Column, error) {
	first := slices.IndexFunc(packs, func(pk []shape.Column) bool { return len(pk) > 0 })
	if first < 0 {
		return nil, nil
	}
	for i, pk := range packs {
		if !slices.Equal(pk, packs[first]) {
			return nil, fmt.Errorf("feed: %w: mixture %s packs %s but %s packs %s: every source of a packed mixture must pack the same columns "+
				"(after rename) with the same length, pack_ratio, overflow, fill and dtype, since each slice's rows from all sources are packed together",
				transport.ErrBadRequest, srcs[i].name, packSpec(pk), srcs[first].name, packSpec(packs[first]))
		}
	}
	return packs[first], nil
}

// planPacking sets mp's packer and slice schema when its sources pack the
// columns pack (samePacking): last_batch "pad" is refused (no mask
// describes packed rows), and the source column becomes per token.
func (mp *mixturePlan) planPacking(pack []shape.Column, policy batching.Policy) error {
	if len(pack) == 0 {
		return nil
	}
	ratio := pack[0].PackRatio
	if policy == batching.Pad {
		return fmt.Errorf("feed: %w: mixture columns are packed (pack_ratio %v), which last_batch \"pad\" does not support (packing changes the row count, so no per-row mask can describe a packed slice): use \"drop\" or \"raise\"",
			transport.ErrBadRequest, ratio)
	}
	packer, err := shape.NewShaper(mp.in, pack)
	if err != nil {
		return fmt.Errorf("feed: mixture packing (%s): %w", packSpec(pack), err)
	}
	mp.packer, mp.ratio = packer, ratio
	mp.schema = packer.Schema()
	if sc := mp.req.Mixture.SourceColumn; sc != "" {
		if len(mp.schema.FieldIndices(sc)) > 0 {
			return fmt.Errorf("feed: %w: the source column %q is a column of the packed slices (columns: %s): choose another source_column",
				transport.ErrBadRequest, sc, fieldNames(mp.schema))
		}
		mp.schema = packer.TaggedSchema(sc)
	}
	return nil
}

// packedRows is the rows of each slice a step delivers: the composition's b,
// or with packing ceil(b/r).
func (mp *mixturePlan) packedRows() int {
	if mp.packer == nil {
		return mp.mix.SliceRows()
	}
	return shape.PackedRows(mp.mix.SliceRows(), mp.ratio)
}
