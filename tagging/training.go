package tagging

// Training data from the owner's decisions (issue 22 §1; Irene, Section
// III.A, "noisy bootstrapping with hashed tags").
//
// A library that helps train a shared model contributes only what its
// owner decided, decrypted in memory: the descriptors of the faces the
// owner named, grouped by person, the suggestions the owner accepted, and
// the faces the owner rejected as a person, as that person's negatives.
// No name leaves: each person is replaced by a hashed tag, a class in
// [0, n) computed as HMAC-SHA256 of the person's id under a key derived
// from the library's data key (HKDF label labelHashedTag). The same
// person always gets the same class in one library; without the key the
// class says nothing about the person, and two libraries' classes are
// unrelated (so one person named in two libraries usually lands in two
// classes, and two people in one class: the inconsistency Irene's
// min-entropy loss, Eq. 2, is there to absorb).

import (
	"cmp"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
)

// labelHashedTag derives the key of the library's hashed tags.
const labelHashedTag = "veil/tagging/v3 hashed-tag"

// MaxTagClasses bounds the number of hashed-tag classes.
const MaxTagClasses = 1 << 20

// TaggedPerson is one person of a library's training data: no name, no id,
// only the hashed-tag class and the descriptors.
type TaggedPerson struct {
	// Class is the person's hashed tag in [0, n).
	Class int
	// Named are the descriptors of the faces the owner named as the
	// person; Accepted those of the suggestions the owner accepted.
	Named, Accepted [][]float32
	// Rejected are the descriptors of faces the owner said are not the
	// person (negatives).
	Rejected [][]float32
}

// TrainingData is what a library contributes to training, in memory only.
type TrainingData struct {
	// Classes is n, the number of hashed-tag classes.
	Classes int
	// People are the people with at least one named or accepted face, in
	// an order that depends only on the classes (not on names or ids).
	People []TaggedPerson
}

// HashedTag maps a person identity to a class in [0, classes) by
// HMAC-SHA256 under key (the first 8 bytes of the MAC, big-endian, modulo
// classes; the bias is below classes/2⁶⁴). Without key the class is
// independent of the identity.
func HashedTag(key []byte, identity string, classes int) (int, error) {
	if classes < 1 || classes > MaxTagClasses {
		return 0, fmt.Errorf("tagging: hashed tags need 1…%d classes, got %d", MaxTagClasses, classes)
	}
	if len(key) < 16 {
		return 0, errors.New("tagging: a hashed-tag key needs at least 16 bytes")
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte("veil/tagging/v3 tag|"))
	m.Write([]byte(identity))
	return int(binary.BigEndian.Uint64(m.Sum(nil)[:8]) % uint64(classes)), nil
}

// tagKey derives the library's hashed-tag key from its data key.
func (l *Library) tagKey() ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k, err := hkdf.Key(sha256.New, l.dek, nil, labelHashedTag, 32)
	if err != nil {
		return nil, fmt.Errorf("tagging: deriving the hashed-tag key: %w", err)
	}
	return k, nil
}

// TrainingData returns the owner's decisions as training data over
// classes hashed-tag classes: per person with a name, the named faces'
// descriptors, the accepted suggestions' and the rejected faces'. Faces
// without a descriptor and removed faces are left out. Nothing is
// written.
func (l *Library) TrainingData(classes int) (*TrainingData, error) {
	if classes < 1 || classes > MaxTagClasses {
		return nil, fmt.Errorf("tagging: hashed tags need 1…%d classes, got %d", MaxTagClasses, classes)
	}
	key, err := l.tagKey()
	if err != nil {
		return nil, err
	}
	defer clear(key)
	faces, rej, err := l.decisions(true)
	if err != nil {
		return nil, err
	}
	people := map[int64]*TaggedPerson{}
	person := func(id int64) (*TaggedPerson, error) {
		if p, ok := people[id]; ok {
			return p, nil
		}
		c, err := HashedTag(key, strconv.FormatInt(id, 10), classes)
		if err != nil {
			return nil, err
		}
		p := &TaggedPerson{Class: c}
		people[id] = p
		return p, nil
	}
	for _, f := range faces {
		if len(f.Descriptor) == 0 || f.PersonID == 0 {
			continue
		}
		p, err := person(f.PersonID)
		if err != nil {
			return nil, err
		}
		switch f.AssignedBy {
		case ByUser:
			p.Named = append(p.Named, f.Descriptor)
		case ByAuto:
			p.Accepted = append(p.Accepted, f.Descriptor)
		}
	}
	for _, f := range faces {
		if len(f.Descriptor) == 0 {
			continue
		}
		for _, id := range rej[f.ID] {
			if p, ok := people[id]; ok && f.PersonID != id {
				p.Rejected = append(p.Rejected, f.Descriptor)
			}
		}
	}
	out := &TrainingData{Classes: classes}
	for _, p := range people {
		out.People = append(out.People, *p)
	}
	// Order by class, then by the first descriptor's values: nothing of
	// the ids' order (which follows naming order) survives.
	sortTagged(out.People)
	return out, nil
}

func sortTagged(ps []TaggedPerson) {
	first := func(p TaggedPerson) []float32 {
		if len(p.Named) > 0 {
			return p.Named[0]
		}
		if len(p.Accepted) > 0 {
			return p.Accepted[0]
		}
		return nil
	}
	slices.SortFunc(ps, func(a, b TaggedPerson) int {
		if a.Class != b.Class {
			return cmp.Compare(a.Class, b.Class)
		}
		return slices.Compare(first(a), first(b))
	})
}

// decisions returns every face not removed, with its descriptor, and the
// rejections (face id → people it is not). raw gives the descriptors as
// computed (a shared model trains on them, whatever version the library
// adopted); else in the adopted version's space (the learned metric's).
func (l *Library) decisions(raw bool) ([]Face, map[int64][]int64, error) {
	faces, err := l.Faces(FaceFilter{Descriptors: true, Raw: raw})
	if err != nil {
		return nil, nil, err
	}
	rej, err := l.Rejections()
	if err != nil {
		return nil, nil, err
	}
	return faces, rej, nil
}
