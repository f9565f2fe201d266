package feed

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"

	"github.com/meshfeed/meshfeed/objstore"
	"github.com/meshfeed/meshfeed/tokenize"
)

// Tokenizers of string columns (DESIGN.md, "Tokenization"; PROTOCOL.md,
// the column's "tokenizer"): a tokenizer.json is read like data, through the
// Pipeline's store and under its roots, once per planned stream, and parsed
// at most once per content: the TokenizerCache keys the parsed Tokenizer by
// the file's SHA-256, so two streams (or GetFlightInfo then DoGet) naming
// the same file, or two copies of it, share one.

// MaxTokenizerBytes bounds the tokenizer.json a request may name (the
// largest files models ship are tens of MB).
const MaxTokenizerBytes = 256 << 20

// DefaultTokenizerCacheEntries is how many parsed tokenizers a Pipeline
// keeps (a parsed Llama 3 file holds tens of MB).
const DefaultTokenizerCacheEntries = 8

// TokenizerCache keeps parsed tokenizers by the SHA-256 of their file, least
// recently used evicted first. Concurrent Gets of the same content parse it
// once. Safe for concurrent use.
type TokenizerCache struct {
	mu    sync.Mutex
	max   int
	order *list.List // front = most recently used; values are *tokEntry
	items map[string]*list.Element

	parses int64 // files parsed (not found in the cache), for tests
}

type tokEntry struct {
	sum   string
	ready chan struct{} // closed when tok or err is set
	tok   *tokenize.Tokenizer
	err   error
}

// NewTokenizerCache returns a cache of at most maxEntries parsed tokenizers
// (values below 1 are taken as 1).
func NewTokenizerCache(maxEntries int) *TokenizerCache {
	return &TokenizerCache{max: max(maxEntries, 1), order: list.New(), items: map[string]*list.Element{}}
}

// Get reads the tokenizer.json at uri from store (a local path, gs://,
// s3://, az://, https://: whatever the store reads, under its roots), and
// returns it parsed and its SHA-256 in hex (tokenize.Tokenizer.Hash). The
// file is read on every call; it is parsed only when no tokenizer of the
// same bytes is cached. Errors name uri: a missing file wraps
// objstore.ErrNotFound, a file larger than MaxTokenizerBytes
// tokenize.ErrMalformed, a bad file tokenize.ErrMalformed or
// tokenize.ErrUnsupported with its JSON path.
func (c *TokenizerCache) Get(ctx context.Context, store objstore.Store, uri string) (*tokenize.Tokenizer, string, error) {
	data, err := readTokenizer(ctx, store, uri)
	if err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(data)
	key := hex.EncodeToString(sum[:])
	c.mu.Lock()
	if el, ok := c.items[key]; ok {
		c.order.MoveToFront(el)
		e := el.Value.(*tokEntry)
		c.mu.Unlock()
		<-e.ready
		if e.err != nil {
			// The same bytes fail the same way, but name this uri.
			return nil, "", reparseError(uri, data, e.err)
		}
		return e.tok, key, nil
	}
	e := &tokEntry{sum: key, ready: make(chan struct{})}
	c.items[key] = c.order.PushFront(e)
	for c.order.Len() > c.max {
		old := c.order.Back()
		c.order.Remove(old)
		delete(c.items, old.Value.(*tokEntry).sum)
	}
	c.parses++
	c.mu.Unlock()
	e.tok, e.err = tokenize.Parse(uri, data)
	if e.err != nil {
		// A bad file is not kept: fixed, it has other bytes anyway.
		c.mu.Lock()
		if el, ok := c.items[key]; ok && el.Value == e {
			c.order.Remove(el)
			delete(c.items, key)
		}
		c.mu.Unlock()
	}
	close(e.ready)
	if e.err != nil {
		return nil, "", e.err
	}
	return e.tok, key, nil
}

// Parses returns how many files the cache has parsed (calls of Get that
// found no tokenizer of the same bytes).
func (c *TokenizerCache) Parses() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.parses
}

// reparseError is the error of parsing data, named uri, when another Get of
// the same bytes failed with err while this one waited.
func reparseError(uri string, data []byte, err error) error {
	if _, perr := tokenize.Parse(uri, data); perr != nil {
		return perr
	}
	return err
}

// readTokenizer reads the whole object at uri.
func readTokenizer(ctx context.Context, store objstore.Store, uri string) ([]byte, error) {
	obj, err := store.Stat(ctx, uri)
	if err != nil {
		if errors.Is(err, objstore.ErrNotFound) {
			return nil, fmt.Errorf("tokenizer %s: %w: give the path or URI of a tokenizer.json the server can read (under its --allow roots)", uri, err)
		}
		return nil, fmt.Errorf("tokenizer %s: %w", uri, err)
	}
	if obj.Size > MaxTokenizerBytes {
		return nil, fmt.Errorf("tokenizer %s: %w: the file has %d bytes, over the limit of %d bytes for a tokenizer.json", uri, tokenize.ErrMalformed, obj.Size, MaxTokenizerBytes)
	}
	data := make([]byte, obj.Size)
	if err := store.ReadAt(ctx, obj, data, 0); err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", uri, err)
	}
	return data, nil
}

// tokenizer returns the tokenizer at uri, read through the Pipeline's store
// (under its roots), and its SHA-256.
func (p *Pipeline) tokenizer(ctx context.Context, uri string) (*tokenize.Tokenizer, string, error) {
	p.mu.Lock()
	store := p.cfg.store
	p.mu.Unlock()
	return p.cfg.tokenizers.Get(ctx, store, uri)
}
