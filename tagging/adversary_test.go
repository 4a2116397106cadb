package tagging

import (
	"bytes"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha3"
	"crypto/sha512"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/tagging/cluster"
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

// tamperFixture is a closed library where suggestions depend on the
// plaintext structure: Ada is named on two faces of one photo; face
// nearAda, in another photo, is all but Ada's descriptor but the user
// rejected Ada for it, so nothing is suggested for it; face other is
// unnamed and unlike anyone.
type tamperFixture struct {
	dir                 string
	ada                 int64
	adaFaces            []int64
	nearAda, otherFace  int64
	nearAdaBox          Box
	clusteredFace       int64
	adaPhoto, nearPhoto int64
}

func newTamperFixture(t *testing.T) tamperFixture {
	t.Helper()
	dir := t.TempDir()
	l, err := Create(dir, []byte(testPass), cheapKDF)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	face := func(seed int, x float64) NewFace {
		return NewFace{Box: Box{X: x, Y: 20, Width: 80, Height: 90}, Score: 0.9, Source: Detected,
			Landmarks: testLandmarks(seed), Descriptor: testDescriptor(seed)}
	}
	fx := tamperFixture{dir: dir}
	fx.adaPhoto, fx.adaFaces, err = l.AddPhoto(PhotoRecord{Path: "/p/ada.jpg", SHA256: sha256.Sum256([]byte("ada")), Size: 1, Width: 640, Height: 480},
		[]NewFace{face(1, 10), face(1, 200)})
	if err != nil {
		t.Fatal(err)
	}
	near := face(1, 300)
	near.Descriptor[0] += 0.01
	fx.nearAdaBox = near.Box
	var ids []int64
	fx.nearPhoto, ids, err = l.AddPhoto(PhotoRecord{Path: "/p/near.jpg", SHA256: sha256.Sum256([]byte("near")), Size: 1, Width: 640, Height: 480},
		[]NewFace{near, face(50, 10)})
	if err != nil {
		t.Fatal(err)
	}
	fx.nearAda, fx.otherFace = ids[0], ids[1]
	p, err := l.NameFaces(fx.adaFaces, "Ada")
	if err != nil {
		t.Fatal(err)
	}
	fx.ada = p.ID
	// Without the rejection, Ada is suggested for nearAda (the control).
	sugs, err := l.Suggestions(DefaultSuggestOptions())
	if err != nil {
		t.Fatal(err)
	}
	if !suggests(sugs, fx.nearAda, fx.ada) {
		t.Fatalf("the fixture does not suggest Ada for the face near hers: %+v", sugs)
	}
	if err := l.RejectFace(fx.nearAda, "Ada"); err != nil {
		t.Fatal(err)
	}
	if sugs, err = l.Suggestions(DefaultSuggestOptions()); err != nil || suggests(sugs, fx.nearAda, fx.ada) {
		t.Fatalf("Ada is suggested for the face rejected for her: %+v, %v", sugs, err)
	}
	co, err := NewClusterOptions(cluster.ChineseWhispers)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.UpdateClusters(t.Context(), co, true); err != nil {
		t.Fatal(err)
	}
	cl, err := l.StoredClusters()
	if err != nil || len(cl) == 0 {
		t.Fatalf("clusters %v, %v", cl, err)
	}
	for f := range cl {
		fx.clusteredFace = f
	}
	return fx
}

func suggests(sugs []LibrarySuggestion, face, person int64) bool {
	for _, s := range sugs {
		if s.Face == face && s.Person == person {
			return true
		}
	}
	return false
}

// rawDB opens the library's SQLite file directly, with the same driver,
// as an adversary with the file (and sqlite3) would: no key, no Veil.
func rawDB(t *testing.T, dir string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, DBFile)+"?mode=rw")
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func rawExec(t *testing.T, db *sql.DB, q string, args ...any) {
	t.Helper()
	res, err := db.Exec(q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	if n, _ := res.RowsAffected(); n == 0 && !strings.HasPrefix(q, "CREATE") {
		t.Fatalf("%s changed no row: the edit is not an edit", q)
	}
}

// TestAdversaryEditsAreDetected plays the adversary of issue 19 item 7.2:
// with the library file but not the key, they edit the plaintext
// structure with SQLite directly. Each edit is refused by the next Open
// (ErrModified), so suggestions never run on forged data. Before the rows
// were authenticated each edit was believed: (a) and (b) changed the
// suggestions (the test fails with the checks removed from Open).
func TestAdversaryEditsAreDetected(t *testing.T) {
	cases := []struct {
		name string
		edit func(t *testing.T, db *sql.DB, fx tamperFixture)
	}{
		{"a: change a face's person_id", func(t *testing.T, db *sql.DB, fx tamperFixture) {
			rawExec(t, db, `UPDATE faces SET person_id = ?, assigned_by = 'user' WHERE id = ?`, fx.ada, fx.otherFace)
		}},
		{"b: delete a rejection", func(t *testing.T, db *sql.DB, fx tamperFixture) {
			rawExec(t, db, `DELETE FROM rejections WHERE face_id = ?`, fx.nearAda)
		}},
		{"c: move a box", func(t *testing.T, db *sql.DB, fx tamperFixture) {
			rawExec(t, db, `UPDATE faces SET x = x + 40 WHERE id = ?`, fx.nearAda)
		}},
		{"d: swap two rows' MACs", func(t *testing.T, db *sql.DB, fx tamperFixture) {
			rawExec(t, db, `UPDATE faces SET mac = CASE id WHEN ?1 THEN (SELECT mac FROM faces WHERE id = ?2)
				ELSE (SELECT mac FROM faces WHERE id = ?1) END WHERE id IN (?1, ?2)`, fx.nearAda, fx.otherFace)
		}},
		{"swap two faces' person ids with their MACs", func(t *testing.T, db *sql.DB, fx tamperFixture) {
			rawExec(t, db, `UPDATE faces SET (person_id, assigned_by, mac) = (SELECT f.person_id, f.assigned_by, f.mac FROM faces f
				WHERE f.id = CASE faces.id WHEN ?1 THEN ?2 ELSE ?1 END) WHERE id IN (?1, ?2)`, fx.adaFaces[0], fx.otherFace)
		}},
		{"delete a whole face", func(t *testing.T, db *sql.DB, fx tamperFixture) {
			rawExec(t, db, `DELETE FROM faces WHERE id = ?`, fx.otherFace)
		}},
		{"delete a cluster row", func(t *testing.T, db *sql.DB, fx tamperFixture) {
			rawExec(t, db, `DELETE FROM clusters WHERE face_id = ?`, fx.clusteredFace)
		}},
		{"hide a person", func(t *testing.T, db *sql.DB, fx tamperFixture) {
			rawExec(t, db, `UPDATE people SET hidden = 1 WHERE id = ?`, fx.ada)
		}},
		{"copy a rejection row with its MAC to another face", func(t *testing.T, db *sql.DB, fx tamperFixture) {
			rawExec(t, db, `INSERT INTO rejections (face_id, person_id, mac) SELECT ?, person_id, mac FROM rejections WHERE face_id = ?`, fx.otherFace, fx.nearAda)
		}},
		{"move a face to another photo", func(t *testing.T, db *sql.DB, fx tamperFixture) {
			rawExec(t, db, `UPDATE faces SET photo_id = ? WHERE id = ?`, fx.adaPhoto, fx.nearAda)
		}},
		{"change a photo's path", func(t *testing.T, db *sql.DB, fx tamperFixture) {
			rawExec(t, db, `UPDATE photos SET path = '/p/elsewhere.jpg' WHERE id = ?`, fx.nearPhoto)
		}},
		{"add a trigger", func(t *testing.T, db *sql.DB, fx tamperFixture) {
			rawExec(t, db, `CREATE TRIGGER evil AFTER UPDATE ON faces BEGIN UPDATE faces SET removed = 1 WHERE id = NEW.id; END`)
		}},
		{"empty the sealed sums", func(t *testing.T, db *sql.DB, fx tamperFixture) {
			rawExec(t, db, `DELETE FROM meta WHERE key = 'integrity'`)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fx := newTamperFixture(t)
			db := rawDB(t, fx.dir)
			tc.edit(t, db, fx)
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			l, err := Open(fx.dir, []byte(testPass))
			if err == nil {
				sugs, serr := l.Suggestions(DefaultSuggestOptions())
				l.Close()
				t.Fatalf("the edited library opened; suggestions %+v, %v", sugs, serr)
			}
			if !errors.Is(err, ErrModified) {
				t.Fatalf("Open of the edited library: %v, want ErrModified", err)
			}
			if strings.Contains(err.Error(), "Ada") {
				t.Errorf("the error names a person: %v", err)
			}
		})
	}
}

// TestAdversaryReplaysAnOlderRow: a row put back as it was earlier (an
// older copy of the file had it, with its then valid MAC) is caught by
// the table sums, although its own MAC is valid.
func TestAdversaryReplaysAnOlderRow(t *testing.T) {
	fx := newTamperFixture(t)
	db := rawDB(t, fx.dir)
	var person sql.NullInt64
	var by sql.NullString
	var mac []byte
	if err := db.QueryRow(`SELECT person_id, assigned_by, mac FROM faces WHERE id = ?`, fx.adaFaces[1]).Scan(&person, &by, &mac); err != nil {
		t.Fatal(err)
	}
	db.Close()
	l, err := Open(fx.dir, []byte(testPass))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.UnassignFace(fx.adaFaces[1]); err != nil {
		t.Fatal(err)
	}
	l.Close()
	db = rawDB(t, fx.dir)
	rawExec(t, db, `UPDATE faces SET person_id = ?, assigned_by = ?, mac = ? WHERE id = ?`, person, by, mac, fx.adaFaces[1])
	db.Close()
	if l, err := Open(fx.dir, []byte(testPass)); !errors.Is(err, ErrModified) {
		if err == nil {
			l.Close()
		}
		t.Fatalf("Open after an older row was put back: %v, want ErrModified", err)
	}
}

// TestAdversaryEditsWhileOpen: an edit made while a program has the
// library open is caught when the rows that suggestions read are read.
func TestAdversaryEditsWhileOpen(t *testing.T) {
	for _, tc := range []struct {
		name, q string
		read    func(l *Library) error
	}{
		{"person_id", `UPDATE faces SET person_id = NULL, assigned_by = NULL WHERE id = (SELECT min(id) FROM faces)`,
			func(l *Library) error { _, err := l.Suggestions(DefaultSuggestOptions()); return err }},
		{"rejection", `UPDATE rejections SET person_id = person_id`, nil},
		{"hidden", `UPDATE people SET hidden = 1`,
			func(l *Library) error { _, err := l.Suggestions(DefaultSuggestOptions()); return err }},
		{"cluster", `UPDATE clusters SET cluster = cluster + 1`,
			func(l *Library) error { _, err := l.StoredClusters(); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newTamperFixture(t)
			l, err := Open(fx.dir, []byte(testPass))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			db := rawDB(t, fx.dir)
			defer db.Close()
			if tc.read == nil {
				// A no-op edit keeps the row as Veil wrote it: the check
				// must not fire on unchanged data.
				rawExec(t, db, tc.q)
				if _, err := l.Rejections(); err != nil {
					t.Fatalf("an unchanged row was refused: %v", err)
				}
				return
			}
			rawExec(t, db, tc.q)
			if err := tc.read(l); !errors.Is(err, ErrModified) {
				t.Errorf("reading after the edit: %v, want ErrModified", err)
			}
		})
	}
}
