package tokenize

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// model turns one pre-token into ids.
type model interface {
	encodeWord(sc *scratch, w string, dst []int32) []int32
	tokenID(tok string) (int32, bool)
	// size is the number of entries of the model's vocabulary.
	size() int
}

// Tokenizer encodes text as a tokenizer.json says. It is safe for concurrent
// use; each call borrows per-goroutine scratch space (buffers) from a pool,
// and every goroutine shares the BPE model's word cache (wordcache.go).
type Tokenizer struct {
	added      *addedSet // added tokens matched on the raw text (normalized: false)
	addedNorm  *addedSet // added tokens matched on normalized text (normalized: true)
	normalizer normalizer
	pre        []preTokenizer
	model      model
	// prefix and suffix are the post-processor's ids around a single sequence.
	prefix, suffix []int32
	// addedIDs and specialIDs map added tokens' contents to their ids.
	addedIDs, specialIDs map[string]int32
	// free holds idle scratch (its buffers grown to size), kept across garbage
	// collections, unlike a sync.Pool's.
	mu   sync.Mutex
	free []*scratch
	hash string
}

// scratch is the reusable state of one encoding goroutine.
type scratch struct {
	ar     arena  // normalized text and pre-tokenizers' new text, reset per Encode
	wordsA []word // pre-tokenizer input and output, swapped per step
	wordsB []word
	spans  []span     // matches of a span split
	buf    []byte     // WordPiece's "##" + candidate
	best   []bestNode // Unigram's lattice
	bpe    bpeScratch // BPE's merge state, and its claim on the word cache
	// outIDs and outEnds are EncodeBatch's output on this goroutine: ids and
	// each row's end in outIDs.
	outIDs  []int32
	outEnds []int64
}

func (t *Tokenizer) getScratch() *scratch {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(t.free); n > 0 {
		sc := t.free[n-1]
		t.free = t.free[:n-1]
		return sc
	}
	return &scratch{}
}

// mergedWords is the number of words the BPE model merged (not found in
// its word cache) on the idle scratch areas, for benchmarks.
func (t *Tokenizer) mergedWords() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, sc := range t.free {
		n += sc.bpe.merged
	}
	return n
}

func (t *Tokenizer) putScratch(sc *scratch) {
	t.mu.Lock()
	t.free = append(t.free, sc)
	t.mu.Unlock()
}

// Encode returns the ids of text: the ids that the reference library's
// Tokenizer.encode(text, add_special_tokens=addSpecial).ids gives.
func (t *Tokenizer) Encode(text string, addSpecial bool) ([]int32, error) {
	return t.AppendEncode(nil, text, addSpecial)
}

// AppendEncode appends the ids of text to dst.
func (t *Tokenizer) AppendEncode(dst []int32, text string, addSpecial bool) ([]int32, error) {
	if !utf8.ValidString(text) {
		return dst, ErrInvalidUTF8
	}
	sc := t.getScratch()
	dst = t.encode(sc, dst, text, addSpecial)
	t.putScratch(sc)
	return dst, nil
}

func (t *Tokenizer) encode(sc *scratch, dst []int32, text string, addSpecial bool) []int32 {
	sc.ar.reset()
	if addSpecial {
		dst = append(dst, t.prefix...)
	}
	t.added.split(text, func(start, end int, id int32) {
		if id >= 0 {
			dst = append(dst, id)
			return
		}
		dst = t.encodePiece(sc, dst, text[start:end], start == 0)
	})
	if addSpecial {
		dst = append(dst, t.suffix...)
	}
	return dst
}

// encodePiece normalizes text between raw added tokens, finds the normalized
// added tokens in it, and pre-tokenizes and encodes the rest.
func (t *Tokenizer) encodePiece(sc *scratch, dst []int32, s string, first bool) []int32 {
	if t.normalizer != nil {
		mark := len(sc.ar.buf)
		sc.ar.buf = t.normalizer.normalize(sc.ar.buf, s)
		s = sc.ar.str(mark)
	}
	if t.addedNorm == nil {
		return t.encodeWords(sc, dst, s, first)
	}
	t.addedNorm.split(s, func(start, end int, id int32) {
		if id >= 0 {
			dst = append(dst, id)
			return
		}
		dst = t.encodeWords(sc, dst, s[start:end], first && start == 0)
	})
	return dst
}

func (t *Tokenizer) encodeWords(sc *scratch, dst []int32, s string, first bool) []int32 {
	if s == "" {
		return dst
	}
	words := append(sc.wordsA[:0], word{s: s, first: first})
	other := sc.wordsB[:0]
	for _, p := range t.pre {
		other = p.split(sc, words, other[:0])
		words, other = other, words
	}
	for _, w := range words {
		dst = t.model.encodeWord(sc, w.s, dst)
	}
	sc.wordsA, sc.wordsB = words[:0], other[:0]
	return dst
}

// minChunkBytes is the least text EncodeBatch hands a worker at once.
const minChunkBytes = 8 << 10

// maxKeptIDs bounds the output buffer (ids) a scratch area keeps between
// EncodeBatch calls: 16 MiB.
const maxKeptIDs = 4 << 20

// EncodeBatch encodes n texts on up to workers goroutines (0: GOMAXPROCS)
// and appends their ids to values, each row's end offset to offsets (Arrow
// list layout: after each row, len(values); the caller starts offsets with
// the first row's start). On error values and offsets are as given. text
// returns row i; it is called from several goroutines. The result is the
// same for any number of workers.
func (t *Tokenizer) EncodeBatch(values []int32, offsets []int64, n, workers int, addSpecial bool, text func(i int) string) ([]int32, []int64, error) {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, n)
	if workers <= 1 {
		sc := t.getScratch()
		defer t.putScratch(sc)
		for i := range n {
			s := text(i)
			if !utf8.ValidString(s) {
				return values, offsets, fmt.Errorf("row %d: %w", i, ErrInvalidUTF8)
			}
			values = t.encode(sc, values, s, addSpecial)
			offsets = append(offsets, int64(len(values)))
		}
		return values, offsets, nil
	}
	return t.encodeChunks(values, offsets, n, workers, addSpecial, text)
}

// chunkBounds cuts rows [0, n) into chunks of consecutive rows for workers
// to claim: bounds[k] to bounds[k+1]. Chunks are cut by text bytes and
// shrink as the batch runs out (each about 1/(8*workers) of the bytes left,
// down to minChunkBytes), so that the workers finish close together: on a
// short batch a worker left idle while the other ends a large chunk is wall
// time lost.
func chunkBounds(n, workers int, text func(i int) string) []int {
	left := 0
	for i := range n {
		left += len(text(i))
	}
	bounds := make([]int, 1, 16*workers)
	for i, acc := 0, 0; i < n; i++ {
		acc += len(text(i))
		if acc >= max(minChunkBytes, left/(8*workers)) || i == n-1 {
			bounds = append(bounds, i+1)
			left -= acc
			acc = 0
		}
	}
	return bounds
}

// encodeChunks is EncodeBatch on several goroutines.
func (t *Tokenizer) encodeChunks(values []int32, offsets []int64, n, workers int, addSpecial bool, text func(i int) string) ([]int32, []int64, error) {
	// Rows go in chunks of consecutive rows that idle workers claim
	// (chunkBounds), joined in order. Each worker encodes into its scratch's
	// buffers (kept across calls: no new memory per call), returned only
	// after the join.
	bounds := chunkBounds(n, workers, text)
	type part struct {
		sc                       *scratch
		idLo, idHi, endLo, endHi int
		err                      error
	}
	parts := make([]part, len(bounds)-1)
	scs := make([]*scratch, workers)
	for g := range scs {
		scs[g] = t.getScratch()
		scs[g].outIDs, scs[g].outEnds = scs[g].outIDs[:0], scs[g].outEnds[:0]
	}
	defer func() {
		for _, sc := range scs {
			if cap(sc.outIDs) > maxKeptIDs { // a huge batch's buffers are not kept
				sc.outIDs, sc.outEnds = nil, nil
			}
			t.putScratch(sc)
		}
	}()
	var next atomic.Int64
	var wg sync.WaitGroup
	for _, sc := range scs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := int(next.Add(1) - 1)
				if k >= len(parts) {
					return
				}
				p := &parts[k]
				p.sc, p.idLo, p.endLo = sc, len(sc.outIDs), len(sc.outEnds)
				for i := bounds[k]; i < bounds[k+1]; i++ {
					s := text(i)
					if !utf8.ValidString(s) {
						p.err = fmt.Errorf("row %d: %w", i, ErrInvalidUTF8)
						break
					}
					sc.outIDs = t.encode(sc, sc.outIDs, s, addSpecial)
					sc.outEnds = append(sc.outEnds, int64(len(sc.outIDs)))
				}
				p.idHi, p.endHi = len(sc.outIDs), len(sc.outEnds)
			}
		}()
	}
	wg.Wait()
	total := 0
	for _, p := range parts {
		if p.err != nil {
			return values, offsets, p.err
		}
		total += p.idHi - p.idLo
	}
	values = slices.Grow(values, total)
	offsets = slices.Grow(offsets, n)
	for _, p := range parts {
		shift := int64(len(values) - p.idLo)
		values = append(values, p.sc.outIDs[p.idLo:p.idHi]...)
		for _, e := range p.sc.outEnds[p.endLo:p.endHi] {
			offsets = append(offsets, shift+e)
		}
	}
	return values, offsets, nil
}
