// Package filter answers one question: which rows of a dataset does a
// predicate keep?
//
// A Predicate is pyarrow.parquet's filters (read_table(filters=...)): a
// disjunction of conjunctions of (column, op, value) terms, with ops ==
// (or =), !=, <, <=, >, >=, in and not in, and pyarrow's meaning for nulls,
// NaN and mixed types: a null compares false (!= included), "in" matches a
// null only when the set holds None, "not in" is its negation (so it keeps
// nulls unless the set holds None), NaN compares false except with != and
// matches "in" a set holding NaN; an int column compares with a float value
// exactly (i < 2.5 keeps 2), a timestamp column compares with a date value
// (midnight) and the reverse. Parse reads the JSON form of the ticket
// (docs/PROTOCOL.md, "Filters"); Bind checks it against an Arrow schema (the
// column exists, the value's kind fits the column's type) and compiles it.
//
// A Bound predicate answers twice: Prune, from a row group's statistics
// (min, max, null count, and where given its dictionary, every distinct
// value, and its bloom filter), says whether no row, every row or some rows
// may match; Eval, on the decoded filter columns of a row group, says exactly
// which rows match, as a Selection (sorted runs of physical rows), each term
// a typed loop over the column's values and validity bitmap (a dictionary
// column's dictionary evaluated once, its indices gathered). Selections
// are cached per file and predicate behind the Store interface (an LRU in
// memory by default), and stored in a dataset's manifest as facts of kind
// SelectionFactKind (EncodeFileSelection, DecodeFileSelection).
//
// # Caveats
//
// The package reads no storage: the caller (feed, through loader) fetches
// statistics and decodes the filter columns. Float statistics exclude NaN, so
// Prune never rules out a float row group for != or "not in", and never
// says every row of a float column matches. Column types outside ints,
// unsigned ints, floats, bools, strings, binaries, dates, timestamps and
// decimal128 (and dictionaries of them) are refused by Bind, naming the
// column and its type.
package filter
