// Package desccache stores face descriptors on disk, keyed by the content of
// the image and the settings of the pipeline that computed them, so that a
// second run over the same photos is fast.
//
// Each entry is one small file written atomically (internal/atomicfile:
// temporary file, fsync, rename, fsync of the folder), so an interrupted run never leaves a torn entry; a file that
// does not parse (a foreign or damaged file) is treated as a miss and
// overwritten.
//
// # Faceprints at rest
//
// A descriptor is a faceprint: it identifies the person in the photo. The
// cache therefore keeps its entries private to the user who runs Veil and
// does not let anyone test whether a given photo was processed:
//
//   - Entries live in the folder descriptors-v2 of the cache folder, which
//     is made mode 0700 on every Open; its sub-folders are created 0700 and
//     entry files 0600, set explicitly so the umask does not matter. A
//     cache folder Open creates is 0700 too; an existing one (say $VEIL_CACHE
//     pointing at a shared folder) keeps its mode, which is safe because
//     nothing private sits directly in it except the key file, 0600.
//   - Entry names are keyed: HMAC-SHA256(key, SHA-256(settings) ‖
//     SHA-256(image)) in hex, where key is 32 bytes from crypto/rand made
//     once per cache folder (one install) and kept in the file cache.key,
//     mode 0600, beside the entries. Knowing a photo and the naming rule
//     is not enough to find (or rule out) its entry; two installs name the
//     same photo differently. Open refuses a key file that is damaged
//     (not exactly 32 bytes, or all zero) or that other users can read.
//
// Entry contents are not encrypted: the key sits beside them, so encryption
// would stop no one who can read the folder, which the modes above already
// restrict to the user (and root).
//
// # Caches written by earlier versions
//
// Earlier versions kept world-readable entries (folders 0755, files 0644)
// named by an unkeyed hash in the folder descriptors. They are never read
// again: the first run after upgrading recomputes every descriptor. Open
// restricts that old folder to mode 0700 when it can, so its faceprints are
// no longer readable by other users, but does not delete it. Remove it with
//
//	rm -rf "${VEIL_CACHE:-$HOME/.cache/veil}/descriptors"
//
// (the user's cache folder is ~/.cache on Linux and ~/Library/Caches on
// macOS).
package desccache

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"

	"github.com/veil-privacy/veil/internal/atomicfile"
	"github.com/veil-privacy/veil/internal/digest"
)

// EnvCache names the environment variable that overrides the cache folder.
const EnvCache = "VEIL_CACHE"

// Names inside the cache folder.
const (
	// entriesDir holds the keyed entries.
	entriesDir = "descriptors-v2"
	// legacyDir held the unkeyed, world-readable entries of earlier
	// versions.
	legacyDir = "descriptors"
	// keyFile holds the install's 32-byte naming key.
	keyFile = "cache.key"
)

// KeySize is the length in bytes of the per-install naming key.
const KeySize = 32

// Modes of what the cache creates.
const (
	dirMode  fs.FileMode = 0o700
	fileMode fs.FileMode = 0o600
)

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
// It is safe for concurrent use.
type Cache struct {
	dir      string
	key      []byte
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
// model hashes, code version). It creates dir (mode 0700) if needed, the
// entries folder (mode 0700) and, on first use, the install's naming key;
// see the package documentation.
func Open(dir, settings string) (*Cache, error) {
	if dir == "" {
		return nil, errors.New("desccache: empty cache folder")
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := makePrivateDir(dir, true); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, fmt.Errorf("desccache: %w", err)
	}
	if err := makePrivateDir(filepath.Join(dir, entriesDir), false); err != nil {
		return nil, err
	}
	// Best effort: an old cache's faceprints stop being readable by other
	// users. Failing (say the folder belongs to someone else) changes
	// nothing for this cache, whose entries are elsewhere.
	_ = os.Chmod(filepath.Join(dir, legacyDir), dirMode)
	key, err := loadOrCreateKey(filepath.Join(dir, keyFile))
	if err != nil {
		return nil, err
	}
	return &Cache{dir: dir, key: key, settings: sha256.Sum256([]byte(settings))}, nil
}

// makePrivateDir creates dir with mode 0700 (and its parents when parents
// is set) if it is missing, and sets its mode to exactly 0700 either way.
func makePrivateDir(dir string, parents bool) error {
	var err error
	if parents {
		err = os.MkdirAll(dir, dirMode)
	} else if err = os.Mkdir(dir, dirMode); errors.Is(err, fs.ErrExist) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("desccache: %w", err)
	}
	if err := os.Chmod(dir, dirMode); err != nil {
		return fmt.Errorf("desccache: %w", err)
	}
	return nil
}

// loadOrCreateKey reads the naming key at path, creating it first if there
// is none.
func loadOrCreateKey(path string) ([]byte, error) {
	key, err := readKey(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return key, err
	}
	if err := createKey(path); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	// Either this call created the key or a concurrent one did first; both
	// publish the file complete, so read it back.
	return readKey(path)
}

// readKey reads and checks the naming key. A missing file gives an error
// wrapping fs.ErrNotExist.
func readKey(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("desccache: reading the cache key: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("desccache: reading the cache key: %w", err)
	}
	remedy := fmt.Sprintf("remove the cache folder %s (it is rebuilt on the next run)", filepath.Dir(path))
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("desccache: cache key %s is not a regular file; %s", path, remedy)
	}
	if runtime.GOOS != "windows" && st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("desccache: cache key %s can be read by other users (mode %#o), so cached photos could be recognised by name; %s", path, st.Mode().Perm(), remedy)
	}
	key, err := io.ReadAll(io.LimitReader(f, KeySize+1))
	if err != nil {
		return nil, fmt.Errorf("desccache: reading the cache key: %w", err)
	}
	if len(key) != KeySize {
		return nil, fmt.Errorf("desccache: cache key %s is damaged (%d bytes, want %d); %s", path, len(key), KeySize, remedy)
	}
	if bytes.Equal(key, make([]byte, KeySize)) {
		return nil, fmt.Errorf("desccache: cache key %s is damaged (all zero); %s", path, remedy)
	}
	return key, nil
}

// createKey writes a fresh key and publishes it at path with
// atomicfile.Create (a private temporary file, fsynced, hard-linked to
// path, then the folder fsynced), which fails with fs.ErrExist if path
// exists: the key appears complete or not at all, survives a crash once
// created, and of two racing processes exactly one key wins.
func createKey(path string) error {
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return fmt.Errorf("desccache: making the cache key: %w", err)
	}
	err := atomicfile.CreateFile(path, key, fileMode)
	clear(key)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return err
		}
		return fmt.Errorf("desccache: making the cache key: %w", err)
	}
	return nil
}

// Key returns the cache key of an image's bytes under this cache's settings:
// HMAC-SHA256 under the install's key of the settings' and the image's
// SHA-256, in hex.
func (c *Cache) Key(image []byte) string {
	img := digest.Sum256(image)
	m := hmac.New(sha256.New, c.key)
	m.Write(c.settings[:])
	m.Write(img[:])
	return hex.EncodeToString(m.Sum(nil))
}

// validKey reports whether key has the form Key returns (so it cannot
// name a path outside the cache).
func validKey(key string) bool {
	if len(key) != 2*sha256.Size {
		return false
	}
	_, err := hex.DecodeString(key)
	return err == nil
}

func (c *Cache) path(key string) string {
	return filepath.Join(c.dir, entriesDir, key[:2], key+".vdc")
}

// Get returns the entry for key, and whether it was present and intact.
// A key not made by Key is a miss.
func (c *Cache) Get(key string) (Entry, bool) {
	if !validKey(key) {
		return Entry{}, false
	}
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

// Put stores the entry for key atomically, readable by the user only.
func (c *Cache) Put(key string, e Entry) error {
	if !validKey(key) {
		return errors.New("desccache: malformed entry key (not made by Cache.Key)")
	}
	p := c.path(key)
	if err := makePrivateDir(filepath.Dir(p), false); err != nil {
		return err
	}
	if err := atomicfile.WriteFile(p, Marshal(e), fileMode); err != nil {
		return fmt.Errorf("desccache: writing entry: %w", err)
	}
	return nil
}

// Entry file format, little-endian:
//
//	magic "VDC1" | flags uint8 (bit 0: fallback, bit 1: low score, bit 2: second detector) | n uint16 | n × float32 | crc32 (IEEE) of all before
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
