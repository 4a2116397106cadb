package tagging

import (
	"sort"

	"github.com/veil-privacy/veil/face"
	"github.com/veil-privacy/veil/tagging/match"
)

// PhotoSearch is what the faces of a photo match in the library
// (SearchPhoto).
type PhotoSearch struct {
	// Faces are the photo's faces, in the order given.
	Faces []SearchedFace
	// People are the names of the people the faces most likely are,
	// sorted; Photos the paths of the library's photos holding a matching
	// face, in order of first match. Neither is nil.
	People, Photos []string
}

// SearchedFace is one face of a searched photo.
type SearchedFace struct {
	Box Box
	// PersonID is the person the face most likely is, by Suggest's rule
	// (0: nobody known), Person the person's name, Distance the distance
	// to the person's nearest face.
	PersonID int64
	Person   string
	Distance float64
	// Matches are the library's faces within the search distance, nearest
	// first (never nil).
	Matches []SearchMatch
}

// SearchMatch is a library face matching a face of a searched photo.
type SearchMatch struct {
	Face int64
	// PhotoID is the face's photo, Photo its path.
	PhotoID int64
	Photo   string
	// PersonID is the face's person (0: none), Person the name.
	PersonID int64
	Person   string
	Distance float64
}

// SearchPhoto looks the faces found in a photo (which need not be in the
// library; face.Pipeline.Run finds them, with descriptors) up in the
// library (SearchLibrary: the person each face most likely is, one per
// face of the photo, and the library's faces within dist, at most limit
// per face, ≤ 0: all), and names the people and photos matched. The
// library is only read.
func (l *Library) SearchPhoto(found []face.Face, o match.SuggestOptions, dist float64, limit int) (*PhotoSearch, error) {
	out := &PhotoSearch{Faces: []SearchedFace{}, People: []string{}, Photos: []string{}}
	if len(found) == 0 {
		return out, nil
	}
	query := make([][]float32, len(found))
	for i := range found {
		query[i] = found[i].Descriptor
	}
	res, people, err := l.SearchLibrary(query, o, dist, limit)
	if err != nil {
		return nil, err
	}
	photos, err := l.Photos()
	if err != nil {
		return nil, err
	}
	path := make(map[int64]string, len(photos))
	for _, ph := range photos {
		path[ph.ID] = ph.Path
	}
	seenPeople, seenPhotos := map[string]bool{}, map[string]bool{}
	for i, r := range res {
		sf := SearchedFace{Box: found[i].Box, PersonID: r.Person, Person: people[r.Person].Name, Distance: r.Distance, Matches: []SearchMatch{}}
		if r.Person != 0 && !seenPeople[sf.Person] {
			seenPeople[sf.Person] = true
			out.People = append(out.People, sf.Person)
		}
		for _, m := range r.Matches {
			p := path[m.Photo]
			sf.Matches = append(sf.Matches, SearchMatch{Face: m.Face, PhotoID: m.Photo, Photo: p, PersonID: m.Person, Person: people[m.Person].Name, Distance: m.Distance})
			if !seenPhotos[p] {
				seenPhotos[p] = true
				out.Photos = append(out.Photos, p)
			}
		}
		out.Faces = append(out.Faces, sf)
	}
	sort.Strings(out.People)
	return out, nil
}

// Review is a question of the review queue with the person's name.
type Review struct {
	match.ReviewGroup
	Name string
}

// ReviewIn groups the suggestions of space (SuggestionsIn) into
// questions that settle many faces at once (match.ReviewQueue): the faces
// of one stored cluster suggested as the same person, largest groups
// first.
func (l *Library) ReviewIn(s Space) ([]Review, error) {
	sugs, err := l.SuggestionsIn(s)
	if err != nil {
		return nil, err
	}
	clusters, err := l.StoredClusters()
	if err != nil {
		return nil, err
	}
	names := map[int64]string{}
	plain := make([]match.Suggestion, len(sugs))
	for i, s := range sugs {
		names[s.Person] = s.Name
		plain[i] = s.Suggestion
	}
	q := match.ReviewQueue(plain, clusters)
	out := make([]Review, len(q))
	for i, g := range q {
		out[i] = Review{ReviewGroup: g, Name: names[g.Person]}
	}
	return out, nil
}
