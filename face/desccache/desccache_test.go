package desccache

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRoundTripAndSettings(t *testing.T) {
	dir := t.TempDir()
	c, err := Open(dir, "ssd/dlib/v1")
	if err != nil {
		t.Fatal(err)
	}
	img := []byte("jpeg bytes")
	k := c.Key(img)
	if _, ok := c.Get(k); ok {
		t.Fatal("hit on empty cache")
	}
	want := Entry{Descriptor: []float32{0.5, -1.25, 3}, Fallback: true, LowScore: true, SecondDetector: true}
	if err := c.Put(k, want); err != nil {
		t.Fatal(err)
	}
	got, ok := c.Get(k)
	if !ok || !got.Fallback || !got.LowScore || !got.SecondDetector || len(got.Descriptor) != 3 || got.Descriptor[1] != -1.25 {
		t.Fatalf("got %+v %v", got, ok)
	}
	other, _ := Open(dir, "tiny/dlib/v1")
	if other.Key(img) == k {
		t.Fatal("different settings share a key")
	}
	if c.Key([]byte("other image")) == k {
		t.Fatal("different images share a key")
	}
	// No temporary files left behind.
	matches, _ := filepath.Glob(filepath.Join(dir, "descriptors", "*", ".tmp-*"))
	if len(matches) != 0 {
		t.Fatalf("temporary files left: %v", matches)
	}
}

func TestCorruptEntryIsAMiss(t *testing.T) {
	dir := t.TempDir()
	c, _ := Open(dir, "s")
	k := c.Key([]byte("x"))
	if err := c.Put(k, Entry{Descriptor: []float32{1, 2}}); err != nil {
		t.Fatal(err)
	}
	p := c.path(k)
	b, _ := os.ReadFile(p)
	tests := map[string][]byte{
		"truncated": b[:len(b)-3],
		"flipped":   append(append([]byte{}, b[:8]...), append([]byte{b[8] ^ 1}, b[9:]...)...),
		"empty":     {},
	}
	for name, bad := range tests {
		t.Run(name, func(t *testing.T) {
			if err := os.WriteFile(p, bad, 0o644); err != nil {
				t.Fatal(err)
			}
			if _, ok := c.Get(k); ok {
				t.Fatal("corrupt entry returned as a hit")
			}
		})
	}
}

func FuzzUnmarshal(f *testing.F) {
	f.Add(Marshal(Entry{Descriptor: []float32{1, 2, 3}}))
	f.Add(Marshal(Entry{Fallback: true}))
	f.Add(Marshal(Entry{Descriptor: []float32{-1}, LowScore: true, SecondDetector: true}))
	f.Add([]byte("VDC1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := Unmarshal(b)
		if err != nil {
			return
		}
		again, err := Unmarshal(Marshal(e))
		if err != nil || len(again.Descriptor) != len(e.Descriptor) || again.Fallback != e.Fallback || again.LowScore != e.LowScore || again.SecondDetector != e.SecondDetector {
			t.Fatalf("round trip changed the entry: %v", err)
		}
	})
}
