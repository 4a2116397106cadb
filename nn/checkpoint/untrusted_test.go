package checkpoint

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// forged returns a checkpoint file whose header declares a parameter of
// values floats but which holds only a few bytes of tensor data.
func forged(t testing.TB, values int) []byte {
	t.Helper()
	h := Header{Params: []ParamInfo{{Name: "w", Shape: []int{values}}}}
	hdr, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	b.WriteString(magic)
	binary.Write(&b, binary.LittleEndian, uint32(len(hdr)))
	b.Write(hdr)
	b.Write(make([]byte, 64)) // 16 floats of the 2·values declared
	return b.Bytes()
}

// onlyReader hides every method but Read, so Read cannot learn the length.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

// allocated returns the bytes allocated while f runs.
func allocated(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// TestHugeClaimInShortFileIsRefusedCheaply plays a malicious checkpoint:
// a header declaring 2^27 floats (512 MiB per tensor group) in a file of a
// few hundred bytes. Every way of reading it must refuse it and allocate
// no more than a small multiple of the file's size.
func TestHugeClaimInShortFileIsRefusedCheaply(t *testing.T) {
	b := forged(t, maxValues/2)
	path := filepath.Join(t.TempDir(), "forged.ckpt")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	const bound = 1 << 20 // bytes; the claim is 512 MiB
	cases := []struct {
		name, want string
		read       func() error
	}{
		{"file", "the header declares", func() error { _, err := Load(path); return err }},
		{"bytes.Reader", "the header declares", func() error { _, err := Read(bytes.NewReader(b)); return err }},
		{"stream of unknown length", "truncated data", func() error { _, err := Read(onlyReader{bytes.NewReader(b)}); return err }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			n := allocated(func() { err = tc.read() })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one mentioning %q", err, tc.want)
			}
			if n > bound {
				t.Errorf("refusing a %d-byte file allocated %d bytes (bound %d): sizes were trusted before the data", len(b), n, bound)
			}
		})
	}
}

// TestReadKnownAndUnknownLength: a valid checkpoint reads the same through
// a file, a bytes.Reader and a reader of unknown length; a file with one
// byte too many or too few is refused before its tensors are read.
func TestReadKnownAndUnknownLength(t *testing.T) {
	c, _ := sample(t)
	var buf bytes.Buffer
	if err := c.Write(&buf); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "c.ckpt")
	if err := c.Save(path); err != nil {
		t.Fatal(err)
	}
	onDisk, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(onDisk, buf.Bytes()) {
		t.Fatalf("Save wrote %d bytes (%v), Write %d", len(onDisk), err, buf.Len())
	}
	fromFile, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	fromStream, err := Read(onlyReader{bytes.NewReader(buf.Bytes())})
	if err != nil {
		t.Fatal(err)
	}
	for i := range c.Values {
		for j := range c.Values[i] {
			if fromFile.Values[i][j] != c.Values[i][j] || fromStream.State.EMA[i][j] != c.State.EMA[i][j] {
				t.Fatalf("tensor %d differs after reading", i)
			}
		}
	}
	for _, bad := range [][]byte{append(bytes.Clone(buf.Bytes()), 0), buf.Bytes()[:buf.Len()-1]} {
		if _, err := Read(bytes.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "the header declares") {
			t.Errorf("%d-byte file (valid is %d): err = %v", len(bad), buf.Len(), err)
		}
	}
	// A failed save leaves the previous checkpoint and no temporary file.
	broken := *c
	broken.State.M = nil
	if err := broken.Save(path); err == nil {
		t.Fatal("saving a checkpoint without moments succeeded")
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, onDisk) {
		t.Error("a failed save changed the checkpoint on disk")
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Errorf("folder holds %d entries after a failed save, want 1", len(ents))
	}
}
