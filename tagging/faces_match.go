package tagging

import (
	"context"
	"fmt"

	"github.com/veil-privacy/veil/tagging/match"
)

// DefaultSuggestOptions returns the thresholds of thresholds.go.
func DefaultSuggestOptions() match.SuggestOptions {
	return match.SuggestOptions{Distance: SuggestDistance, Margin: SuggestMargin}
}

// LibrarySuggestion is a suggestion with the person's name.
type LibrarySuggestion struct {
	match.Suggestion
	Name string
}

// suggestionInputs reads what Suggest needs from the library: a gallery
// of the faces assigned to people who are not hidden, the faces waiting
// for a suggestion (unassigned, not removed, and not unassigned by the
// user: AssignAuto would not apply a suggestion to those; nor of a photo
// marked missing, which the user cannot open to check), the user's
// rejections and every person's name. Named faces of missing photos stay
// in the gallery: who they are is still known.
func (l *Library) suggestionInputs() (*match.Gallery, []match.Unnamed, []match.Rejection, map[int64]Person, error) {
	faces, err := l.Faces(FaceFilter{Descriptors: true})
	if err != nil {
		return nil, nil, nil, nil, err
	}
	missing, err := l.missingPhotos()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	people, err := l.People()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	byID := make(map[int64]Person, len(people))
	for _, p := range people {
		byID[p.ID] = p
	}
	dim := 0
	for _, f := range faces {
		if len(f.Descriptor) > 0 {
			dim = len(f.Descriptor)
			break
		}
	}
	if dim == 0 {
		dim = 128
	}
	g, err := match.NewGallery(dim)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	var un []match.Unnamed
	for _, f := range faces {
		if len(f.Descriptor) == 0 {
			continue
		}
		if f.PersonID != 0 {
			if byID[f.PersonID].Hidden {
				continue
			}
			if err := g.Add(f.ID, f.PhotoID, f.PersonID, f.Descriptor); err != nil {
				return nil, nil, nil, nil, fmt.Errorf("tagging: %w", err)
			}
			continue
		}
		if f.AssignedBy == ByUser || missing[f.PhotoID] {
			continue
		}
		un = append(un, match.Unnamed{Face: f.ID, Photo: f.PhotoID, Descriptor: f.Descriptor})
	}
	rej, err := l.Rejections()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	var rs []match.Rejection
	for f, ps := range rej {
		for _, p := range ps {
			rs = append(rs, match.Rejection{Face: f, Person: p})
		}
	}
	return g, un, rs, byID, nil
}

// Suggestions returns the library's current suggestions (Suggest on its
// named and unnamed faces), in face order. Naming, rejecting or
// unassigning takes effect at the next call: nothing is cached.
func (l *Library) Suggestions(o match.SuggestOptions) ([]LibrarySuggestion, error) {
	g, un, rs, people, err := l.suggestionInputs()
	if err != nil {
		return nil, err
	}
	return namedSuggestions(g, un, rs, people, o)
}

// namedSuggestions runs Suggest and names each suggested person
// (Suggestions, and SuggestionsIn in a learned metric's space).
func namedSuggestions(g *match.Gallery, un []match.Unnamed, rs []match.Rejection, people map[int64]Person, o match.SuggestOptions) ([]LibrarySuggestion, error) {
	sugs, err := match.Suggest(g, un, rs, o)
	if err != nil {
		return nil, fmt.Errorf("tagging: %w", err)
	}
	out := make([]LibrarySuggestion, len(sugs))
	for i, s := range sugs {
		out[i] = LibrarySuggestion{Suggestion: s, Name: people[s.Person].Name}
	}
	return out, nil
}

// AcceptSuggestions assigns each listed face to the person currently
// suggested for it, through AssignAuto (so never over a decision of the
// user's) in one transaction, and returns the assignments applied and the
// faces that had no current suggestion. An unknown face id is an error and
// nothing is assigned.
func (l *Library) AcceptSuggestions(faceIDs []int64, o match.SuggestOptions) (applied []LibrarySuggestion, none []int64, err error) {
	sugs, err := l.Suggestions(o)
	if err != nil {
		return nil, nil, err
	}
	return l.acceptSuggested(faceIDs, sugs)
}

// acceptSuggested applies the suggestions sugs makes for the listed faces
// (AcceptSuggestions; AcceptSuggestionsIn for a learned metric's).
func (l *Library) acceptSuggested(faceIDs []int64, sugs []LibrarySuggestion) (applied []LibrarySuggestion, none []int64, err error) {
	for _, id := range faceIDs {
		if _, err := l.Face(id); err != nil {
			return nil, nil, err
		}
	}
	byFace := make(map[int64]LibrarySuggestion, len(sugs))
	for _, s := range sugs {
		byFace[s.Face] = s
	}
	var as []Assignment
	var wanted []LibrarySuggestion
	for _, id := range faceIDs {
		s, ok := byFace[id]
		if !ok {
			none = append(none, id)
			continue
		}
		as = append(as, Assignment{Face: id, Person: s.Person})
		wanted = append(wanted, s)
	}
	if len(as) == 0 {
		return nil, none, nil
	}
	if _, err := l.AssignAuto(as); err != nil {
		return nil, nil, err
	}
	// AssignAuto skips what the user decided meanwhile: report what holds.
	for _, s := range wanted {
		f, err := l.Face(s.Face)
		if err != nil {
			return nil, nil, err
		}
		if f.PersonID == s.Person && f.AssignedBy == ByAuto {
			applied = append(applied, s)
		} else {
			none = append(none, s.Face)
		}
	}
	return applied, none, nil
}

// SearchLibrary looks the descriptors of a query photo's faces up in the
// whole library (Search; hidden people are not suggested). The query's
// descriptors are as computed from the photo: under an adopted model
// version they are mapped into its space, and o and dist scaled to it,
// as the library's own descriptors are (models.go).
func (l *Library) SearchLibrary(query [][]float32, o match.SuggestOptions, dist float64, limit int) ([]match.SearchResult, map[int64]Person, error) {
	ctx := context.Background()
	v, scale, err := activeModel(ctx, l.db, &l.keys)
	if err != nil {
		return nil, nil, err
	}
	if v != 0 {
		if query, err = l.ProjectQuery(ctx, query); err != nil {
			return nil, nil, err
		}
		o.Distance, o.Margin, dist = o.Distance*scale, o.Margin*scale, dist*scale
	}
	faces, err := l.Faces(FaceFilter{Descriptors: true})
	if err != nil {
		return nil, nil, err
	}
	people, err := l.People()
	if err != nil {
		return nil, nil, err
	}
	byID := make(map[int64]Person, len(people))
	for _, p := range people {
		byID[p.ID] = p
	}
	dim := 128
	if len(query) > 0 {
		dim = len(query[0])
	}
	g, err := match.NewGallery(dim)
	if err != nil {
		return nil, nil, err
	}
	for _, f := range faces {
		if len(f.Descriptor) == 0 {
			continue
		}
		p := f.PersonID
		if byID[p].Hidden {
			p = 0
		}
		if err := g.Add(f.ID, f.PhotoID, p, f.Descriptor); err != nil {
			return nil, nil, fmt.Errorf("tagging: %w", err)
		}
	}
	res, err := match.Search(g, query, o, dist, limit)
	if err != nil {
		return nil, nil, fmt.Errorf("tagging: %w", err)
	}
	return res, byID, nil
}
