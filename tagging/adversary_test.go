package tagging

import (
	"bytes"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha3"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// unkeyedDigests are what an adversary holding a candidate photo can
// compute without the library's key: its common unkeyed hashes, raw, in
// hex (both cases) and in base64.
func unkeyedDigests(content []byte) map[string][]byte {
	s256 := sha256.Sum256(content)
	s1 := sha1.Sum(content)
	s512 := sha512.Sum512(content)
	s224 := sha256.Sum224(content)
	s384 := sha512.Sum384(content)
	m5 := md5.Sum(content)
	s3 := sha3.Sum256(content)
	raw := map[string][]byte{
		"sha256": s256[:], "sha1": s1[:], "sha512": s512[:], "sha224": s224[:],
		"sha384": s384[:], "md5": m5[:], "sha3-256": s3[:],
	}
	out := map[string][]byte{}
	for name, d := range raw {
		out[name] = d
		out[name+" hex"] = []byte(hex.EncodeToString(d))
		out[name+" HEX"] = []byte(strings.ToUpper(hex.EncodeToString(d)))
		out[name+" base64"] = []byte(base64.StdEncoding.EncodeToString(d))
		// A prefix, as tools print shortened hashes.
		out[name+" prefix"] = d[:12]
	}
	return out
}

// libraryFiles reads the library's database and its journal files, as an
// adversary who copied the folder has them.
func libraryFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, suffix := range []string{"", "-wal", "-shm"} {
		b, err := os.ReadFile(filepath.Join(dir, DBFile+suffix))
		if err == nil {
			out[DBFile+suffix] = b
		} else if !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	return out
}

// TestAdversaryCannotTestPhotoMembership plays the adversary of issue 19
// item 7.1: with the library's files but not its passphrase, and a
// candidate photo, hashing the photo (SHA-256 or any common unkeyed hash)
// finds nothing in the files, neither while the library is open nor after
// it is closed. The library itself still knows the photo (the positive
// control: the test looks for what the store writes). Before the photo's
// id was keyed (photos.sha256 held the plain SHA-256) this failed.
func TestAdversaryCannotTestPhotoMembership(t *testing.T) {
	dir := t.TempDir()
	l, err := Create(dir, []byte(testPass), cheapKDF)
	if err != nil {
		t.Fatal(err)
	}
	photos := make([][]byte, 3)
	for i := range photos {
		photos[i] = make([]byte, 5000)
		rand.Read(photos[i])
		if _, _, err := l.AddPhoto(PhotoRecord{Path: filepath.Join("/photos", string(rune('a'+i))+".jpg"),
			SHA256: sha256.Sum256(photos[i]), Size: 5000, Width: 10, Height: 10}, nil); err != nil {
			t.Fatal(err)
		}
	}
	check := func(when string) {
		t.Helper()
		for name, file := range libraryFiles(t, dir) {
			for i, p := range photos {
				for h, d := range unkeyedDigests(p) {
					if bytes.Contains(file, d) {
						t.Errorf("%s: the %s of photo %d is in %s: an adversary can tell the library holds it", when, h, i, name)
					}
				}
			}
		}
	}
	check("open")
	// Positive control: the library recognises its photos' content.
	ps, err := l.Photos()
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range ps {
		if p.SHA256 != sha256.Sum256(photos[i]) {
			t.Errorf("photo %d's digest as the library reads it: %x", i, p.SHA256)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	check("closed")
}

// TestMigrationRekeysPhotoHashes: a library of schema version 3 (plain
// SHA-256 per photo) is migrated at unlock; afterwards no plain digest is
// left in the files (the journal was emptied, secure_delete overwrote the
// old index entries), the photos keep their digests as the library reads
// them, and finding a photo by content still works.
func TestMigrationRekeysPhotoHashes(t *testing.T) {
	dir := t.TempDir()
	l, err := create(t.Context(), dir, []byte(testPass), cheapKDF, 3, deriveKEK)
	if err != nil {
		t.Fatal(err)
	}
	content := []byte("the bytes of a photo at schema version 3")
	sum := sha256.Sum256(content)
	if _, err := l.db.Exec(`INSERT INTO photos (path, sha256, size, width, height, added_at) VALUES ('/p/v3.jpg', ?, 40, 1, 1, 0)`, sum[:]); err != nil {
		t.Fatal(err)
	}
	l.Close()
	found := false
	for _, f := range libraryFiles(t, dir) {
		found = found || bytes.Contains(f, sum[:])
	}
	if !found {
		t.Fatal("the version 3 library does not hold the plain digest: the test sees nothing")
	}

	l, err = Open(dir, []byte(testPass))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for name, f := range libraryFiles(t, dir) {
		if bytes.Contains(f, sum[:]) {
			t.Errorf("the plain SHA-256 is still in %s after the migration", name)
		}
	}
	p, err := l.PhotoByPath("/p/v3.jpg")
	if err != nil {
		t.Fatal(err)
	}
	if p.SHA256 != sum {
		t.Errorf("digest after the migration %x, want %x", p.SHA256, sum)
	}
	var id int64
	if err := l.db.QueryRow(`SELECT id FROM photos WHERE content_mac = ?`, l.keys.contentID(sum)).Scan(&id); err != nil || id != p.ID {
		t.Errorf("finding the photo by its keyed content id: %d, %v", id, err)
	}
}
