package tagging

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/veil-privacy/veil/tagging/cluster"
)

const newTestPass = "the new test passphrase"

// rotationFixture is a closed library with something in every sealed
// column: photos (digests), faces with landmarks, descriptors and
// thumbnails, named people, rejections, clusters and a learned metric.
type rotationFixture struct {
	dir string
	// oldKeys are the keys of the data key before any rotation, and
	// oldHeader the key header and wrapped key as they were: what an
	// adversary keeps from an old copy of the library and its passphrase.
	oldKeys        subKeys
	oldKDF, oldDEK []byte
	seed           [32]byte
	before         libraryView
	faceID         int64
}

// libraryView is what a library shows through its API.
type libraryView struct {
	Photos      []Photo
	Faces       []Face
	People      []Person
	Rejections  map[int64][]int64
	Clusters    map[int64]int
	Suggestions []LibrarySuggestion
	Metric      MetricInfo
	UseMetric   bool
}

func viewOf(t *testing.T, l *Library) libraryView {
	t.Helper()
	var v libraryView
	var err error
	if v.Photos, err = l.Photos(); err != nil {
		t.Fatal(err)
	}
	if v.Faces, err = l.Faces(FaceFilter{Descriptors: true, Removed: true}); err != nil {
		t.Fatal(err)
	}
	if v.People, err = l.People(); err != nil {
		t.Fatal(err)
	}
	if v.Rejections, err = l.Rejections(); err != nil {
		t.Fatal(err)
	}
	if v.Clusters, err = l.StoredClusters(); err != nil {
		t.Fatal(err)
	}
	if v.Suggestions, err = l.Suggestions(DefaultSuggestOptions()); err != nil {
		t.Fatal(err)
	}
	if _, v.Metric, err = l.LatestMetric(); err != nil {
		t.Fatal(err)
	}
	if v.UseMetric, err = l.UseMetric(); err != nil {
		t.Fatal(err)
	}
	return v
}

func newRotationFixture(t *testing.T) rotationFixture {
	t.Helper()
	dir := t.TempDir()
	l, err := Create(dir, []byte(testPass), cheapKDF)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	f := newLearnFixture(t, l, 3, 5, 6)
	f.name(t, 3)
	if err := l.RejectFace(f.faces[1][4], f.people[0]); err != nil {
		t.Fatal(err)
	}
	co, err := NewClusterOptions(cluster.ChineseWhispers)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.UpdateClusters(t.Context(), co, true); err != nil {
		t.Fatal(err)
	}
	if _, err := l.LearnMetric(t.Context(), quickLearn); err != nil {
		t.Fatal(err)
	}
	if err := l.SetUseMetric(true); err != nil {
		t.Fatal(err)
	}
	ids := addTestPhoto(t, l, "/photos/thumbs.jpg", 90, 2) // faces with landmarks and thumbnails
	fx := rotationFixture{dir: dir, seed: l.RotationSeed(), faceID: ids[0]}
	if fx.oldKeys, err = deriveSubKeys(l.dek); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fx.oldKeys.clear)
	if fx.oldKDF, err = getMeta(t.Context(), l.db, metaKDF); err != nil {
		t.Fatal(err)
	}
	if fx.oldDEK, err = getMeta(t.Context(), l.db, metaDEK); err != nil {
		t.Fatal(err)
	}
	fx.before = viewOf(t, l)
	if len(fx.before.Clusters) == 0 || fx.before.Metric.Version == 0 || len(fx.before.Rejections) == 0 {
		t.Fatalf("the fixture lacks clusters, a metric or rejections: %+v", fx.before.Metric)
	}
	return fx
}

// sealedFieldsOpenWith counts the sealed fields of the library file that
// the keys k open, and the keyed ids they reproduce, reading the file
// directly as an adversary with those keys would.
func sealedFieldsOpenWith(t *testing.T, dir string, k *subKeys) (opened, total int) {
	t.Helper()
	db := rawDB(t, dir)
	defer db.Close()
	for table, cols := range sealedColumns {
		for _, c := range cols {
			rows, err := db.Query(`SELECT rowid, ` + c + ` FROM ` + table + ` WHERE ` + c + ` IS NOT NULL`)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var rid int64
				var b []byte
				if err := rows.Scan(&rid, &b); err != nil {
					t.Fatal(err)
				}
				total++
				if _, err := openWith(k.seal, b, fieldAAD(table, c, rid)); err == nil {
					opened++
				}
			}
			rows.Close()
		}
	}
	for _, key := range []string{metaIntegrity} {
		var b []byte
		if err := db.QueryRow(`SELECT value FROM meta WHERE key = ?`, key).Scan(&b); err != nil {
			t.Fatal(err)
		}
		total++
		if _, err := openWith(k.seal, b, fieldAAD("meta", key, 0)); err == nil {
			opened++
		}
	}
	// Row MACs the keys reproduce count as opened too.
	for _, tb := range authTables {
		if err := forEachRow(t.Context(), db, tb, true, func(_ int64, vals []any, mac []byte) error {
			total++
			if string(k.rowMACOf(nil, tb.name, vals)) == string(mac) {
				opened++
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	return opened, total
}

// putHeader writes a key header and wrapped key into the file, as an
// adversary restoring an old copy of them would.
func putHeader(t *testing.T, dir string, kdf, dek []byte) {
	t.Helper()
	db := rawDB(t, dir)
	defer db.Close()
	rawExec(t, db, `UPDATE meta SET value = ? WHERE key = ?`, kdf, metaKDF)
	rawExec(t, db, `UPDATE meta SET value = ? WHERE key = ?`, dek, metaDEK)
}

func copyLibrary(t *testing.T, dir string) string {
	t.Helper()
	dst := t.TempDir()
	for _, s := range []string{"", "-wal", "-shm"} {
		b, err := os.ReadFile(filepath.Join(dir, DBFile+s))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, DBFile+s), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// TestRotateKeyOldKeyOpensNothing (issue 19 item 7.3): after RotateKey,
// an adversary with the old passphrase and an old copy of the key header
// opens nothing written since: no sealed field, no row MAC, and the
// library does not open. The new passphrase opens everything as it was.
// The control shows the check bites: after the passphrase-only Rekey (the
// old `veil library rekey`), the old header and passphrase open every
// field.
func TestRotateKeyOldKeyOpensNothing(t *testing.T) {
	t.Run("control: Rekey keeps the data key", func(t *testing.T) {
		fx := newRotationFixture(t)
		if err := Rekey(fx.dir, []byte(testPass), []byte(newTestPass), cheapKDF); err != nil {
			t.Fatal(err)
		}
		opened, total := sealedFieldsOpenWith(t, fx.dir, &fx.oldKeys)
		if opened != total || total == 0 {
			t.Fatalf("after Rekey the old key opens %d of %d fields; the control expects all", opened, total)
		}
	})
	fx := newRotationFixture(t)
	var calls []int64
	err := RotateKey(t.Context(), fx.dir, []byte(testPass), newPass(newTestPass), cheapKDF, func(done, total int64) {
		calls = append(calls, done, total)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) < 4 || calls[0] != 0 || calls[len(calls)-2] != calls[len(calls)-1] {
		t.Errorf("progress calls %v: want from 0 to the total", calls)
	}
	opened, total := sealedFieldsOpenWith(t, fx.dir, &fx.oldKeys)
	if total < 50 || opened != 0 {
		t.Errorf("after RotateKey the old key opens %d of %d fields and MACs", opened, total)
	}
	// The keyed ids changed too: the old key's content id of a photo is
	// not in the file.
	db := rawDB(t, fx.dir)
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM photos WHERE content_mac = ?`, fx.oldKeys.contentID(fx.before.Photos[0].SHA256)).Scan(&n); err != nil || n != 0 {
		t.Errorf("the old content id is still in the file: %d, %v", n, err)
	}
	db.Close()

	if _, err := Open(fx.dir, []byte(testPass)); !errors.Is(err, ErrWrongPassphrase) {
		t.Errorf("Open with the old passphrase: %v", err)
	}
	old := copyLibrary(t, fx.dir)
	putHeader(t, old, fx.oldKDF, fx.oldDEK)
	if l, err := Open(old, []byte(testPass)); err == nil {
		l.Close()
		t.Error("the old header and passphrase open the rotated library")
	} else if !errors.Is(err, ErrModified) {
		t.Errorf("Open with the old header and passphrase: %v, want ErrModified", err)
	}

	l, err := Open(fx.dir, []byte(newTestPass))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if after := viewOf(t, l); !reflect.DeepEqual(after, fx.before) {
		t.Errorf("the library changed in the rotation:\nbefore %+v\nafter  %+v", fx.before, after)
	}
	if l.RotationSeed() != fx.seed {
		t.Error("the metric rotation's seed changed: the learned metric would no longer fit")
	}
	if f, err := l.Face(fx.faceID); err != nil || f.ID != fx.faceID {
		t.Errorf("face after the rotation: %+v, %v", f, err)
	}
	// The library is writable and consistent under the new key.
	if _, err := l.CreatePerson("After Rotation"); err != nil {
		t.Fatal(err)
	}
	if err := l.CheckIntegrity(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := RotateKey(t.Context(), fx.dir, []byte(testPass), newPass("x"+newTestPass), cheapKDF, nil); !errors.Is(err, ErrWrongPassphrase) {
		t.Errorf("RotateKey with the old passphrase: %v", err)
	}
}

// TestRotateKeyResumes interrupts a rotation after its first batch (as a
// crash would: the context is cancelled), checks the library refuses to
// open meanwhile, then finishes it; the result is the rotated library.
// An edit made while the rotation is interrupted is refused on resuming.
func TestRotateKeyResumes(t *testing.T) {
	interrupt := func(t *testing.T, fx rotationFixture) {
		t.Helper()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		batches := 0
		err := RotateKey(ctx, fx.dir, []byte(testPass), newPass(newTestPass), cheapKDF, func(done, total int64) {
			if done > 0 {
				batches++
				cancel()
			}
		})
		if !errors.Is(err, context.Canceled) || batches != 1 {
			t.Fatalf("the interrupted rotation: %v after %d batches", err, batches)
		}
		for _, p := range []string{testPass, newTestPass} {
			if _, err := Open(fx.dir, []byte(p)); err == nil || !(errors.Is(err, ErrRotationPending) || errors.Is(err, ErrWrongPassphrase)) {
				t.Errorf("Open during the rotation (%q): %v", p, err)
			}
		}
		if _, err := Open(fx.dir, []byte(testPass)); !errors.Is(err, ErrRotationPending) {
			t.Errorf("Open with the current passphrase during the rotation: %v", err)
		}
	}
	t.Run("resume", func(t *testing.T) {
		fx := newRotationFixture(t)
		interrupt(t, fx)
		var first int64 = -1
		if err := RotateKey(t.Context(), fx.dir, []byte(testPass), newPass(newTestPass), cheapKDF, func(done, total int64) {
			if first < 0 {
				first = done
			}
		}); err != nil {
			t.Fatal(err)
		}
		if first <= 0 {
			t.Errorf("the resumed rotation started at %d rows: it did not go on where it stopped", first)
		}
		if opened, total := sealedFieldsOpenWith(t, fx.dir, &fx.oldKeys); opened != 0 {
			t.Errorf("after the resumed rotation the old key opens %d of %d", opened, total)
		}
		l, err := Open(fx.dir, []byte(newTestPass))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if after := viewOf(t, l); !reflect.DeepEqual(after, fx.before) {
			t.Errorf("the library changed in the rotation:\nbefore %+v\nafter  %+v", fx.before, after)
		}
	})
	for _, tc := range []struct{ name, q string }{
		{"edit a converted row", `UPDATE photos SET missing = 1 WHERE id = (SELECT min(id) FROM photos)`},
		{"delete a converted row", `DELETE FROM photos WHERE id = (SELECT min(id) FROM photos)`},
		{"edit a row not yet converted", `UPDATE faces SET person_id = NULL WHERE id = (SELECT min(id) FROM faces WHERE person_id IS NOT NULL)`},
		{"delete a rejection not yet converted", `DELETE FROM rejections`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newRotationFixture(t)
			interrupt(t, fx)
			db := rawDB(t, fx.dir)
			if _, err := db.Exec(tc.q); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec(`DELETE FROM integrity_dirty`); err != nil {
				t.Fatal(err)
			}
			db.Close()
			err := RotateKey(t.Context(), fx.dir, []byte(testPass), newPass(newTestPass), cheapKDF, nil)
			if !errors.Is(err, ErrModified) {
				t.Errorf("resuming after %s: %v, want ErrModified", tc.name, err)
			}
		})
	}
}

// TestWriterRefusedDuringRotation: a program that unlocked the library
// before a rotation began cannot commit a write while it is pending.
func TestWriterRefusedDuringRotation(t *testing.T) {
	fx := newRotationFixture(t)
	l, err := Open(fx.dir, []byte(testPass))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithCancel(t.Context())
	err = RotateKey(ctx, fx.dir, []byte(testPass), newPass(newTestPass), cheapKDF, func(done, _ int64) {
		if done > 0 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if _, err := l.CreatePerson("Late Writer"); !errors.Is(err, ErrRotationPending) {
		t.Errorf("a write during the rotation: %v, want ErrRotationPending", err)
	}
	var n int
	if err := l.db.QueryRow(`SELECT count(*) FROM integrity_dirty`).Scan(&n); err != nil || n != 0 {
		t.Errorf("the refused write left %d rows in integrity_dirty (%v)", n, err)
	}
}

// newPass is RotateKey's newPassphrase returning p.
func newPass(p string) func() ([]byte, error) {
	return func() ([]byte, error) { return []byte(p), nil }
}
