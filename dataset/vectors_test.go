package dataset

import (
	"math"
	"strings"
	"testing"
)

func TestVectors(t *testing.T) {
	ims := []Image{{Path: "b1", Identity: "Bob"}, {Path: "a1", Identity: "Alice"}, {Path: "b2", Identity: "Bob"}}
	v, err := NewVectors(ims, [][]float32{{1, 2}, {3, 4}, {5, 6}})
	if err != nil {
		t.Fatal(err)
	}
	if v.Len() != 3 || v.Classes() != 2 || v.Dim != 2 {
		t.Fatalf("len %d classes %d dim %d", v.Len(), v.Classes(), v.Dim)
	}
	x, l, err := v.Batch([]int{2, 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{5, 6, 3, 4}
	for i := range want {
		if x[i] != want[i] {
			t.Fatalf("batch = %v, want %v", x, want)
		}
	}
	// Alice sorts first: label 0; Bob: 1.
	if l[0] != 1 || l[1] != 0 || v.Paths[1] != "a1" {
		t.Errorf("labels %v paths %v", l, v.Paths)
	}
	if _, _, err := v.Batch([]int{3}, nil); err == nil {
		t.Error("index 3 of 3: no error")
	}
}

func TestVectorsErrors(t *testing.T) {
	nan := float32(math.NaN())
	cases := []struct {
		ims  []Image
		vecs [][]float32
		want string
	}{
		{nil, nil, "no vectors"},
		{[]Image{{Path: "a", Identity: "A"}}, nil, "0 vectors for 1"},
		{[]Image{{Path: "a", Identity: "A"}}, [][]float32{{}}, "empty vector"},
		{[]Image{{Path: "a", Identity: "A"}, {Path: "b", Identity: "B"}}, [][]float32{{1}, {1, 2}}, "length 2, want 1"},
		{[]Image{{Path: "a", Identity: "A"}}, [][]float32{{nan}}, "non-finite"},
	}
	for _, tc := range cases {
		_, err := NewVectors(tc.ims, tc.vecs)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewVectors(%v, %v) = %v, want error with %q", tc.ims, tc.vecs, err, tc.want)
		}
	}
}
