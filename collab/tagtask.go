package collab

import (
	"errors"
	"fmt"
	"math/rand/v2"
)

// TagTask is a hashed-tag classification task of simulated users, for
// experiments that train a classifier across them (fed/asyncsim, Irene's
// Fig. 10): each user's named faces under their persons' hashed tags, and
// held-out faces of the same people.
type TagTask struct {
	// Dim is the descriptors' size.
	Dim int
	// Users holds each user's training faces and their hashed tags.
	Users []TagData
	// TestX are the held-out faces; TestTags[i] the hashed tags of TestX[i]'s
	// person (one per library that holds the person): a prediction is right
	// when it is one of them.
	TestX    [][]float32
	TestTags []map[int]bool
	// PersonLibraries counts the (person, library) pairs, the classes used.
	PersonLibraries int
}

// TagData is one user's training faces and their hashed tags.
type TagData struct {
	X     [][]float32
	Class []int32
}

// NewTagTask holds out ⌈1/5⌉ of each named person's photos of split,
// simulates users from the rest as NoisyTags does (each named person in
// 1…maxUsersPerPerson libraries, at most photosPerUser photos in each) and
// gives each user its persons' faces under their hashed tags (classes
// classes, each library's own key), drawing from rng.
func NewTagTask(split *Split, users, maxUsersPerPerson, photosPerUser, classes int, rng *rand.Rand) (*TagTask, error) {
	if split == nil || len(split.Descs) == 0 {
		return nil, errors.New("collab: no faces to simulate users from")
	}
	if users < 1 || maxUsersPerPerson < 1 || maxUsersPerPerson > users || photosPerUser < 1 || classes < 2 {
		return nil, fmt.Errorf("collab: a task needs users ≥ 1, 1 ≤ users per person ≤ users, photos per user ≥ 1 and classes ≥ 2, got %d, %d, %d, %d",
			users, maxUsersPerPerson, photosPerUser, classes)
	}
	trainSplit, testFaces := holdOut(split, rng)
	libs := simulate(trainSplit, users, maxUsersPerPerson, photosPerUser, false, rng)
	data, _, classOf, err := pooled(libs, classes, rng)
	if err != nil {
		return nil, err
	}
	t := &TagTask{Dim: data.Dim, PersonLibraries: data.Units}
	tags := map[int]map[int]bool{}
	for li, l := range libs {
		var u TagData
		for i, q := range l.Person {
			if class, ok := classOf[li][q]; ok {
				u.X = append(u.X, l.Descs[i])
				u.Class = append(u.Class, int32(class))
			}
		}
		if len(u.X) == 0 {
			return nil, fmt.Errorf("collab: simulated user %d has no named person: use fewer users", li)
		}
		t.Users = append(t.Users, u)
		for q, class := range classOf[li] {
			p := l.origin[q]
			if tags[p] == nil {
				tags[p] = map[int]bool{}
			}
			tags[p][class] = true
		}
	}
	for _, i := range testFaces {
		if p := split.Identity[i]; tags[p] != nil {
			t.TestX = append(t.TestX, split.Descs[i])
			t.TestTags = append(t.TestTags, tags[p])
		}
	}
	if len(t.TestX) == 0 {
		return nil, errors.New("collab: no held-out face of a trained person")
	}
	return t, nil
}
