package tagging

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/crypto/argon2"
	"golang.org/x/crypto/chacha20poly1305"
)

// KDFParams are the Argon2id parameters that turn a passphrase into the
// key-encryption key. They are stored in the library's header, so a library
// keeps the parameters it was created (or last rekeyed) with.
type KDFParams struct {
	// Time is Argon2id's number of passes over the memory (t).
	Time uint32
	// MemoryKiB is the memory cost in KiB (m).
	MemoryKiB uint32
	// Threads is the degree of parallelism (p, the number of lanes).
	Threads uint8
}

// DefaultKDFParams returns the Argon2id parameters a new library uses unless
// CreateOptions says otherwise: t = 3 passes over m = 256 MiB with p = 4 lanes.
//
// Why these: RFC 9106 §4 recommends Argon2id with t = 1, m = 2 GiB, p = 4 where
// that much memory is available, and t = 3, m = 64 MiB, p = 4 where it is not.
// A library is unlocked once per command on a desktop or laptop that is at the
// same time running the face networks (several hundred MiB), so 2 GiB would
// make Veil fail on ordinary 8 GiB machines, and it costs 6.6 s of CPU per
// unlock here; 256 MiB with three passes costs an attacker four times the
// memory-time product of RFC 9106's second choice per guess, and costs the
// user 1.2 s of CPU per unlock (measured on the 2-core AMD EPYC development
// machine with golang.org/x/crypto v0.58.0: about 0.6 s of wall time when
// the machine is otherwise idle, as the lanes run on both cores; 64 MiB
// costs 0.19 s; see BenchmarkDeriveKEK). Four lanes is the RFC's choice;
// lanes beyond the cores run one after another, so p = 4 costs nothing in
// security on a 2-core machine and uses a 4-core one fully. The salt is 16
// random bytes (RFC 9106 recommends 128 bits).
func DefaultKDFParams() KDFParams {
	return KDFParams{Time: 3, MemoryKiB: 256 << 10, Threads: 4}
}

// Limits on stored KDF parameters: a damaged or hostile header must not make
// Open allocate unbounded memory or spin for hours.
const (
	maxKDFMemoryKiB = 4 << 20 // 4 GiB
	maxKDFTime      = 64
	saltLen         = 16
)

// validate reports whether p are usable Argon2id parameters within limits.
func (p KDFParams) validate() error {
	switch {
	case p.Time < 1 || p.Time > maxKDFTime:
		return fmt.Errorf("argon2id time cost %d outside 1..%d", p.Time, maxKDFTime)
	case p.Threads < 1:
		return errors.New("argon2id needs at least one lane")
	case p.MemoryKiB < 8*uint32(p.Threads):
		return fmt.Errorf("argon2id memory %d KiB below 8 KiB per lane", p.MemoryKiB)
	case p.MemoryKiB > maxKDFMemoryKiB:
		return fmt.Errorf("argon2id memory %d KiB above the %d KiB limit", p.MemoryKiB, maxKDFMemoryKiB)
	}
	return nil
}

// kdfHeader is what the library stores about its key: the Argon2id
// parameters and salt, and the data key wrapped by the key they derive.
type kdfHeader struct {
	params KDFParams
	salt   []byte
}

const kdfHeaderVersion = 1

// encode lays the header out as version byte, t (u32 LE), m (u32 LE),
// p (u8), salt length (u8) and the salt.
func (h kdfHeader) encode() []byte {
	b := make([]byte, 0, 11+len(h.salt))
	b = append(b, kdfHeaderVersion)
	b = binary.LittleEndian.AppendUint32(b, h.params.Time)
	b = binary.LittleEndian.AppendUint32(b, h.params.MemoryKiB)
	b = append(b, h.params.Threads, byte(len(h.salt)))
	return append(b, h.salt...)
}

// decodeKDFHeader parses stored header bytes, refusing anything malformed or
// beyond the limits.
func decodeKDFHeader(b []byte) (kdfHeader, error) {
	if len(b) < 11 {
		return kdfHeader{}, errors.New("key header too short")
	}
	if b[0] != kdfHeaderVersion {
		return kdfHeader{}, fmt.Errorf("key header version %d is not supported by this build", b[0])
	}
	h := kdfHeader{params: KDFParams{
		Time:      binary.LittleEndian.Uint32(b[1:]),
		MemoryKiB: binary.LittleEndian.Uint32(b[5:]),
		Threads:   b[9],
	}}
	n := int(b[10])
	if n != saltLen || len(b) != 11+n {
		return kdfHeader{}, errors.New("key header has a malformed salt")
	}
	if err := h.params.validate(); err != nil {
		return kdfHeader{}, fmt.Errorf("key header: %w", err)
	}
	h.salt = append([]byte(nil), b[11:]...)
	return h, nil
}

// deriveKEK runs Argon2id on the passphrase.
func deriveKEK(passphrase []byte, h kdfHeader) []byte {
	return argon2.IDKey(passphrase, h.salt, h.params.Time, h.params.MemoryKiB, h.params.Threads, chacha20poly1305.KeySize)
}

const (
	sealVersion = 1
	// sealOverhead is the size a sealed field adds to its plaintext: a
	// version byte, the 24-byte nonce and the 16-byte tag.
	sealOverhead = 1 + chacha20poly1305.NonceSizeX + chacha20poly1305.Overhead
	aadPrefix    = "veil/tagging/v1|"
)

// dekAAD binds the wrapped data key to the header it is stored with, so
// changed KDF parameters or salt make unwrapping fail instead of silently
// deriving another key.
func dekAAD(header []byte) []byte {
	return append([]byte(aadPrefix+"meta|dek|"), header...)
}

// sealWith encrypts plain under key with a fresh random nonce:
// version || nonce || ciphertext+tag.
func sealWith(key, plain, aad []byte) ([]byte, error) {
	aead, err := chacha20poly1305.NewX(key)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 1+chacha20poly1305.NonceSizeX, sealOverhead+len(plain))
	out[0] = sealVersion
	if _, err := rand.Read(out[1:]); err != nil {
		return nil, fmt.Errorf("reading random nonce: %w", err)
	}
	return aead.Seal(out, out[1:], plain, aad), nil
}

// openWith reverses sealWith; any damage, a wrong key or wrong AAD gives
// errUnauthentic.
func openWith(key, sealed, aad []byte) ([]byte, error) {
	if len(sealed) < sealOverhead || sealed[0] != sealVersion {
		return nil, errUnauthentic
	}
	aead, err := chacha20poly1305.NewX(key)
	if err != nil {
		return nil, err
	}
	nonce := sealed[1 : 1+chacha20poly1305.NonceSizeX]
	plain, err := aead.Open(nil, nonce, sealed[1+chacha20poly1305.NonceSizeX:], aad)
	if err != nil {
		return nil, errUnauthentic
	}
	return plain, nil
}

var errUnauthentic = errors.New("authentication failed")

// subKeys are the keys derived from the data key with HKDF-SHA256.
type subKeys struct {
	seal     []byte   // XChaCha20-Poly1305 key for sealed fields
	nameMAC  []byte   // HMAC-SHA256 key for name lookup
	content  []byte   // HMAC-SHA256 key of photos' content ids
	rowMAC   []byte   // HMAC-SHA256 key of the rows' plaintext columns
	setMAC   []byte   // HMAC-SHA256 key of the rows' contributions to the table sums
	rotation [32]byte // seed of the library's secret metric rotation
}

// HKDF labels. Changing one changes every key derived from it.
const (
	labelSeal     = "veil/tagging/v1 seal"
	labelNameMAC  = "veil/tagging/v1 name-index"
	labelRotation = "veil/tagging/v1 metric-rotation"
	labelContent  = "veil/tagging/v2 photo-content"
	labelRowMAC   = "veil/tagging/v2 row-mac"
	labelSetMAC   = "veil/tagging/v2 table-sum"
)

func deriveSubKeys(dek []byte) (subKeys, error) {
	var k subKeys
	var err error
	if k.seal, err = hkdf.Key(sha256.New, dek, nil, labelSeal, chacha20poly1305.KeySize); err != nil {
		return subKeys{}, err
	}
	if k.nameMAC, err = hkdf.Key(sha256.New, dek, nil, labelNameMAC, 32); err != nil {
		return subKeys{}, err
	}
	if k.content, err = hkdf.Key(sha256.New, dek, nil, labelContent, 32); err != nil {
		return subKeys{}, err
	}
	if k.rowMAC, err = hkdf.Key(sha256.New, dek, nil, labelRowMAC, 32); err != nil {
		return subKeys{}, err
	}
	if k.setMAC, err = hkdf.Key(sha256.New, dek, nil, labelSetMAC, 32); err != nil {
		return subKeys{}, err
	}
	rot, err := hkdf.Key(sha256.New, dek, nil, labelRotation, 32)
	if err != nil {
		return subKeys{}, err
	}
	copy(k.rotation[:], rot)
	clear(rot)
	return k, nil
}

func (k *subKeys) clear() {
	clear(k.seal)
	clear(k.nameMAC)
	clear(k.content)
	clear(k.rowMAC)
	clear(k.setMAC)
	clear(k.rotation[:])
}

// fieldAAD is the associated data a sealed field is bound to:
// "veil/tagging/v1|" + table + "|" + column + "|" + row id.
func fieldAAD(table, column string, row int64) []byte {
	b := make([]byte, 0, len(aadPrefix)+len(table)+len(column)+24)
	b = append(b, aadPrefix...)
	b = append(b, table...)
	b = append(b, '|')
	b = append(b, column...)
	b = append(b, '|')
	return strconv.AppendInt(b, row, 10)
}

// nameMAC is HMAC-SHA256 of a normalised name under the name-index key.
func (k *subKeys) mac(normalised string) []byte {
	m := hmac.New(sha256.New, k.nameMAC)
	m.Write([]byte(normalised))
	return m.Sum(nil)
}

// contentID is the id under which the library knows a photo's content:
// HMAC-SHA256 of the content's SHA-256 under the photo-content key. Without
// the key, hashing a candidate photo tells nothing about whether the
// library holds it. (MACing the digest rather than the bytes lets a
// migration or a rekey recompute it from the sealed digest, without the
// photo.)
func (k *subKeys) contentID(sum [32]byte) []byte {
	m := hmac.New(sha256.New, k.content)
	m.Write([]byte("veil/tagging/v2 photo|"))
	m.Write(sum[:])
	return m.Sum(nil)
}

// maxKeyFile bounds a key file's size.
const maxKeyFile = 64 << 10

// ReadKeyFile reads a passphrase from a file: its whole content with one
// trailing newline ("\n" or "\r\n") removed, so both `echo secret > key`
// and 32 random bytes work. It refuses an empty file, one over 64 KiB, and
// (on Unix) one that other users may read, as ssh does with private keys.
func ReadKeyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading the key file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("reading the key file: %w", err)
	}
	if runtime.GOOS != "windows" && st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("the key file %s can be read by other users (mode %04o): chmod 600 it", path, st.Mode().Perm())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, fmt.Errorf("reading the key file: %w", err)
	}
	if len(b) > maxKeyFile {
		return nil, fmt.Errorf("the key file %s is larger than %d bytes", path, maxKeyFile)
	}
	switch {
	case len(b) >= 2 && b[len(b)-2] == '\r' && b[len(b)-1] == '\n':
		b = b[:len(b)-2]
	case len(b) >= 1 && b[len(b)-1] == '\n':
		b = b[:len(b)-1]
	}
	if len(b) == 0 {
		return nil, fmt.Errorf("the key file %s is empty", path)
	}
	return b, nil
}
