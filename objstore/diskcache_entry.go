package objstore

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meshfeed/meshfeed/internal/bufpool"
)

// The entry files of a DiskCache. Each block is one file,
// DIR/<name[:2]>/<name>.mfc, where name is 32 hex digits of the SHA-256 of
// the object's CacheKey, the block's offset and its length. The file is a
// header and the block's bytes:
//
//	"MFC1" | CRC-32C of the bytes (uint32) | offset (uint64) | length (uint64) |
//	key length (uint32) | key | bytes
//
// all integers little-endian. A read checks every field against what it
// looks for, the file's size, and the checksum; any difference makes the
// entry corrupt. Entries are written as DIR/<name[:2]>/tmp-* and renamed
// into place.

const (
	entryMagic = "MFC1"
	entryExt   = ".mfc"
	entryFixed = 4 + 4 + 8 + 8 + 4 // header bytes before the key
	tempPrefix = "tmp-"
	nameDigits = 32
	tempMaxAge = time.Minute // temp files older than this at start are an interrupted write's
	// entryHeaderMax is what NewDiskCache allows for one entry's header
	// beside its block when it checks that the cache holds one.
	entryHeaderMax = 4 << 10
)

// errEntryCorrupt: an entry file does not hold what its name says.
var errEntryCorrupt = errors.New("corrupt cache entry")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// entryName returns the name of the entry of the block at off (n bytes) of
// the object version key.
func entryName(key string, off, n int64) string {
	h := sha256.New()
	h.Write([]byte(key))
	h.Write([]byte{0})
	h.Write([]byte(strconv.FormatInt(off, 10) + ":" + strconv.FormatInt(n, 10)))
	return hex.EncodeToString(h.Sum(nil))[:nameDigits]
}

// path returns the file of entry name.
func (c *DiskCache) path(name string) string {
	return filepath.Join(c.dir, name[:2], name+entryExt)
}

// readCacheEntry reads the entry file at path, which must hold the block at
// off (n bytes) of key, into dst (len n) or, when dst is nil, into a scratch
// buffer the caller returns with putScratch. An error wraps errEntryCorrupt
// when the file holds anything else, os.ErrNotExist when it is gone.
func readCacheEntry(path, key string, off, n int64, dst []byte) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	hlen := int64(entryFixed + len(key))
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() != hlen+n {
		return nil, fmt.Errorf("%s: %d bytes, want %d: %w", path, st.Size(), hlen+n, errEntryCorrupt)
	}
	hdr := make([]byte, hlen)
	if _, err := f.ReadAt(hdr, 0); err != nil {
		return nil, entryReadErr(path, err)
	}
	if string(hdr[:4]) != entryMagic ||
		int64(binary.LittleEndian.Uint64(hdr[8:])) != off ||
		int64(binary.LittleEndian.Uint64(hdr[16:])) != n ||
		int(binary.LittleEndian.Uint32(hdr[24:])) != len(key) ||
		string(hdr[entryFixed:]) != key {
		return nil, fmt.Errorf("%s: header is not that of %s [%d, %d): %w", path, key, off, off+n, errEntryCorrupt)
	}
	scratch := dst == nil
	if scratch {
		dst = bufpool.Get(n)[:n]
	}
	if _, err := f.ReadAt(dst, hlen); err != nil {
		if scratch {
			bufpool.Put(dst)
		}
		return nil, entryReadErr(path, err)
	}
	if crc32.Checksum(dst, castagnoli) != binary.LittleEndian.Uint32(hdr[4:]) {
		if scratch {
			bufpool.Put(dst)
		}
		return nil, fmt.Errorf("%s: checksum mismatch: %w", path, errEntryCorrupt)
	}
	return dst, nil
}

// entryReadErr is a failed read of an entry file: corrupt when the file was
// shorter than its size said (truncated meanwhile).
func entryReadErr(path string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%s: truncated: %w", path, errEntryCorrupt)
	}
	return err
}

// putScratch returns a buffer of readCacheEntry's.
func putScratch(b []byte) { bufpool.Put(b) }

// writeCacheEntry writes the entry of the block at off (data) of key to
// path, through a temporary file renamed into place, and returns the file's
// size.
func writeCacheEntry(path, key string, off int64, data []byte) (int64, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	tmp, err := os.CreateTemp(dir, tempPrefix+"*")
	if err != nil {
		return 0, err
	}
	hdr := make([]byte, entryFixed, entryFixed+len(key))
	copy(hdr, entryMagic)
	binary.LittleEndian.PutUint32(hdr[4:], crc32.Checksum(data, castagnoli))
	binary.LittleEndian.PutUint64(hdr[8:], uint64(off))
	binary.LittleEndian.PutUint64(hdr[16:], uint64(len(data)))
	binary.LittleEndian.PutUint32(hdr[24:], uint32(len(key)))
	hdr = append(hdr, key...)
	_, err = io.Copy(tmp, io.MultiReader(bytes.NewReader(hdr), bytes.NewReader(data)))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return 0, err
	}
	return int64(len(hdr) + len(data)), nil
}

// scannedEntry is an entry file found by scanCacheDir.
type scannedEntry struct {
	name  string
	size  int64
	mtime time.Time
}

// scanCacheDir lists the entry files under dir, least recently written
// first, and removes the temporary files of writes that were interrupted
// (those older than tempMaxAge: younger ones may be another process's
// writes in progress). Other files are left alone.
func scanCacheDir(dir string) ([]scannedEntry, error) {
	subs, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []scannedEntry
	now := time.Now()
	for _, sub := range subs {
		if !sub.IsDir() || len(sub.Name()) != 2 {
			continue
		}
		files, err := os.ReadDir(filepath.Join(dir, sub.Name()))
		if err != nil {
			return nil, err
		}
		for _, fe := range files {
			fn := fe.Name()
			info, err := fe.Info()
			if err != nil || !info.Mode().IsRegular() {
				continue // gone meanwhile, or not ours
			}
			switch {
			case strings.HasPrefix(fn, tempPrefix):
				if now.Sub(info.ModTime()) > tempMaxAge {
					os.Remove(filepath.Join(dir, sub.Name(), fn))
				}
			case len(fn) == nameDigits+len(entryExt) && strings.HasSuffix(fn, entryExt) && fn[:2] == sub.Name():
				out = append(out, scannedEntry{name: fn[:nameDigits], size: info.Size(), mtime: info.ModTime()})
			}
		}
	}
	slices.SortFunc(out, func(a, b scannedEntry) int { return a.mtime.Compare(b.mtime) })
	return out, nil
}
