// Package desccache stores face descriptors on disk, keyed by the content of
// the image and the settings of the pipeline that computed them, so that a
// second run over the same photos is fast.
//
// Each entry is one small file written atomically (temporary file, fsync,
// rename), so an interrupted run never leaves a torn entry; a file that
// does not parse (a foreign or damaged file) is treated as a miss and
// overwritten.
package desccache

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
)

// EnvCache names the environment variable that overrides the cache folder.
const EnvCache = "VEIL_CACHE"

// Entry is what is cached for one image.
type Entry struct {
	// Descriptor is empty when no face could be described.
	Descriptor []float32
	// Fallback records that no face was detected and a fixed central box
	// was used instead.
	Fallback bool
	// LowScore records that the face was detected only below the
	// pipeline's usual score threshold.
	LowScore bool
	// SecondDetector records that the face came from the pipeline's second
	// detector (face.Face.SecondDetector).
	SecondDetector bool
}

// Cache is a folder of cached descriptors for one pipeline configuration.
type Cache struct {
	dir      string
	settings [32]byte
}

// DefaultDir returns $VEIL_CACHE, else the user's cache folder + /veil.
func DefaultDir() (string, error) {
	if d := os.Getenv(EnvCache); d != "" {
		return d, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("desccache: no cache folder (set --cache or %s): %w", EnvCache, err)
	}
	return filepath.Join(base, "veil"), nil
}

// Open returns the cache in dir for a pipeline described by settings (any
// string that changes whenever the descriptors would: detector, aligner,
// model hashes, code version).
func Open(dir, settings string) (*Cache, error) {
	if dir == "" {
		return nil, errors.New("desccache: empty cache folder")
	}
	if err := os.MkdirAll(filepath.Join(dir, "descriptors"), 0o755); err != nil {
		return nil, fmt.Errorf("desccache: %w", err)
	}
	return &Cache{dir: dir, settings: sha256.Sum256([]byte(settings))}, nil
}

// Key returns the cache key of an image's bytes under this cache's settings.
func (c *Cache) Key(image []byte) string {
	h := sha256.New()
	h.Write(c.settings[:])
	h.Write(image)
	return hex.EncodeToString(h.Sum(nil))
}

func (c *Cache) path(key string) string {
	return filepath.Join(c.dir, "descriptors", key[:2], key+".vdc")
}

// Get returns the entry for key, and whether it was present and intact.
func (c *Cache) Get(key string) (Entry, bool) {
	b, err := os.ReadFile(c.path(key))
	if err != nil {
		return Entry{}, false
	}
	e, err := Unmarshal(b)
	if err != nil {
		return Entry{}, false
	}
	return e, true
}

// Put stores the entry for key atomically.
func (c *Cache) Put(key string, e Entry) error {
	p := c.path(key)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("desccache: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".tmp-*")
	if err != nil {
		return fmt.Errorf("desccache: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if _, err := tmp.Write(Marshal(e)); err != nil {
		tmp.Close()
		return fmt.Errorf("desccache: writing entry: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("desccache: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("desccache: %w", err)
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return fmt.Errorf("desccache: %w", err)
	}
	return nil
}

// Entry file format, little-endian:
//
//	magic "VDC1" | flags uint8 (bit 0: fallback, bit 1: low score) | n uint16 | n × float32 | crc32 (IEEE) of all before
const magic = "VDC1"

// maxDims bounds a stored descriptor's length.
const maxDims = 4096

// ErrCorrupt is wrapped when an entry does not parse.
var ErrCorrupt = errors.New("corrupt descriptor cache entry")

// Marshal encodes an entry.
func Marshal(e Entry) []byte {
	b := make([]byte, 0, 4+1+2+4*len(e.Descriptor)+4)
	b = append(b, magic...)
	var flags uint8
	if e.Fallback {
		flags |= 1
	}
	if e.LowScore {
		flags |= 2
	}
	if e.SecondDetector {
		flags |= 4
	}
	b = append(b, flags)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(e.Descriptor)))
	for _, v := range e.Descriptor {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return binary.LittleEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
}

// Unmarshal decodes an entry, rejecting anything malformed.
func Unmarshal(b []byte) (Entry, error) {
	if len(b) < 4+1+2+4 || string(b[:4]) != magic {
		return Entry{}, fmt.Errorf("%w: bad header", ErrCorrupt)
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if crc32.ChecksumIEEE(body) != sum {
		return Entry{}, fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	flags := body[4]
	if flags&^7 != 0 {
		return Entry{}, fmt.Errorf("%w: unknown flags %#x", ErrCorrupt, flags)
	}
	n := int(binary.LittleEndian.Uint16(body[5:7]))
	if n > maxDims || len(body) != 7+4*n {
		return Entry{}, fmt.Errorf("%w: length does not match %d values", ErrCorrupt, n)
	}
	e := Entry{Fallback: flags&1 != 0, LowScore: flags&2 != 0, SecondDetector: flags&4 != 0}
	if n > 0 {
		e.Descriptor = make([]float32, n)
	}
	for i := range e.Descriptor {
		v := math.Float32frombits(binary.LittleEndian.Uint32(body[7+4*i:]))
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return Entry{}, fmt.Errorf("%w: value %d is not finite", ErrCorrupt, i)
		}
		e.Descriptor[i] = v
	}
	return e, nil
}
