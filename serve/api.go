package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/veil-privacy/veil/face"
	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/tagging"
)

// route is one registered route: method and pattern (net/http's syntax)
// and its handler. The OpenAPI document is checked against this list.
type route struct {
	method, pattern string
	handler         http.Handler
}

// apiHandler is a handler that returns an error for writeAPIError.
type apiHandler func(w http.ResponseWriter, r *http.Request) error

func (s *Server) api(method, pattern string, h apiHandler) route {
	return route{method: method, pattern: pattern, handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			s.writeAPIError(w, r, err)
		}
	})}
}

// apiRoutes lists the REST API (docs in openapi.json).
func (s *Server) apiRoutes() []route {
	const v = "/api/v1"
	return []route{
		{method: "GET", pattern: v + "/openapi.json", handler: http.HandlerFunc(serveOpenAPI)},
		s.api("GET", v+"/status", s.getStatus),
		s.api("GET", v+"/people", s.listPeople),
		s.api("GET", v+"/people/{id}", s.byID(s.getPerson)),
		s.api("PATCH", v+"/people/{id}", s.patchPerson),
		s.api("POST", v+"/people/{id}/merge", s.mergePerson),
		s.api("GET", v+"/people/{id}/similar", s.byID(s.similarPeople)),
		s.api("GET", v+"/faces", s.listFaces),
		s.api("POST", v+"/faces", s.addFace),
		s.api("GET", v+"/faces/{id}", s.byID(s.getFace)),
		s.api("DELETE", v+"/faces/{id}", s.byID(s.deleteFace)),
		s.api("GET", v+"/faces/{id}/thumbnail", s.imageByID(s.faceThumbnail)),
		s.api("POST", v+"/faces/assign", s.assignFaces),
		s.api("POST", v+"/faces/reject", s.rejectFaces),
		s.api("POST", v+"/faces/unassign", s.unassignFaces),
		s.api("GET", v+"/clusters", s.listClusters),
		s.api("GET", v+"/suggestions", s.listSuggestions),
		s.api("POST", v+"/suggestions/accept", s.acceptSuggestions),
		s.api("POST", v+"/suggestions/reject", s.rejectSuggestions),
		s.api("GET", v+"/photos", s.listPhotos),
		s.api("GET", v+"/photos/{id}", s.byID(s.getPhoto)),
		s.api("GET", v+"/photos/{id}/image", s.imageByID(s.photoImage)),
		s.api("POST", v+"/scans", s.startScan),
		s.api("GET", v+"/scans/{id}", s.getScan),
		s.api("GET", v+"/scans/{id}/events", s.scanEvents),
		s.api("POST", v+"/search", s.search),
		s.api("POST", v+"/recognize", s.recognize),
		s.api("POST", v+"/verify", s.verify),
		s.api("POST", v+"/detect", s.detect),
	}
}

// idRoute makes the handler of a route with an {id}: f computes the
// answer, write sends it.
func idRoute[T any](f func(r *http.Request, id int64) (T, error), write func(http.ResponseWriter, T)) apiHandler {
	return func(w http.ResponseWriter, r *http.Request) error {
		id, err := pathID(r)
		if err != nil {
			return err
		}
		v, err := f(r, id)
		if err != nil {
			return err
		}
		write(w, v)
		return nil
	}
}

// byID answers a route with an {id} with f's value as JSON.
func (s *Server) byID(f func(r *http.Request, id int64) (any, error)) apiHandler {
	return idRoute(f, func(w http.ResponseWriter, v any) { writeJSON(w, http.StatusOK, v) })
}

// imageByID answers a route with an {id} with the JPEG f returns (not to
// be cached: it shows faces).
func (s *Server) imageByID(f func(r *http.Request, id int64) ([]byte, error)) apiHandler {
	return idRoute(f, writeImage)
}

// httpError is an error with the status it answers with.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(format string, a ...any) error {
	return &httpError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, a...)}
}

func notFound(format string, a ...any) error {
	return &httpError{status: http.StatusNotFound, msg: fmt.Sprintf(format, a...)}
}

// statusOf maps an error to its HTTP status: the library's errors about
// unknown things are 404, its refusals of bad input 400 or 409.
func statusOf(err error) int {
	var he *httpError
	var mb *http.MaxBytesError
	switch {
	case errors.As(err, &he):
		return he.status
	case errors.As(err, &mb), errors.Is(err, imaging.ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, tagging.ErrUnknownFace), errors.Is(err, tagging.ErrUnknownPerson),
		errors.Is(err, tagging.ErrUnknownPhoto), errors.Is(err, tagging.ErrNoThumbnail):
		return http.StatusNotFound
	case errors.Is(err, tagging.ErrInvalidName), errors.Is(err, tagging.ErrBox), errors.Is(err, tagging.ErrSamePerson),
		errors.Is(err, tagging.ErrFaceRemoved), errors.Is(err, tagging.ErrNotPersons),
		errors.Is(err, imaging.ErrFormat), errors.Is(err, imaging.ErrEmpty):
		return http.StatusBadRequest
	case errors.Is(err, tagging.ErrNameTaken), errors.Is(err, tagging.ErrDuplicateFace), errors.Is(err, errScanRunning):
		return http.StatusConflict
	}
	return http.StatusInternalServerError
}

func (s *Server) writeAPIError(w http.ResponseWriter, r *http.Request, err error) {
	st := statusOf(err)
	msg := err.Error()
	if st == http.StatusInternalServerError {
		// The library's errors name no person or descriptor, but an
		// unexpected one is logged by kind, not shown.
		s.log.Error("serve: request failed", "method", r.Method, "route", r.Pattern, "err", err)
		msg = "internal error (see the server's log)"
	}
	writeError(w, st, msg)
}

// readJSON decodes a size-limited JSON body into v, refusing unknown
// fields and trailing data.
func (s *Server) readJSON(w http.ResponseWriter, r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return &httpError{status: http.StatusUnsupportedMediaType, msg: "want Content-Type application/json, got " + ct}
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, s.opt.MaxJSON))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return err
		}
		return badRequest("malformed JSON body: %v", err)
	}
	if dec.More() {
		return badRequest("malformed JSON body: data after the JSON value")
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("malformed JSON body: data after the JSON value")
	}
	return nil
}

// pathID parses the {id} wildcard.
func pathID(r *http.Request) (int64, error) {
	v := r.PathValue("id")
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil || id <= 0 {
		return 0, badRequest("id %q: want a positive integer", v)
	}
	return id, nil
}

// page is offset and limit of a list request.
type page struct{ offset, limit int }

func pageOf(r *http.Request) (page, error) {
	p := page{limit: DefaultPageSize}
	q := r.URL.Query()
	for _, f := range []struct {
		name string
		dst  *int
		max  int
	}{{"offset", &p.offset, math.MaxInt32}, {"limit", &p.limit, MaxPageSize}} {
		if v := q.Get(f.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > f.max {
				return p, badRequest("%s %q: want an integer from 0 to %d", f.name, v, f.max)
			}
			*f.dst = n
		}
	}
	return p, nil
}

// list is a page of a longer list.
type list[T any] struct {
	Items  []T `json:"items"`
	Total  int `json:"total"`
	Offset int `json:"offset"`
	Limit  int `json:"limit"`
}

func pageList[T any](all []T, p page) list[T] {
	lo := min(p.offset, len(all))
	hi := min(lo+p.limit, len(all))
	items := all[lo:hi]
	if items == nil {
		items = []T{}
	}
	return list[T]{Items: items, Total: len(all), Offset: p.offset, Limit: p.limit}
}

// JSON shapes of the API.
type (
	jsonPerson struct {
		ID     int64  `json:"id"`
		Name   string `json:"name"`
		Faces  int    `json:"faces"`
		Hidden bool   `json:"hidden"`
		Cover  int64  `json:"cover,omitempty"`
	}
	jsonFace struct {
		ID         int64    `json:"id"`
		PhotoID    int64    `json:"photo_id"`
		Photo      string   `json:"photo"`
		Box        face.Box `json:"box"`
		Score      float64  `json:"score"`
		Source     string   `json:"source"`
		PersonID   int64    `json:"person_id,omitempty"`
		Person     string   `json:"person,omitempty"`
		AssignedBy string   `json:"assigned_by,omitempty"`
		Removed    bool     `json:"removed,omitempty"`
	}
	jsonPhoto struct {
		ID      int64      `json:"id"`
		Path    string     `json:"path"`
		Width   int        `json:"width"`
		Height  int        `json:"height"`
		Size    int64      `json:"size"`
		Taken   string     `json:"taken,omitempty"`
		Missing bool       `json:"missing,omitempty"`
		Faces   []jsonFace `json:"faces,omitempty"`
	}
)

func toPerson(p tagging.Person) jsonPerson {
	return jsonPerson{ID: p.ID, Name: p.Name, Faces: p.Faces, Hidden: p.Hidden, Cover: p.Cover}
}

func toFace(f tagging.Face) jsonFace {
	return jsonFace{ID: f.ID, PhotoID: f.PhotoID, Photo: f.Photo, Box: f.Box, Score: f.Score, Source: string(f.Source),
		PersonID: f.PersonID, Person: f.Person, AssignedBy: f.AssignedBy, Removed: f.Removed}
}

func toFaces(fs []tagging.Face) []jsonFace {
	out := make([]jsonFace, len(fs))
	for i, f := range fs {
		out[i] = toFace(f)
	}
	return out
}

func toPhoto(p tagging.Photo) jsonPhoto {
	return jsonPhoto{ID: p.ID, Path: p.Path, Width: p.Width, Height: p.Height, Size: p.Size, Taken: p.Taken, Missing: p.Missing}
}

// person returns the person with this id.
func (s *Server) person(id int64) (tagging.Person, error) {
	p, err := s.lib.PersonByID(id)
	if errors.Is(err, tagging.ErrUnknownPerson) {
		return p, notFound("no person %d in the library", id)
	}
	return p, err
}

// photo returns the photo with this id.
func (s *Server) photo(id int64) (tagging.Photo, error) {
	ps, err := s.lib.Photos()
	if err != nil {
		return tagging.Photo{}, err
	}
	i := sort.Search(len(ps), func(i int) bool { return ps[i].ID >= id })
	if i < len(ps) && ps[i].ID == id {
		return ps[i], nil
	}
	return tagging.Photo{}, notFound("no photo %d in the library", id)
}

func (s *Server) getStatus(w http.ResponseWriter, r *http.Request) error {
	st, err := s.status(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

func (s *Server) listPeople(w http.ResponseWriter, r *http.Request) error {
	p, err := pageOf(r)
	if err != nil {
		return err
	}
	ps, err := s.lib.People()
	if err != nil {
		return err
	}
	hidden := r.URL.Query().Get("hidden")
	out := make([]jsonPerson, 0, len(ps))
	for _, x := range ps {
		if (hidden == "only" && !x.Hidden) || (hidden != "all" && hidden != "only" && x.Hidden) {
			continue
		}
		out = append(out, toPerson(x))
	}
	writeJSON(w, http.StatusOK, pageList(out, p))
	return nil
}

func (s *Server) getPerson(r *http.Request, id int64) (any, error) {
	p, err := s.person(id)
	return toPerson(p), err
}

// personPatch changes a person: any of name, hidden and cover.
type personPatch struct {
	Name   *string `json:"name"`
	Hidden *bool   `json:"hidden"`
	Cover  *int64  `json:"cover"`
}

func (s *Server) patchPerson(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var req personPatch
	if err := s.readJSON(w, r, &req); err != nil {
		return err
	}
	if req.Name == nil && req.Hidden == nil && req.Cover == nil {
		return badRequest("nothing to change: give name, hidden or cover")
	}
	p, err := s.person(id)
	if err != nil {
		return err
	}
	name := p.Name
	if req.Name != nil {
		if err := s.lib.RenamePerson(name, *req.Name); err != nil {
			return err
		}
		name = *req.Name
	}
	if req.Hidden != nil {
		if err := s.lib.SetHidden(name, *req.Hidden); err != nil {
			return err
		}
	}
	if req.Cover != nil {
		if err := s.lib.SetCover(name, *req.Cover); err != nil {
			return err
		}
	}
	if p, err = s.person(id); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toPerson(p))
	return nil
}

func (s *Server) mergePerson(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var req struct {
		Into int64 `json:"into"`
	}
	if err := s.readJSON(w, r, &req); err != nil {
		return err
	}
	from, err := s.person(id)
	if err != nil {
		return err
	}
	into, err := s.person(req.Into)
	if err != nil {
		return err
	}
	if err := s.lib.MergePeople(from.Name, into.Name); err != nil {
		return err
	}
	if into, err = s.person(req.Into); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toPerson(into))
	return nil
}

// similarPerson is another person and the distance of the two people's
// mean descriptors.
type similarPerson struct {
	jsonPerson
	Distance float64 `json:"distance"`
}

func (s *Server) similarPeople(r *http.Request, id int64) (any, error) {
	if _, err := s.person(id); err != nil {
		return nil, err
	}
	sim, err := s.similar(r.Context(), id)
	return map[string]any{"items": sim}, err
}

// similar lists the other people, nearest mean descriptor first (people
// without a face last).
func (s *Server) similar(ctx context.Context, id int64) ([]similarPerson, error) {
	ps, err := s.lib.People()
	if err != nil {
		return nil, err
	}
	means, err := s.means.get(ctx, s.lib, s.personMeans)
	if err != nil {
		return nil, err
	}
	out := []similarPerson{}
	for _, p := range ps {
		if p.ID == id {
			continue
		}
		d := math.Inf(1)
		if a, b := means[id], means[p.ID]; a != nil && b != nil && len(a) == len(b) {
			d = tagging.Distance(a, b)
		}
		out = append(out, similarPerson{jsonPerson: toPerson(p), Distance: d})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Distance < out[j].Distance })
	for i := range out {
		if math.IsInf(out[i].Distance, 1) {
			out[i].Distance = -1 // JSON has no infinity: -1 means "no faces to compare"
		}
	}
	return out, nil
}

// personMeans returns each person's mean descriptor.
func (s *Server) personMeans() (map[int64][]float32, error) {
	fs, err := s.lib.Faces(tagging.FaceFilter{Descriptors: true})
	if err != nil {
		return nil, err
	}
	means := map[int64][]float32{}
	counts := map[int64]int{}
	for _, f := range fs {
		if f.PersonID == 0 || f.Descriptor == nil {
			continue
		}
		m := means[f.PersonID]
		if m == nil {
			m = make([]float32, len(f.Descriptor))
			means[f.PersonID] = m
		}
		if len(m) != len(f.Descriptor) {
			continue
		}
		for i, v := range f.Descriptor {
			m[i] += v
		}
		counts[f.PersonID]++
	}
	for p, m := range means {
		for i := range m {
			m[i] /= float32(counts[p])
		}
	}
	return means, nil
}

// faceQuery is the selection of GET /faces.
func (s *Server) facesOf(r *http.Request) ([]tagging.Face, error) {
	q := r.URL.Query()
	var f tagging.FaceFilter
	set := 0
	if v := q.Get("photo"); v != "" {
		id, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, badRequest("photo %q: want a photo id", v)
		}
		ph, err := s.photo(id)
		if err != nil {
			return nil, err
		}
		f.Photo = ph.Path
		set++
	}
	if v := q.Get("person"); v != "" {
		id, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, badRequest("person %q: want a person id", v)
		}
		p, err := s.person(id)
		if err != nil {
			return nil, err
		}
		f.Person = p.Name
		set++
	}
	if v := q.Get("cluster"); v != "" {
		id, err := strconv.Atoi(v)
		if err != nil {
			return nil, badRequest("cluster %q: want a cluster id", v)
		}
		cl, err := s.lib.StoredClusters()
		if err != nil {
			return nil, err
		}
		f.IDs = []int64{}
		for fid, c := range cl {
			if c == id {
				f.IDs = append(f.IDs, fid)
			}
		}
		if len(f.IDs) == 0 {
			return nil, notFound("no cluster %d (clusters change as faces are named: list them again)", id)
		}
		set++
	}
	switch q.Get("unknown") {
	case "":
	case "true":
		f.Unknown = true
	default:
		return nil, badRequest("unknown %q: want true", q.Get("unknown"))
	}
	if set > 1 {
		return nil, badRequest("give at most one of photo, person and cluster")
	}
	return s.lib.Faces(f)
}

func (s *Server) listFaces(w http.ResponseWriter, r *http.Request) error {
	p, err := pageOf(r)
	if err != nil {
		return err
	}
	fs, err := s.facesOf(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, pageList(toFaces(fs), p))
	return nil
}

func (s *Server) getFace(r *http.Request, id int64) (any, error) {
	f, err := s.lib.Face(id)
	return toFace(f), err
}

func (s *Server) deleteFace(r *http.Request, id int64) (any, error) {
	if err := s.lib.RemoveFace(id); err != nil {
		return nil, err
	}
	return s.getFace(r, id)
}

func (s *Server) faceThumbnail(r *http.Request, id int64) ([]byte, error) {
	return s.lib.FaceThumbnail(id)
}

// writeImage sends a JPEG that must not be cached: it shows a face.
func writeImage(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "image/jpeg")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}

// faceList is the body of the bulk face edits.
type faceList struct {
	Faces  []int64 `json:"faces"`
	Person string  `json:"person"`
}

func (s *Server) readFaceList(w http.ResponseWriter, r *http.Request, needPerson bool) (faceList, error) {
	var req faceList
	if err := s.readJSON(w, r, &req); err != nil {
		return req, err
	}
	if len(req.Faces) == 0 {
		return req, badRequest("faces: give at least one face id")
	}
	if len(req.Faces) > MaxPageSize*10 {
		return req, badRequest("faces: at most %d at once", MaxPageSize*10)
	}
	if needPerson && strings.TrimSpace(req.Person) == "" {
		return req, badRequest("person: give the person's name")
	}
	if !needPerson && req.Person != "" {
		return req, badRequest("person: not used here")
	}
	return req, nil
}

// writeFaces answers an edit with the faces as they are now.
func (s *Server) writeFaces(w http.ResponseWriter, ids []int64) error {
	fs, err := s.lib.Faces(tagging.FaceFilter{IDs: ids, Removed: true})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"faces": toFaces(fs)})
	return nil
}

func (s *Server) assignFaces(w http.ResponseWriter, r *http.Request) error {
	req, err := s.readFaceList(w, r, true)
	if err != nil {
		return err
	}
	if _, err := s.lib.NameFaces(req.Faces, req.Person); err != nil {
		return err
	}
	return s.writeFaces(w, req.Faces)
}

func (s *Server) rejectFaces(w http.ResponseWriter, r *http.Request) error {
	req, err := s.readFaceList(w, r, true)
	if err != nil {
		return err
	}
	if err := s.lib.RejectFaces(req.Faces, req.Person); err != nil {
		return err
	}
	return s.writeFaces(w, req.Faces)
}

func (s *Server) unassignFaces(w http.ResponseWriter, r *http.Request) error {
	req, err := s.readFaceList(w, r, false)
	if err != nil {
		return err
	}
	if err := s.lib.UnassignFaces(req.Faces); err != nil {
		return err
	}
	return s.writeFaces(w, req.Faces)
}

// newFace is the body of POST /faces: a box the user drew on a photo.
type newFace struct {
	Photo  int64     `json:"photo"`
	Box    *face.Box `json:"box"`
	Person string    `json:"person"`
}

func (s *Server) addFace(w http.ResponseWriter, r *http.Request) error {
	var req newFace
	if err := s.readJSON(w, r, &req); err != nil {
		return err
	}
	if req.Box == nil {
		return badRequest("box: give the face's box {x, y, width, height} in photo pixels")
	}
	p, err := s.pipeline()
	if err != nil {
		return err
	}
	ph, err := s.photo(req.Photo)
	if err != nil {
		return err
	}
	b := *req.Box
	if _, err := tagging.ParseBox(fmt.Sprintf("%g,%g,%g,%g", b.X, b.Y, b.Width, b.Height)); err != nil {
		return err
	}
	f, err := s.lib.AddManualFace(r.Context(), p, ph.Path, b, strings.TrimSpace(req.Person))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, toFace(f))
	return nil
}

// jsonCluster is a cluster of unnamed faces.
type jsonCluster struct {
	ID    int     `json:"id"`
	Size  int     `json:"size"`
	Faces []int64 `json:"faces"`
}

func (s *Server) clusters(r *http.Request) ([]jsonCluster, error) {
	o, err := tagging.NewClusterOptions(tagging.DefaultClusterAlgorithm)
	if err != nil {
		return nil, err
	}
	gs, err := s.groups.get(r.Context(), s.lib, func() ([]tagging.ClusterGroup, error) {
		return s.lib.UpdateClusters(r.Context(), o, false)
	})
	if err != nil {
		return nil, err
	}
	min := 2
	if r.URL.Query().Get("singles") == "true" {
		min = 1
	}
	out := []jsonCluster{}
	for _, g := range gs {
		if len(g.Faces) >= min {
			out = append(out, jsonCluster{ID: g.ID, Size: len(g.Faces), Faces: g.Faces})
		}
	}
	return out, nil
}

func (s *Server) listClusters(w http.ResponseWriter, r *http.Request) error {
	p, err := pageOf(r)
	if err != nil {
		return err
	}
	cs, err := s.clusters(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, pageList(cs, p))
	return nil
}

// jsonSuggestion proposes a person for a face.
type jsonSuggestion struct {
	Face     int64   `json:"face"`
	PersonID int64   `json:"person_id"`
	Person   string  `json:"person"`
	Distance float64 `json:"distance"`
}

// suggestionSet is the library's current suggestions and their space.
type suggestionSet struct {
	space tagging.Space
	all   []tagging.LibrarySuggestion
}

// suggestionSet returns the library's current suggestions (cached).
func (s *Server) suggestionSet(r *http.Request) (suggestionSet, error) {
	return s.sugs.get(r.Context(), s.lib, func() (suggestionSet, error) {
		space, _, err := s.lib.SpaceForSuggestions(r.Context(), false)
		if err != nil {
			return suggestionSet{}, err
		}
		sugs, err := s.lib.SuggestionsIn(space)
		return suggestionSet{space: space, all: sugs}, err
	})
}

func (s *Server) suggestions(r *http.Request) ([]jsonSuggestion, tagging.Space, error) {
	var person int64
	if v := r.URL.Query().Get("person"); v != "" {
		id, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, tagging.Space{}, badRequest("person %q: want a person id", v)
		}
		if _, err := s.person(id); err != nil {
			return nil, tagging.Space{}, err
		}
		person = id
	}
	set, err := s.suggestionSet(r)
	if err != nil {
		return nil, tagging.Space{}, err
	}
	space := set.space
	out := []jsonSuggestion{}
	for _, x := range set.all {
		if person == 0 || x.Person == person {
			out = append(out, jsonSuggestion{Face: x.Face, PersonID: x.Person, Person: x.Name, Distance: x.Distance})
		}
	}
	return out, space, nil
}

func (s *Server) listSuggestions(w http.ResponseWriter, r *http.Request) error {
	p, err := pageOf(r)
	if err != nil {
		return err
	}
	out, _, err := s.suggestions(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, pageList(out, p))
	return nil
}

// acceptSuggestions assigns each listed face to the person suggested for
// it in the suggestions the user was shown (this server's current set,
// recomputed after any change to the library, see cached), through
// AssignAuto: never over a decision of the user's.
func (s *Server) acceptSuggestions(w http.ResponseWriter, r *http.Request) error {
	req, err := s.readFaceList(w, r, false)
	if err != nil {
		return err
	}
	fs, err := s.lib.Faces(tagging.FaceFilter{IDs: req.Faces, Removed: true})
	if err != nil {
		return err
	}
	known := map[int64]bool{}
	for _, f := range fs {
		known[f.ID] = true
	}
	for _, id := range req.Faces {
		if !known[id] {
			return notFound("no face %d in the library: nothing accepted", id)
		}
	}
	set, err := s.suggestionSet(r)
	if err != nil {
		return err
	}
	by := map[int64]tagging.LibrarySuggestion{}
	for _, x := range set.all {
		by[x.Face] = x
	}
	var as []tagging.Assignment
	none := []int64{}
	for _, id := range req.Faces {
		if x, ok := by[id]; ok {
			as = append(as, tagging.Assignment{Face: id, Person: x.Person})
		} else {
			none = append(none, id)
		}
	}
	if len(as) > 0 {
		if _, err := s.lib.AssignAuto(as); err != nil {
			return err
		}
	}
	after, err := s.lib.Faces(tagging.FaceFilter{IDs: req.Faces, Removed: true})
	if err != nil {
		return err
	}
	out := []jsonSuggestion{}
	for _, f := range after {
		if x, ok := by[f.ID]; ok && f.PersonID == x.Person && f.AssignedBy == tagging.ByAuto {
			out = append(out, jsonSuggestion{Face: f.ID, PersonID: x.Person, Person: x.Name, Distance: x.Distance})
		} else if ok {
			none = append(none, f.ID)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"accepted": out, "without_suggestion": none})
	return nil
}

// rejectSuggestions records "not this person" for each face's current
// suggestion (the person named in the request, so that a suggestion that
// changed meanwhile is not rejected in the user's name).
func (s *Server) rejectSuggestions(w http.ResponseWriter, r *http.Request) error {
	return s.rejectFaces(w, r)
}

func (s *Server) listPhotos(w http.ResponseWriter, r *http.Request) error {
	p, err := pageOf(r)
	if err != nil {
		return err
	}
	ps, err := s.lib.Photos()
	if err != nil {
		return err
	}
	out := make([]jsonPhoto, len(ps))
	for i, x := range ps {
		out[i] = toPhoto(x)
	}
	writeJSON(w, http.StatusOK, pageList(out, p))
	return nil
}

func (s *Server) getPhoto(r *http.Request, id int64) (any, error) {
	ph, err := s.photo(id)
	if err != nil {
		return nil, err
	}
	fs, err := s.lib.Faces(tagging.FaceFilter{Photo: ph.Path})
	if err != nil {
		return nil, err
	}
	out := toPhoto(ph)
	out.Faces = toFaces(fs)
	if out.Faces == nil {
		out.Faces = []jsonFace{}
	}
	return out, nil
}

// photoImage sends the photo as the library sees it: decoded under the
// limits, EXIF orientation applied (the boxes' coordinates), as JPEG.
func (s *Server) photoImage(r *http.Request, id int64) ([]byte, error) {
	ph, err := s.photo(id)
	if err != nil {
		return nil, err
	}
	img, _, err := imaging.DecodeFile(ph.Path, s.opt.Limits)
	if err != nil {
		return nil, &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("photo %d cannot be shown: %v", id, err)}
	}
	var buf bytes.Buffer
	if err := img.Encode(&buf, imaging.JPEG); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// pipeline returns the face pipeline or a 503 error without one.
func (s *Server) pipeline() (*face.Pipeline, error) {
	if s.opt.Pipeline == nil {
		return nil, &httpError{status: http.StatusServiceUnavailable, msg: "this server has no face pipeline: it cannot find faces"}
	}
	return s.opt.Pipeline, nil
}
