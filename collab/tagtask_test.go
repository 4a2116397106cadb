package collab

import (
	"math/rand/v2"
	"testing"
)

// TestNewTagTask: every user's faces carry one of its own persons'
// hashed tags, every held-out face's person was trained, and bad sizes
// are refused.
func TestNewTagTask(t *testing.T) {
	s := synthSplit(3, 20, 10, 5)
	tt, err := NewTagTask(s, 4, 2, 10, 64, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	if len(tt.Users) != 4 || tt.Dim != 128 || len(tt.TestX) != len(tt.TestTags) {
		t.Fatalf("task: %d users, dim %d, %d test faces with %d tag sets", len(tt.Users), tt.Dim, len(tt.TestX), len(tt.TestTags))
	}
	// ⌈10/5⌉ = 2 held-out photos of each of the 20 people.
	if len(tt.TestX) != 40 {
		t.Fatalf("%d held-out faces, want 40", len(tt.TestX))
	}
	faces := 0
	for _, u := range tt.Users {
		faces += len(u.X)
		for _, c := range u.Class {
			if c < 0 || c >= 64 {
				t.Fatalf("class %d outside 0…63", c)
			}
		}
	}
	if faces == 0 || faces > 20*8*2 {
		t.Fatalf("%d training faces", faces)
	}
	for i, tags := range tt.TestTags {
		if len(tags) == 0 || len(tags) > 2 {
			t.Fatalf("held-out face %d has %d tags (its person is in 1…2 libraries)", i, len(tags))
		}
	}
	for _, bad := range [][4]int{{0, 1, 10, 64}, {2, 3, 10, 64}, {2, 1, 0, 64}, {2, 1, 10, 1}} {
		if _, err := NewTagTask(s, bad[0], bad[1], bad[2], bad[3], rand.New(rand.NewPCG(1, 2))); err == nil {
			t.Errorf("users %d, per person %d, photos %d, classes %d accepted", bad[0], bad[1], bad[2], bad[3])
		}
	}
}
