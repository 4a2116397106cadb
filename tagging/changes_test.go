package tagging

import (
	"testing"
)

// ChangeCounter stays the same while nothing is committed and changes
// when this Library or another connection (another program) commits.
func TestChangeCounter(t *testing.T) {
	l := testLibrary(t)
	ids := addTestPhoto(t, l, "/a.jpg", 1, 2)
	ctx := t.Context()
	read := func() int64 {
		t.Helper()
		v, err := l.ChangeCounter(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// Clustering stores the clusters once; done again with nothing new
	// it commits nothing (so a server's cached clusters stay valid).
	o, err := NewClusterOptions(DefaultClusterAlgorithm)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.UpdateClusters(ctx, o, false); err != nil {
		t.Fatal(err)
	}
	v0 := read()
	if _, err := l.People(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.UpdateClusters(ctx, o, false); err != nil {
		t.Fatal(err)
	}
	if v := read(); v != v0 {
		t.Errorf("counter moved from %d to %d with no commit", v0, v)
	}
	if _, err := l.NameFaces(ids[:1], "Ada"); err != nil {
		t.Fatal(err)
	}
	v1 := read()
	if v1 == v0 {
		t.Errorf("counter unchanged (%d) after this library's commit", v1)
	}
	other, err := Open(l.Dir(), []byte(testPass))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.NameFaces(ids[1:], "Grace"); err != nil {
		t.Fatal(err)
	}
	other.Close()
	if v := read(); v == v1 {
		t.Errorf("counter unchanged (%d) after another connection's commit", v)
	}
	// Closing releases the counter's connection; a closed library's
	// counter is an error, not a stale number.
	l.Close()
	if _, err := l.ChangeCounter(ctx); err == nil {
		t.Error("ChangeCounter of a closed library gave no error")
	}
}
