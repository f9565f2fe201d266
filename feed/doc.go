// Package feed answers one question: how does one client's request become
// its steps?
//
// It composes the server's work. A Pipeline maps a request (the wire's
// transport.Request, decoded and checked by the transport) onto the
// vocabulary of the packages below it, once (configOf); opens its datasets
// with package loader, projected to the requested columns; plans the epochs
// with package batching; and produces each step as this client's slices, each
// cut from its own stream by its own batching.Cutter, fed by its own
// loader.RowGroupReader over exactly the row groups that cutter asks for
// (batching.Plan.StreamReads), and shaped by a shape.Shaper. A step leaves as
// transport.Step{Slices, Meta}: how the slices travel (one Flight message,
// shared memory) is the transport's business. A request with a mixture
// (mixture.go, mixture_stream.go, mixture_read.go) opens each source as
// its own dataset and reads, per source and slice, that source's stream
// through a batching.SourceCursor; each slice is handed over as its
// sources' rows of the step (views, batching.PartColumns), which the
// transport joins, or, on the shared-memory wire (OpenWith) where every
// column is fixed-width and nothing reshapes the rows (mixture_place.go),
// placed into the slices of their steps as the readers decode them (their
// pages decoded straight into the slices: format.Into), one record a
// slice.
//
// A column with pack "concat" (packconcat.go) is planned from every
// document's token count (package tokcount: the manifest's fact, the
// Pipeline's store, or counted once when planned, tokcount.go) with a
// batching.ConcatPlan, and streamed per slice from the documents holding
// its tokens, tokenized as they are read and packed into rows of exactly
// its length.
//
// A request's filters (package filter) are applied when it is planned
// (filter.go): the plan numbers the kept rows only, and streams take them
// from each decoded row group or piece before cutting (filter_take.go).
//
// A column with a tokenizer (tokenizer*.go) is read as token ids: its
// tokenizer is read and checked when the request is planned, and each
// slice's reader tokenizes the records it decodes (after taking the kept
// rows) before they are cut and shaped as list<int32>.
//
// It imports loader, batching, filter, tokcount, tokenize, shape,
// transport (for the Backend interface it implements and the wire's request
// type) and format (for format.Into, where a placed mixture's readers
// decode into); nothing below it imports feed. Its errors keep the sentinels of the
// package that found them;
// ErrorCodes is the one table from those sentinels to status codes.
//
// # Caveats
//
//   - A step's records belong to the caller of Next, who releases them. Slices
//     inside one row group are views of the decoded row group (no bytes
//     copied); the row group's memory returns to the allocator when the last
//     view is released, which for a step sent zero-copy is when gRPC has
//     written it.
//   - A row group larger than a slice's share of the read-ahead budget is
//     read in pieces of whole slices (budget.go), whose ends move to the
//     page breaks of the widest compressed column (snap.go: a page two
//     pieces cut is decompressed to scratch and copied out by both); a
//     slice that spans two pieces is then copied, like one that spans two
//     row groups (about one slice a piece). A request
//     whose slices cannot fit their share is refused at plan time
//     (transport.ErrFailedPrecondition) with the numbers. Elastic epochs
//     (pipeline_elastic.go) read whole row groups.
//   - Served (transport.LimitedBackend), a plan is also checked against the
//     server's limits: its step against the max message size, its stream's
//     memory against the memory budget (transport.ErrTooLarge); an opened
//     stream reserves that memory in the server's account until Close
//     (limits.go).
//   - Filters read the filter columns of the row groups the footers leave
//     undecided when the request is planned, under a reader of their own
//     (the read-ahead budget, at least loader.DefaultReadAhead) that the
//     memory account does not count; their selections are cached by file and
//     predicate (WithSelectionStore). A kept row group whose rows are one
//     run is a view; others are copied (fixed-width columns run by run, the
//     rest with arrow's Take).
//   - Next must not be called concurrently with itself or Close; Close is
//     called once, after the last Next returned.
package feed
