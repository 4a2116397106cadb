package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
	"time"

	"github.com/veil-privacy/veil/face"
	"github.com/veil-privacy/veil/tagging"
)

// rekeyView is what a library shows through the API: every face with its
// person and descriptor, and the people.
type rekeyView struct {
	Faces  []tagging.Face
	People []tagging.Person
	Photos []tagging.Photo
}

func viewLibrary(t *testing.T, dir, pass string) rekeyView {
	t.Helper()
	l, err := tagging.Open(dir, []byte(pass))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.CheckIntegrity(t.Context()); err != nil {
		t.Fatal(err)
	}
	var v rekeyView
	if v.Faces, err = l.Faces(tagging.FaceFilter{Descriptors: true}); err != nil {
		t.Fatal(err)
	}
	if v.People, err = l.People(); err != nil {
		t.Fatal(err)
	}
	if v.Photos, err = l.Photos(); err != nil {
		t.Fatal(err)
	}
	return v
}

// metaValue reads a key header entry straight from the file.
func metaValue(t *testing.T, dir, key string) ([]byte, error) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, tagging.DBFile)+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var b []byte
	err = db.QueryRow(`SELECT value FROM meta WHERE key = ?`, key).Scan(&b)
	return b, err
}

// faceMAC reads the MAC of the face with the min or max id straight from
// the file (it changes when the rotation re-encrypts the face).
func faceMAC(t *testing.T, dir, which string) ([]byte, error) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, tagging.DBFile)+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var b []byte
	err = db.QueryRow(`SELECT mac FROM faces WHERE id = (SELECT ` + which + `(id) FROM faces)`).Scan(&b)
	return b, err
}

// TestLibraryRekeySurvivesSIGKILL (issue 19 item 7.3) kills a real `veil
// library rekey` with SIGKILL while it re-encrypts a library of 4000
// faces: the library then refuses to open (the rotation is pending), the
// next run finishes it, everything opens under the new passphrase exactly
// as it was, and neither the old passphrase nor the old key header with it
// opens the library.
func TestLibraryRekeySurvivesSIGKILL(t *testing.T) {
	bin := buildVeil(t)
	dir := t.TempDir()
	lib := filepath.Join(dir, "lib")
	const oldPass, newPass = "crash test", "the new crash test passphrase"
	l, err := tagging.Create(lib, []byte(oldPass), tagging.CreateOptions{KDF: tagging.KDFParams{Time: 1, MemoryKiB: 64, Threads: 1}, TestSettings: true})
	if err != nil {
		t.Fatal(err)
	}
	var lm face.Landmarks
	thumb := make([]byte, 2000)
	rand.Read(thumb)
	for p := range 40 {
		faces := make([]tagging.NewFace, 100)
		for i := range faces {
			d := make([]float32, 128)
			for j := range d {
				d[j] = float32((p*100+i+j)%17) / 17
			}
			faces[i] = tagging.NewFace{Box: tagging.Box{X: float64(i), Y: 1, Width: 50, Height: 50}, Score: 0.9,
				Source: tagging.Detected, Landmarks: &lm, Descriptor: d, Thumbnail: thumb}
		}
		path := fmt.Sprintf("/photos/%02d.jpg", p)
		_, ids, err := l.AddPhoto(tagging.PhotoRecord{Path: path, SHA256: sha256.Sum256([]byte(path)), Size: 1, Width: 640, Height: 480}, faces)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.NameFaces(ids[:3], fmt.Sprintf("Person %d", p%7)); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	before := viewLibrary(t, lib, oldPass)
	oldKDF, err := metaValue(t, lib, "kdf")
	if err != nil {
		t.Fatal(err)
	}
	oldDEK, err := metaValue(t, lib, "dek")
	if err != nil {
		t.Fatal(err)
	}

	firstMAC, err := faceMAC(t, lib, "min")
	if err != nil {
		t.Fatal(err)
	}
	lastMAC, err := faceMAC(t, lib, "max")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("VEIL_PASSPHRASE", oldPass)
	t.Setenv("VEIL_NEW_PASSPHRASE", newPass)
	t.Setenv("VEIL_LIBRARY", "")
	t.Setenv("VEIL_TEST_SETTINGS", "1")
	ps := &procs{t: t, bin: bin, dir: dir}
	t.Cleanup(ps.killAll)
	args := []string{"library", "rekey", "--library", lib, "--argon2-time", "1", "--argon2-memory", "1", "--argon2-threads", "1"}
	first := ps.start("rekey-1", args...)
	for deadline := time.Now().Add(patience); ; time.Sleep(2 * time.Millisecond) {
		select {
		case <-first.done:
			t.Fatalf("rekey finished before it could be killed (%v); log:\n%s", first.err, ps.log(first))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("rekey did not start within %s; log:\n%s", patience, ps.log(first))
		}
		// Kill once the first face is re-encrypted: the rotation is then
		// in the middle of the faces table.
		if mac, err := faceMAC(t, lib, "min"); err == nil && string(mac) != string(firstMAC) {
			if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	<-first.done
	if mac, err := faceMAC(t, lib, "max"); err != nil || string(mac) != string(lastMAC) {
		t.Fatalf("the last face was re-encrypted before the kill (%v): the kill did not land mid-rotation", err)
	}
	if _, err := tagging.Open(lib, []byte(oldPass)); !errors.Is(err, tagging.ErrRotationPending) {
		t.Fatalf("Open after the SIGKILL: %v, want ErrRotationPending (the kill did not land mid-rotation)", err)
	}
	if _, err := metaValue(t, lib, "rotation_state"); err != nil {
		t.Fatalf("no rotation progress after the kill: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("the second rekey: %v\n%s", err, out)
	}
	if _, err := metaValue(t, lib, "rotation_dek"); !errors.Is(err, sql.ErrNoRows) {
		t.Errorf("the rotation is still recorded after the second run: %v", err)
	}
	after := viewLibrary(t, lib, newPass)
	if !reflect.DeepEqual(after, before) {
		t.Errorf("the library changed in the rekey (%d faces, %d people before; %d, %d after)",
			len(before.Faces), len(before.People), len(after.Faces), len(after.People))
	}
	if _, err := tagging.Open(lib, []byte(oldPass)); !errors.Is(err, tagging.ErrWrongPassphrase) {
		t.Errorf("Open with the old passphrase: %v", err)
	}
	// The old header and the old passphrase, put back into a copy, open
	// nothing: the data key they unwrap is not the library's any more.
	cp := filepath.Join(dir, "copy")
	if err := os.MkdirAll(cp, 0o700); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(lib, tagging.DBFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cp, tagging.DBFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(cp, tagging.DBFile)+"?mode=rw")
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string][]byte{"kdf": oldKDF, "dek": oldDEK} {
		if _, err := db.Exec(`UPDATE meta SET value = ? WHERE key = ?`, v, k); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	if l, err := tagging.Open(cp, []byte(oldPass)); err == nil {
		l.Close()
		t.Error("the old key header and passphrase open the rekeyed library")
	}
}
