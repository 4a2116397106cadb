package tagging

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/veil-privacy/veil/face"
)

// cheapKDF makes tests fast; real libraries use DefaultKDFParams.
var cheapKDF = CreateOptions{KDF: KDFParams{Time: 1, MemoryKiB: 64, Threads: 1}, TestSettings: true}

const testPass = "correct horse battery staple"

// testLibrary creates a library with cheap KDF parameters in a temporary
// folder; it is closed when the test ends. Other tests of the package may use
// it.
func testLibrary(t testing.TB) *Library {
	t.Helper()
	l, err := Create(t.TempDir(), []byte(testPass), cheapKDF)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Whatever the test did through the API, the library's
		// authenticated rows and sums still match (every write path
		// re-MACs what it touched).
		if _, edited := editedOutside.Load(l); !edited && l.dek != nil {
			if err := verifyIntegrity(context.Background(), l.db, &l.keys); err != nil {
				t.Errorf("after the test: %v", err)
			}
		}
		l.Close()
	})
	return l
}

// editedOutside holds the test libraries a test writes to outside the API
// on purpose (fault injection): testLibrary does not verify them after.
var editedOutside sync.Map

// editOutside marks l as written outside the API by the test.
func editOutside(l *Library) { editedOutside.Store(l, true) }

// testDescriptor is a deterministic 128-d descriptor.
func testDescriptor(seed int) []float32 {
	d := make([]float32, 128)
	for i := range d {
		d[i] = float32(math.Sin(float64(seed*131+i))) / 8
	}
	return d
}

func testLandmarks(seed int) *face.Landmarks {
	var lm face.Landmarks
	for i := range lm {
		lm[i] = [2]float64{float64(seed + i), float64(2*seed + i)}
	}
	return &lm
}

// addTestPhoto records a photo at path with n detected faces whose
// descriptors are testDescriptor(seed+k); it returns the face ids.
func addTestPhoto(t testing.TB, l *Library, path string, seed, n int) []int64 {
	t.Helper()
	var faces []NewFace
	for k := range n {
		faces = append(faces, NewFace{
			Box:        Box{X: float64(10 + 100*k), Y: 20, Width: 80, Height: 90},
			Score:      0.9,
			Fit:        0.1,
			Source:     Detected,
			Landmarks:  testLandmarks(seed + k),
			Descriptor: testDescriptor(seed + k),
			Thumbnail:  []byte(fmt.Sprintf("thumb-%d", seed+k)),
		})
	}
	_, ids, err := l.AddPhoto(PhotoRecord{Path: path, SHA256: sha256.Sum256([]byte(path)),
		Size: 1000, Taken: "2024-05-01T10:00:00", Width: 640, Height: 480}, faces)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	l, err := Create(dir, []byte(testPass), cheapKDF)
	if err != nil {
		t.Fatal(err)
	}
	ids := addTestPhoto(t, l, "/photos/a.jpg", 1, 2)
	if _, err := l.NameFaces(ids[:1], "Ada Lovelace"); err != nil {
		t.Fatal(err)
	}
	seed := l.RotationSeed()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	l, err = Open(dir, []byte(testPass))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.RotationSeed() != seed {
		t.Error("the rotation seed changed on reopening")
	}
	fs, err := l.Faces(FaceFilter{Descriptors: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 2 {
		t.Fatalf("%d faces, want 2", len(fs))
	}
	for k, f := range fs {
		if f.ID != ids[k] || f.Photo != "/photos/a.jpg" || f.Source != Detected || f.Box.X != float64(10+100*k) {
			t.Errorf("face %d = %+v", k, f)
		}
		want := testDescriptor(1 + k)
		for i := range want {
			if f.Descriptor[i] != want[i] {
				t.Fatalf("face %d descriptor[%d] = %v, want %v", k, i, f.Descriptor[i], want[i])
			}
		}
	}
	if fs[0].Person != "Ada Lovelace" || fs[0].AssignedBy != ByUser || fs[1].Person != "" {
		t.Errorf("people: %q by %q, %q", fs[0].Person, fs[0].AssignedBy, fs[1].Person)
	}
	// Landmarks and thumbnails round-trip through their sealed columns.
	var lmSealed, thumbSealed []byte
	if err := l.db.QueryRow(`SELECT landmarks, thumbnail FROM faces WHERE id = ?`, ids[1]).Scan(&lmSealed, &thumbSealed); err != nil {
		t.Fatal(err)
	}
	plain, err := l.Unseal("faces", "landmarks", ids[1], lmSealed)
	if err != nil {
		t.Fatal(err)
	}
	lm, err := DecodeLandmarks(plain)
	if err != nil || lm != *testLandmarks(2) {
		t.Errorf("landmarks: %v", err)
	}
	thumb, err := l.Unseal("faces", "thumbnail", ids[1], thumbSealed)
	if err != nil || string(thumb) != "thumb-2" {
		t.Errorf("thumbnail %q, %v", thumb, err)
	}
}

func TestCreateAndOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(dir, []byte(testPass)); !errors.Is(err, ErrNoLibrary) {
		t.Errorf("Open of an empty folder: %v, want ErrNoLibrary", err)
	}
	if _, err := Create(dir, nil, cheapKDF); !errors.Is(err, ErrEmptyPassphrase) {
		t.Errorf("Create with no passphrase: %v", err)
	}
	if _, err := Create(dir, []byte("x"), CreateOptions{KDF: KDFParams{Time: 1, MemoryKiB: 1 << 30, Threads: 1}}); err == nil {
		t.Error("Create accepted 1 TiB of Argon2 memory")
	}
	l, err := Create(dir, []byte(testPass), cheapKDF)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if _, err := Create(dir, []byte(testPass), cheapKDF); !errors.Is(err, ErrExists) {
		t.Errorf("second Create: %v, want ErrExists", err)
	}
	st, err := os.Stat(filepath.Join(dir, DBFile))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		t.Errorf("library file mode %04o readable by others", st.Mode().Perm())
	}
	// The failed Create must not have damaged the first library.
	l, err = Open(dir, []byte(testPass))
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
}

func TestWrongPassphrase(t *testing.T) {
	dir := t.TempDir()
	l, err := Create(dir, []byte(testPass), cheapKDF)
	if err != nil {
		t.Fatal(err)
	}
	addTestPhoto(t, l, "/p.jpg", 1, 1)
	l.Close()
	for _, p := range []string{"correct horse battery stapl", "Correct horse battery staple", testPass + " "} {
		l, err := Open(dir, []byte(p))
		if !errors.Is(err, ErrWrongPassphrase) {
			if l != nil {
				l.Close()
			}
			t.Errorf("Open(%q): %v, want ErrWrongPassphrase", p, err)
		}
	}
	if _, err := Open(dir, nil); !errors.Is(err, ErrEmptyPassphrase) {
		t.Errorf("Open with no passphrase: %v", err)
	}
}

// An attacker who can write the file changes the stored Argon2 parameters
// (to make guessing cheaper for the next unlock, say) or the salt: the
// right passphrase no longer opens the library (a clear error, not another
// key). Argon2id's output depends on every parameter, and the wrapped key is
// also bound to the header bytes as associated data; either alone makes this
// test pass (checked by removing the binding).
func TestKeyHeaderTamperRefused(t *testing.T) {
	dir := t.TempDir()
	l, err := Create(dir, []byte(testPass), cheapKDF)
	if err != nil {
		t.Fatal(err)
	}
	db := l.db
	var hdr []byte
	if err := db.QueryRow(`SELECT value FROM meta WHERE key = 'kdf'`).Scan(&hdr); err != nil {
		t.Fatal(err)
	}
	l.Close()
	for name, mutate := range map[string]func([]byte){
		"time": func(b []byte) { b[1]++ },
		"salt": func(b []byte) { b[len(b)-1] ^= 1 },
	} {
		t.Run(name, func(t *testing.T) {
			b := bytes.Clone(hdr)
			mutate(b)
			setRawMeta(t, dir, "kdf", b)
			defer setRawMeta(t, dir, "kdf", hdr)
			if _, err := Open(dir, []byte(testPass)); !errors.Is(err, ErrWrongPassphrase) {
				t.Errorf("Open after changing the header's %s: %v, want ErrWrongPassphrase", name, err)
			}
		})
	}
	l, err = Open(dir, []byte(testPass))
	if err != nil {
		t.Fatalf("the restored header does not open: %v", err)
	}
	l.Close()
}

func setRawMeta(t *testing.T, dir, key string, value []byte) {
	t.Helper()
	db, err := openDB(filepath.Join(dir, DBFile))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE meta SET value = ? WHERE key = ?`, value, key); err != nil {
		t.Fatal(err)
	}
}

// The adversary reads the library's files (database and WAL) from disk and
// looks for a name, a descriptor and a thumbnail in the clear.
func TestNothingIdentifyingInTheClear(t *testing.T) {
	dir := t.TempDir()
	l, err := Create(dir, []byte(testPass), cheapKDF)
	if err != nil {
		t.Fatal(err)
	}
	ids := addTestPhoto(t, l, "/p.jpg", 7, 1)
	const name = "Zebulon Quixotic-Marchbanks"
	if _, err := l.NameFaces(ids, name); err != nil {
		t.Fatal(err)
	}
	desc := EncodeDescriptor(testDescriptor(7))[1:]
	check := func() {
		t.Helper()
		var all []byte
		for _, f := range []string{DBFile, DBFile + "-wal"} {
			b, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			all = append(all, b...)
		}
		if len(all) < 4096 {
			t.Fatalf("read only %d bytes of the library", len(all))
		}
		for what, secret := range map[string][]byte{
			"name": []byte(name), "folded name": []byte(strings.ToLower(name)),
			"descriptor": desc[:32], "thumbnail": []byte("thumb-7"),
		} {
			if bytes.Contains(all, secret) {
				t.Errorf("the %s is in the clear in the library's files", what)
			}
		}
		// The search itself must be able to find what is there.
		if !bytes.Contains(all, []byte("/p.jpg")) {
			t.Error("the adversary's search does not even find the plain path")
		}
	}
	check()
	l.Close()
	check()
}

func TestTamperedCiphertextRefused(t *testing.T) {
	l := testLibrary(t)
	ids := addTestPhoto(t, l, "/p.jpg", 1, 1)
	p, err := l.NameFaces(ids, "Ada")
	if err != nil {
		t.Fatal(err)
	}
	db := l.db
	var desc, name []byte
	if err := db.QueryRow(`SELECT descriptor FROM faces WHERE id = ?`, ids[0]).Scan(&desc); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT name FROM people WHERE id = ?`, p.ID).Scan(&name); err != nil {
		t.Fatal(err)
	}
	for i := range len(desc) {
		for _, bit := range []byte{1, 0x80} {
			b := bytes.Clone(desc)
			b[i] ^= bit
			if _, err := l.Unseal("faces", "descriptor", ids[0], b); !errors.Is(err, ErrTampered) {
				t.Fatalf("descriptor with byte %d flipped: %v, want ErrTampered", i, err)
			}
		}
	}
	for _, b := range [][]byte{nil, desc[:len(desc)-1], desc[:sealOverhead-1], append(bytes.Clone(desc), 0)} {
		if _, err := l.Unseal("faces", "descriptor", ids[0], b); !errors.Is(err, ErrTampered) {
			t.Errorf("descriptor of %d bytes: %v, want ErrTampered", len(b), err)
		}
	}
	// Through the API: a damaged stored descriptor and name are refused.
	bad := bytes.Clone(desc)
	bad[len(bad)-1] ^= 1
	if _, err := db.Exec(`UPDATE faces SET descriptor = ? WHERE id = ?`, bad, ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Faces(FaceFilter{Descriptors: true}); !errors.Is(err, ErrTampered) {
		t.Errorf("Faces with a tampered descriptor: %v, want ErrTampered", err)
	}
	bad = bytes.Clone(name)
	bad[30] ^= 4
	if _, err := db.Exec(`UPDATE people SET name = ? WHERE id = ?`, bad, p.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := l.People(); !errors.Is(err, ErrTampered) {
		t.Errorf("People with a tampered name: %v, want ErrTampered", err)
	}
}

// The adversary cannot read the fields but can move them: swapping two
// people's sealed names would relabel every face, copying a descriptor to
// another face would make it match someone else. Both are refused.
func TestMovedCiphertextRefused(t *testing.T) {
	l := testLibrary(t)
	a := addTestPhoto(t, l, "/a.jpg", 1, 1)
	b := addTestPhoto(t, l, "/b.jpg", 2, 1)
	pa, err := l.NameFaces(a, "Alice")
	if err != nil {
		t.Fatal(err)
	}
	pb, err := l.NameFaces(b, "Bob")
	if err != nil {
		t.Fatal(err)
	}
	db := l.db
	var nameA, descA, thumbA []byte
	if err := db.QueryRow(`SELECT name FROM people WHERE id = ?`, pa.ID).Scan(&nameA); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT descriptor, thumbnail FROM faces WHERE id = ?`, a[0]).Scan(&descA, &thumbA); err != nil {
		t.Fatal(err)
	}
	// Moved to another row.
	if _, err := l.Unseal("people", "name", pb.ID, nameA); !errors.Is(err, ErrTampered) {
		t.Errorf("Alice's name unsealed as Bob's row: %v", err)
	}
	if _, err := l.Unseal("faces", "descriptor", b[0], descA); !errors.Is(err, ErrTampered) {
		t.Errorf("a descriptor unsealed in another face's row: %v", err)
	}
	// Moved to another column or table.
	if _, err := l.Unseal("faces", "thumbnail", a[0], descA); !errors.Is(err, ErrTampered) {
		t.Errorf("a descriptor unsealed as a thumbnail: %v", err)
	}
	if _, err := l.Unseal("people", "descriptor", a[0], descA); !errors.Is(err, ErrTampered) {
		t.Errorf("a descriptor unsealed under another table: %v", err)
	}
	// Through the API, after the adversary's copy in the file.
	if _, err := db.Exec(`UPDATE people SET name = ? WHERE id = ?`, nameA, pb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Faces(FaceFilter{}); !errors.Is(err, ErrTampered) {
		t.Errorf("Faces after copying Alice's name onto Bob: %v, want ErrTampered", err)
	}
	if _, err := db.Exec(`UPDATE faces SET descriptor = ? WHERE id = ?`, descA, b[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Faces(FaceFilter{Photo: "/b.jpg", Descriptors: true, Removed: true}); !errors.Is(err, ErrTampered) {
		t.Errorf("Faces after copying a descriptor: %v, want ErrTampered", err)
	}
}

// A field sealed by one library does not open in another, even at the same
// table, column and row: each library has its own random data key.
func TestOtherLibrariesCiphertextRefused(t *testing.T) {
	l1, l2 := testLibrary(t), testLibrary(t)
	s, err := l1.Seal("faces", "descriptor", 1, []byte("secret"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l2.Unseal("faces", "descriptor", 1, s); !errors.Is(err, ErrTampered) {
		t.Errorf("another library's field: %v, want ErrTampered", err)
	}
	if l1.RotationSeed() == l2.RotationSeed() {
		t.Error("two libraries share their rotation seed")
	}
	// Sealing twice gives different ciphertexts (random nonces).
	s2, err := l1.Seal("faces", "descriptor", 1, []byte("secret"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(s, s2) || bytes.Equal(s[1:25], s2[1:25]) {
		t.Error("two seals of one value share a nonce")
	}
}

func TestRekey(t *testing.T) {
	dir := t.TempDir()
	l, err := Create(dir, []byte(testPass), cheapKDF)
	if err != nil {
		t.Fatal(err)
	}
	ids := addTestPhoto(t, l, "/p.jpg", 3, 1)
	if _, err := l.NameFaces(ids, "Grace"); err != nil {
		t.Fatal(err)
	}
	seed := l.RotationSeed()
	l.Close()

	if err := Rekey(dir, []byte("wrong"), []byte("new pass"), cheapKDF); !errors.Is(err, ErrWrongPassphrase) {
		t.Fatalf("Rekey with a wrong old passphrase: %v", err)
	}
	if err := Rekey(dir, []byte(testPass), nil, cheapKDF); !errors.Is(err, ErrEmptyPassphrase) {
		t.Fatalf("Rekey to an empty passphrase: %v", err)
	}
	newOpt := CreateOptions{KDF: KDFParams{Time: 2, MemoryKiB: 128, Threads: 2}, TestSettings: true}
	if err := Rekey(dir, []byte(testPass), []byte("new pass"), newOpt); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, []byte(testPass)); !errors.Is(err, ErrWrongPassphrase) {
		t.Errorf("the old passphrase after rekeying: %v, want ErrWrongPassphrase", err)
	}
	l, err = Open(dir, []byte("new pass"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.RotationSeed() != seed {
		t.Error("rekeying changed the data key")
	}
	fs, err := l.Faces(FaceFilter{Descriptors: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 1 || fs[0].Person != "Grace" || fs[0].Descriptor[5] != testDescriptor(3)[5] {
		t.Errorf("data after rekeying: %+v", fs)
	}
	h, _, _, err := readHeader(t.Context(), l.db)
	if err != nil {
		t.Fatal(err)
	}
	if h.params != newOpt.KDF {
		t.Errorf("header params %+v, want %+v", h.params, newOpt.KDF)
	}
}

var updateFixture = flag.Bool("update-fixture", false, "rewrite testdata/store-v1.sql")

const fixturePass = "fixture passphrase"

// TestStoreV1Fixture writes testdata/store-v1.sql (with -update-fixture): a
// library at schema version 1, as the first release made them.
func TestStoreV1Fixture(t *testing.T) {
	if !*updateFixture {
		t.Skip("run with -update-fixture to rewrite testdata/store-v1.sql")
	}
	dir := t.TempDir()
	l, err := create(t.Context(), dir, []byte(fixturePass), cheapKDF, 1, deriveKEK)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ids := addTestPhoto(t, l, "/photos/fixture.jpg", 11, 2)
	if _, err := l.NameFaces(ids[:1], "Ada Lovelace"); err != nil {
		t.Fatal(err)
	}
	if err := l.RejectFace(ids[1], "Ada Lovelace"); err != nil {
		t.Fatal(err)
	}
	dump, err := dumpSQL(l.db)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("testdata", "store-v1.sql"), []byte(dump), 0o644); err != nil {
		t.Fatal(err)
	}
}

// dumpSQL writes the database's tables and rows as SQL statements.
func dumpSQL(db *sql.DB) (string, error) {
	rows, err := db.Query(`SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid`)
	if err != nil {
		return "", err
	}
	type table struct{ name, sql string }
	var tables []table
	for rows.Next() {
		var tb table
		if err := rows.Scan(&tb.name, &tb.sql); err != nil {
			return "", err
		}
		tables = append(tables, tb)
	}
	rows.Close()
	var b strings.Builder
	for _, tb := range tables {
		fmt.Fprintf(&b, "%s;\n", tb.sql)
		r, err := db.Query(`SELECT * FROM ` + tb.name + ` ORDER BY rowid`)
		if err != nil {
			return "", err
		}
		cols, _ := r.Columns()
		for r.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := r.Scan(ptrs...); err != nil {
				r.Close()
				return "", err
			}
			lits := make([]string, len(vals))
			for i, v := range vals {
				switch v := v.(type) {
				case nil:
					lits[i] = "NULL"
				case []byte:
					lits[i] = "X'" + hex.EncodeToString(v) + "'"
				case string:
					lits[i] = "'" + strings.ReplaceAll(v, "'", "''") + "'"
				default:
					lits[i] = fmt.Sprint(v)
				}
			}
			fmt.Fprintf(&b, "INSERT INTO %s VALUES (%s);\n", tb.name, strings.Join(lits, ", "))
		}
		r.Close()
	}
	return b.String(), nil
}

// A library made at schema version 1 (testdata/store-v1.sql, written by
// TestStoreV1Fixture) opens with its passphrase, is migrated to the current
// version, and keeps its data: names, decisions and descriptors.
func TestMigrateFromV1(t *testing.T) {
	script, err := os.ReadFile(filepath.Join("testdata", "store-v1.sql"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, DBFile)
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := openDB(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(string(script)); err != nil {
		t.Fatal(err)
	}
	if v, err := schemaVersion(t.Context(), db); err != nil || v != 1 {
		t.Fatalf("fixture schema version %d, %v; want 1", v, err)
	}
	db.Close()

	if _, err := Open(dir, []byte("not the fixture's")); !errors.Is(err, ErrWrongPassphrase) {
		t.Errorf("fixture with a wrong passphrase: %v", err)
	}
	l, err := Open(dir, []byte(fixturePass))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if v, err := schemaVersion(t.Context(), l.db); err != nil || v != SchemaVersion {
		t.Fatalf("schema version after Open %d, %v; want %d", v, err, SchemaVersion)
	}
	fs, err := l.Faces(FaceFilter{Descriptors: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 2 || fs[0].Person != "Ada Lovelace" || fs[0].AssignedBy != ByUser || fs[1].Person != "" {
		t.Fatalf("migrated faces: %+v", fs)
	}
	for k, f := range fs {
		if want := testDescriptor(11 + k); f.Descriptor[17] != want[17] {
			t.Errorf("face %d descriptor changed", k)
		}
	}
	rej, err := l.Rejections()
	if err != nil {
		t.Fatal(err)
	}
	if len(rej[fs[1].ID]) != 1 {
		t.Errorf("rejections after migration: %v", rej)
	}
	// Version 3's file stamps are unknown for the photos recorded before:
	// the next run reads those files once more.
	var unstamped, all int
	if err := l.db.QueryRow(`SELECT count(*) FILTER (WHERE mtime IS NULL AND inode IS NULL), count(*) FROM photos`).Scan(&unstamped, &all); err != nil || all == 0 || unstamped != all {
		t.Errorf("photos without a stamp after migration: %d of %d, %v", unstamped, all, err)
	}
	// Version 2's tables are there and usable.
	if err := l.inTx(t.Context(), func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO clusters (face_id, cluster) VALUES (?, 1)`, fs[1].ID)
		return err
	}); err != nil {
		t.Errorf("clusters table after migration: %v", err)
	}
	// Version 4 keyed the photo's content id and sealed its digest.
	if p, err := l.PhotoByPath("/photos/fixture.jpg"); err != nil || p.SHA256 != sha256.Sum256([]byte("/photos/fixture.jpg")) {
		t.Errorf("the fixture's photo after migration: %x, %v", p.SHA256, err)
	}
	// Reopening is a no-op.
	l.Close()
	l2, err := Open(dir, []byte(fixturePass))
	if err != nil {
		t.Fatal(err)
	}
	l2.Close()
}

func TestNewerSchemaRefused(t *testing.T) {
	dir := t.TempDir()
	l, err := Create(dir, []byte(testPass), cheapKDF)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	setRawMeta(t, dir, metaSchema, []byte(fmt.Sprint(SchemaVersion+1)))
	if _, err := Open(dir, []byte(testPass)); err == nil || !strings.Contains(err.Error(), "newer veil") {
		t.Errorf("Open of a newer library: %v", err)
	}
}

func TestReadKeyFile(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name    string
		content string
		mode    os.FileMode
		want    string // "" means an error
	}{
		{"newline", "secret\n", 0o600, "secret"},
		{"crlf", "secret\r\n", 0o600, "secret"},
		{"no newline", "secret", 0o400, "secret"},
		{"only one newline removed", "secret\n\n", 0o600, "secret\n"},
		{"spaces kept", " secret ", 0o600, " secret "},
		{"empty", "", 0o600, ""},
		{"just a newline", "\n", 0o600, ""},
		{"world readable", "secret", 0o644, ""},
		{"group readable", "secret", 0o640, ""},
		{"too large", strings.Repeat("x", maxKeyFile+1), 0o600, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if err := os.WriteFile(p, []byte(tc.content), tc.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, tc.mode); err != nil {
				t.Fatal(err)
			}
			got, err := ReadKeyFile(p)
			if tc.want == "" {
				if err == nil {
					t.Errorf("read %q, want an error", got)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Errorf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	if _, err := ReadKeyFile(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing key file was read")
	}
}

// FuzzReadKeyFile checks that any key file content within the size limit
// reads back as itself less one trailing "\n" or "\r\n", and that an empty
// result or an oversized file is an error, never a passphrase.
func FuzzReadKeyFile(f *testing.F) {
	for _, s := range []string{"secret\n", "secret\r\n", "\n", "\r\n", "", "\r", "a\n\n", "\x00\xff"} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, content []byte) {
		p := filepath.Join(dir, "key")
		if err := os.WriteFile(p, content, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := ReadKeyFile(p)
		want := content
		switch {
		case bytes.HasSuffix(want, []byte("\r\n")):
			want = want[:len(want)-2]
		case bytes.HasSuffix(want, []byte("\n")):
			want = want[:len(want)-1]
		}
		if len(want) == 0 || len(content) > maxKeyFile {
			if err == nil {
				t.Fatalf("ReadKeyFile(%q) = %q, want an error", content, got)
			}
			return
		}
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("ReadKeyFile(%q) = %q, %v; want %q", content, got, err, want)
		}
	})
}

func TestDescriptorEncoding(t *testing.T) {
	d := testDescriptor(4)
	got, err := DecodeDescriptor(EncodeDescriptor(d))
	if err != nil {
		t.Fatal(err)
	}
	for i := range d {
		if got[i] != d[i] {
			t.Fatalf("component %d: %v, want %v", i, got[i], d[i])
		}
	}
	nan := EncodeDescriptor([]float32{1, float32(math.NaN())})
	inf := EncodeDescriptor([]float32{float32(math.Inf(1))})
	for name, b := range map[string][]byte{
		"empty": nil, "version only": {1}, "wrong version": append([]byte{2}, EncodeDescriptor(d)[1:]...),
		"ragged": EncodeDescriptor(d)[:10], "nan": nan, "inf": inf,
		"too long": EncodeDescriptor(make([]float32, MaxDescriptorDim+1)),
	} {
		if _, err := DecodeDescriptor(b); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

func FuzzDecodeDescriptor(f *testing.F) {
	f.Add(EncodeDescriptor(testDescriptor(1)))
	f.Add([]byte{1})
	f.Add([]byte{1, 0, 0, 0x80, 0x7f})
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := DecodeDescriptor(b)
		if err != nil {
			return
		}
		if !bytes.Equal(EncodeDescriptor(d), b) {
			t.Fatal("decoded descriptor does not re-encode to its bytes")
		}
	})
}

func FuzzDecodeLandmarks(f *testing.F) {
	f.Add(EncodeLandmarks(testLandmarks(1)))
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		lm, err := DecodeLandmarks(b)
		if err != nil {
			return
		}
		if !bytes.Equal(EncodeLandmarks(&lm), b) {
			t.Fatal("decoded landmarks do not re-encode to their bytes")
		}
	})
}

func FuzzDecodeKDFHeader(f *testing.F) {
	f.Add(kdfHeader{params: DefaultKDFParams(), salt: make([]byte, saltLen)}.encode())
	f.Add(kdfHeader{params: cheapKDF.KDF, salt: make([]byte, saltLen)}.encode())
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 16})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeKDFHeader(b)
		if err != nil {
			return
		}
		if h.params.validate() != nil || h.params.MemoryKiB > maxKDFMemoryKiB || len(h.salt) != saltLen {
			t.Fatalf("accepted out-of-limit header %+v", h.params)
		}
		if !bytes.Equal(h.encode(), b) {
			t.Fatal("decoded header does not re-encode to its bytes")
		}
	})
}

// FuzzUnseal: no stored bytes other than a genuine seal authenticate, and
// nothing panics. The seed corpus holds a genuine seal and its mutations.
func FuzzUnseal(f *testing.F) {
	key := bytes.Repeat([]byte{7}, 32)
	aad := fieldAAD("faces", "descriptor", 3)
	// A fixed nonce, so every fuzzing process builds the same genuine seal.
	aead, err := chacha20poly1305.NewX(key)
	if err != nil {
		f.Fatal(err)
	}
	genuine := append([]byte{sealVersion}, make([]byte, chacha20poly1305.NonceSizeX)...)
	genuine = aead.Seal(genuine, genuine[1:], []byte("plain"), aad)
	if p, err := openWith(key, genuine, aad); err != nil || string(p) != "plain" {
		f.Fatalf("the genuine seal does not open: %v", err)
	}
	f.Add(genuine)
	f.Add(genuine[:len(genuine)-1])
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		plain, err := openWith(key, b, aad)
		if err != nil {
			if !errors.Is(err, errUnauthentic) {
				t.Fatalf("error %v is not an authentication failure", err)
			}
			return
		}
		if !bytes.Equal(b, genuine) || string(plain) != "plain" {
			t.Fatalf("forged bytes %x authenticated", b)
		}
	})
}

// BenchmarkDeriveKEK measures one unlock's Argon2id with the default
// parameters (what every command that opens a library pays once).
func BenchmarkDeriveKEK(b *testing.B) {
	h := kdfHeader{params: DefaultKDFParams(), salt: make([]byte, saltLen)}
	for b.Loop() {
		deriveKEK([]byte(testPass), h)
	}
}

// BenchmarkSealDescriptor measures sealing one 128-d descriptor.
func BenchmarkSealDescriptor(b *testing.B) {
	l := testLibrary(b)
	d := EncodeDescriptor(testDescriptor(1))
	for b.Loop() {
		if _, err := l.Seal("faces", "descriptor", 1, d); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUnsealDescriptor measures unsealing and decoding one descriptor
// (what reading every face's descriptor costs per face).
func BenchmarkUnsealDescriptor(b *testing.B) {
	l := testLibrary(b)
	s, err := l.Seal("faces", "descriptor", 1, EncodeDescriptor(testDescriptor(1)))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := l.descriptor(1, s); err != nil {
			b.Fatal(err)
		}
	}
}

// The reason to rekey is often a passphrase that leaked. The adversary knows
// the old passphrase and gets the library's files after the rekey: the old
// wrapped key must be gone from them (database, WAL and free space), or the
// old passphrase would still unwrap the data key.
func TestRekeyLeavesNoOldWrappedKey(t *testing.T) {
	dir := t.TempDir()
	l, err := Create(dir, []byte(testPass), cheapKDF)
	if err != nil {
		t.Fatal(err)
	}
	addTestPhoto(t, l, "/p.jpg", 1, 2)
	var oldDEK []byte
	if err := l.db.QueryRow(`SELECT value FROM meta WHERE key = 'dek'`).Scan(&oldDEK); err != nil {
		t.Fatal(err)
	}
	// Another process (a long `veil library add`, say) has the library open
	// during the rekey, so closing the rekeying handle does not remove the WAL.
	defer l.Close()
	if err := Rekey(dir, []byte(testPass), []byte("new pass"), cheapKDF); err != nil {
		t.Fatal(err)
	}
	var all []byte
	for _, f := range []string{DBFile, DBFile + "-wal"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	// The nonce and the start of the ciphertext are enough to find it.
	if bytes.Contains(all, oldDEK[:32]) {
		t.Error("the old wrapped data key is still in the library's files after rekeying")
	}
}

// A person merged away is deleted, and secure_delete overwrites the deleted
// row: an adversary who later learns the data key finds no trace of the
// deleted name in the files.
func TestDeletedRowsOverwritten(t *testing.T) {
	dir := t.TempDir()
	l, err := Create(dir, []byte(testPass), cheapKDF)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ids := addTestPhoto(t, l, "/p.jpg", 1, 2)
	from, err := l.NameFaces(ids[:1], "Misspelt Nmae")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.NameFaces(ids[1:], "Right Name"); err != nil {
		t.Fatal(err)
	}
	var sealed []byte
	if err := l.db.QueryRow(`SELECT name FROM people WHERE id = ?`, from.ID).Scan(&sealed); err != nil {
		t.Fatal(err)
	}
	if err := l.MergePeople("Misspelt Nmae", "Right Name"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, DBFile))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, sealed[:32]) {
		t.Error("the deleted person's sealed name is still in the database file")
	}
}

// TestNoRawDatabaseAccess plays a caller outside the package that wants to
// bypass sealing and the user-outranks-automatic rule with raw SQL: no
// exported method of Library may hand out the database, a transaction or a
// connection.
func TestNoRawDatabaseAccess(t *testing.T) {
	raw := map[reflect.Type]bool{
		reflect.TypeFor[*sql.DB]():   true,
		reflect.TypeFor[*sql.Tx]():   true,
		reflect.TypeFor[*sql.Conn](): true,
	}
	typ := reflect.TypeFor[*Library]()
	for i := range typ.NumMethod() {
		m := typ.Method(i)
		for k := range m.Type.NumOut() {
			if raw[m.Type.Out(k)] {
				t.Errorf("(*Library).%s returns %v: callers could write the database around the library's rules", m.Name, m.Type.Out(k))
			}
		}
	}
}

// TestCheckIntegrity: a sound library passes; one whose face points at a
// photo that is not there (written with foreign keys off, as a damaged or
// hand-edited file could be) is reported.
func TestCheckIntegrity(t *testing.T) {
	l := testLibrary(t)
	ids := addTestPhoto(t, l, "/a.jpg", 1, 1)
	if err := l.CheckIntegrity(t.Context()); err != nil {
		t.Fatalf("a sound library: %v", err)
	}
	editOutside(l)
	conn, err := l.db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{`PRAGMA foreign_keys = OFF`, `UPDATE faces SET photo_id = 999 WHERE id = ` + fmt.Sprint(ids[0]), `PRAGMA foreign_keys = ON`} {
		if _, err := conn.ExecContext(t.Context(), q); err != nil {
			t.Fatal(err)
		}
	}
	err = l.CheckIntegrity(t.Context())
	if err == nil || !strings.Contains(err.Error(), "faces") || !strings.Contains(err.Error(), "photos") {
		t.Errorf("a face of a missing photo: %v", err)
	}
}

// countingKDF is deriveKEK counting its calls.
func countingKDF(n *int) kdfFunc {
	return func(p []byte, h kdfHeader) []byte {
		*n++
		return deriveKEK(p, h)
	}
}

// TestRekeyDerivesEachKeyOnce counts the Argon2id derivations of a rekey:
// one for the old passphrase (the unlock) and one for the new, whether the
// caller opens the library and then rekeys it (as veil library rekey does,
// to check the current passphrase before asking for a new one) or calls
// Rekey. Rekey derived the old passphrase's key twice before, and veil
// library rekey, which opened the library first, three times.
func TestRekeyDerivesEachKeyOnce(t *testing.T) {
	dir := t.TempDir()
	l, err := Create(dir, []byte("first"), cheapKDF)
	if err != nil {
		t.Fatal(err)
	}
	addTestPhoto(t, l, "/p.jpg", 3, 1)
	l.Close()

	n := 0
	l, err = open(t.Context(), dir, []byte("first"), countingKDF(&n))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Rekey([]byte("second"), cheapKDF); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if n != 2 {
		t.Errorf("open and rekey derived %d keys, want 2", n)
	}
	n = 0
	if err := rekey(t.Context(), dir, []byte("second"), []byte("third"), cheapKDF, countingKDF(&n)); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("Rekey derived %d keys, want 2", n)
	}
	for _, old := range []string{"first", "second"} {
		if _, err := Open(dir, []byte(old)); !errors.Is(err, ErrWrongPassphrase) {
			t.Errorf("the old passphrase %q after rekeying: %v", old, err)
		}
	}
	l, err = Open(dir, []byte("third"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if fs, err := l.Faces(FaceFilter{Descriptors: true}); err != nil || len(fs) != 1 {
		t.Errorf("faces after two rekeys: %v, %v", fs, err)
	}
}

// TestRekeyRefusesStaleHeader plays two programs that unlocked the
// library with the same passphrase: the first changes it; the second, still
// holding the old unlock, must not overwrite that change with its own.
func TestRekeyRefusesStaleHeader(t *testing.T) {
	dir := t.TempDir()
	l, err := Create(dir, []byte("shared"), cheapKDF)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	a, err := Open(dir, []byte("shared"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(dir, []byte("shared"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := a.Rekey([]byte("a's"), cheapKDF); err != nil {
		t.Fatal(err)
	}
	if err := b.Rekey([]byte("b's"), cheapKDF); !errors.Is(err, ErrRekeyedMeanwhile) {
		t.Fatalf("rekeying from a stale unlock: %v, want ErrRekeyedMeanwhile", err)
	}
	if _, err := Open(dir, []byte("b's")); !errors.Is(err, ErrWrongPassphrase) {
		t.Errorf("the stale rekey's passphrase opens the library: %v", err)
	}
	l, err = Open(dir, []byte("a's"))
	if err != nil {
		t.Fatalf("the first rekey's passphrase: %v", err)
	}
	l.Close()
	// The program that rekeyed may rekey again (its header is current).
	if err := a.Rekey([]byte("a's second"), cheapKDF); err != nil {
		t.Errorf("a second rekey by the same program: %v", err)
	}
	a.Close()
	if err := a.Rekey([]byte("x"), cheapKDF); err == nil {
		t.Error("rekeying a closed library succeeded")
	}
}

// TestKeyPolicy (issue 19 item 7.4): Create, Rekey and RotateKey refuse a
// new passphrase under MinPassphraseRunes characters and Argon2id costs
// under MinKDFParams, unless the options ask for test settings; the
// minimum itself passes. A refused call changes nothing.
func TestKeyPolicy(t *testing.T) {
	minKDF := CreateOptions{KDF: MinKDFParams()}
	cheap := CreateOptions{KDF: cheapKDF.KDF}
	for _, tc := range []struct {
		name string
		pass string
		opt  CreateOptions
		want error
	}{
		{"short passphrase", "nine char", minKDF, ErrWeakPassphrase},
		{"short in characters, long in bytes", "ééééééééé", minKDF, ErrWeakPassphrase},
		{"cheap costs", testPass, cheap, ErrWeakKDF},
		{"little memory, many passes", testPass, CreateOptions{KDF: KDFParams{Time: 64, MemoryKiB: 32 << 10, Threads: 1}}, ErrWeakKDF},
		{"too few passes", testPass, CreateOptions{KDF: KDFParams{Time: 2, MemoryKiB: 64 << 10, Threads: 1}}, ErrWeakKDF},
		{"the minimum", "ten chars!", minKDF, nil},
		{"test settings", "x", CreateOptions{KDF: cheapKDF.KDF, TestSettings: true}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "lib")
			l, err := Create(dir, []byte(tc.pass), tc.opt)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Create: %v, want %v", err, tc.want)
			}
			if err == nil {
				l.Close()
				return
			}
			if _, err := os.Stat(dir); err == nil {
				t.Error("a refused Create made the folder")
			}
			// Rekey and RotateKey apply the same rules to the new key.
			base := filepath.Join(t.TempDir(), "base")
			l, err = Create(base, []byte(testPass), cheapKDF)
			if err != nil {
				t.Fatal(err)
			}
			l.Close()
			if err := Rekey(base, []byte(testPass), []byte(tc.pass), tc.opt); !errors.Is(err, tc.want) {
				t.Errorf("Rekey: %v, want %v", err, tc.want)
			}
			if err := RotateKey(t.Context(), base, []byte(testPass), func() ([]byte, error) { return []byte(tc.pass), nil }, tc.opt, nil); !errors.Is(err, tc.want) {
				t.Errorf("RotateKey: %v, want %v", err, tc.want)
			}
			l, err = Open(base, []byte(testPass))
			if err != nil {
				t.Fatalf("the refused rekeys changed the library: %v", err)
			}
			l.Close()
		})
	}
}
