package serve

import (
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"strconv"

	"github.com/veil-privacy/veil/eval"
	"github.com/veil-privacy/veil/face"
	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/tagging"
)

// maxParts bounds the parts of an upload (fields besides the files are
// ignored but read).
const maxParts = 8

// readUploads reads the named files of a multipart/form-data body into
// memory. It never calls ParseMultipartForm, which spills large files to
// temporary files on disk: a photo uploaded for a search must not be written
// anywhere unencrypted. Each file is limited to the decoding limit's bytes
// and the body to the sum.
func (s *Server) readUploads(w http.ResponseWriter, r *http.Request, names ...string) (map[string][]byte, error) {
	ct, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || ct != "multipart/form-data" || params["boundary"] == "" {
		return nil, &httpError{status: http.StatusUnsupportedMediaType,
			msg: fmt.Sprintf("want a multipart/form-data body with the image in field %q", names[0])}
	}
	limit := s.opt.Limits.MaxBytes
	r.Body = http.MaxBytesReader(w, r.Body, int64(len(names))*limit+64<<10)
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, badRequest("malformed multipart body: %v", err)
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	got := map[string][]byte{}
	for i := 0; ; i++ {
		if i == maxParts {
			return nil, badRequest("too many parts in the multipart body (at most %d)", maxParts)
		}
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			var mb *http.MaxBytesError
			if errors.As(err, &mb) {
				return nil, err
			}
			return nil, badRequest("malformed multipart body: %v", err)
		}
		name := part.FormName()
		b, err := io.ReadAll(io.LimitReader(part, limit+1))
		if err != nil {
			var mb *http.MaxBytesError
			if errors.As(err, &mb) {
				return nil, err
			}
			return nil, badRequest("reading field %q: %v", name, err)
		}
		if !want[name] {
			continue
		}
		if int64(len(b)) > limit {
			return nil, &httpError{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("%q is over the %d-byte limit", name, limit)}
		}
		got[name] = b
	}
	for _, n := range names {
		if got[n] == nil {
			return nil, badRequest("no file in field %q", n)
		}
	}
	return got, nil
}

// facesIn decodes an uploaded image with the CLI's checks (format, size,
// pixel count before decoding: the decompression-bomb check) and finds its
// faces with descriptors.
func (s *Server) facesIn(field string, data []byte) ([]face.Face, error) {
	p, err := s.pipeline()
	if err != nil {
		return nil, err
	}
	img, _, err := imaging.Decode(data, s.opt.Limits)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	found, _, err := p.Run(img)
	if err != nil {
		return nil, fmt.Errorf("%s: finding faces: %w", field, err)
	}
	return found, nil
}

func (s *Server) uploadFaces(w http.ResponseWriter, r *http.Request) ([]face.Face, error) {
	up, err := s.readUploads(w, r, "file")
	if err != nil {
		return nil, err
	}
	return s.facesIn("file", up["file"])
}

// searchFace is one face of a searched photo.
type searchFace struct {
	Box      face.Box      `json:"box"`
	PersonID int64         `json:"person_id,omitempty"`
	Person   string        `json:"person,omitempty"`
	Distance float64       `json:"distance,omitempty"`
	Matches  []searchMatch `json:"matches"`
}

type searchMatch struct {
	Face     int64   `json:"face"`
	Photo    int64   `json:"photo_id"`
	Path     string  `json:"photo"`
	PersonID int64   `json:"person_id,omitempty"`
	Person   string  `json:"person,omitempty"`
	Distance float64 `json:"distance"`
}

// lookUp searches the library for the faces (as veil search does).
func (s *Server) lookUp(found []face.Face, limit int) ([]searchFace, error) {
	out := make([]searchFace, len(found))
	if len(found) == 0 {
		return out, nil
	}
	q := make([][]float32, len(found))
	for i := range found {
		q[i] = found[i].Descriptor
	}
	res, people, err := s.lib.SearchLibrary(q, tagging.DefaultSuggestOptions(), tagging.SearchDistance, limit)
	if err != nil {
		return nil, err
	}
	photos, err := s.lib.Photos()
	if err != nil {
		return nil, err
	}
	path := map[int64]string{}
	for _, p := range photos {
		path[p.ID] = p.Path
	}
	for i, x := range res {
		out[i] = searchFace{Box: found[i].Box, PersonID: x.Person, Distance: x.Distance, Matches: []searchMatch{}}
		if x.Person != 0 {
			out[i].Person = people[x.Person].Name
		}
		for _, m := range x.Matches {
			sm := searchMatch{Face: m.Face, Photo: m.Photo, Path: path[m.Photo], PersonID: m.Person, Distance: m.Distance}
			if m.Person != 0 {
				sm.Person = people[m.Person].Name
			}
			out[i].Matches = append(out[i].Matches, sm)
		}
	}
	return out, nil
}

func (s *Server) search(w http.ResponseWriter, r *http.Request) error {
	found, err := s.uploadFaces(w, r)
	if err != nil {
		return err
	}
	out, err := s.lookUp(found, 20)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"faces": out})
	return nil
}

// CompreFace's shapes: a box with integer corners and the detector's
// probability; subjects with a similarity in [0, 1].
type cfBox struct {
	Probability float64 `json:"probability"`
	XMin        int     `json:"x_min"`
	YMin        int     `json:"y_min"`
	XMax        int     `json:"x_max"`
	YMax        int     `json:"y_max"`
}

type cfSubject struct {
	Subject    string  `json:"subject"`
	Similarity float64 `json:"similarity"`
	Distance   float64 `json:"distance"`
}

func toCFBox(f face.Face) cfBox {
	b := f.Box
	return cfBox{Probability: f.Score, XMin: int(math.Round(b.X)), YMin: int(math.Round(b.Y)),
		XMax: int(math.Round(b.X + b.Width)), YMax: int(math.Round(b.Y + b.Height))}
}

// Similarity turns a descriptor distance into CompreFace's similarity in
// [0, 1]: 1 at distance 0, 0.5 at the threshold, 0 at twice the threshold
// or farther. It is monotone, so it orders matches as distance does.
func Similarity(distance, threshold float64) float64 {
	return math.Max(0, math.Min(1, 1-distance/(2*threshold)))
}

func (s *Server) detect(w http.ResponseWriter, r *http.Request) error {
	found, err := s.uploadFaces(w, r)
	if err != nil {
		return err
	}
	res := make([]map[string]any, len(found))
	for i, f := range found {
		res[i] = map[string]any{"box": toCFBox(f)}
	}
	writeJSON(w, http.StatusOK, map[string]any{"result": res})
	return nil
}

// recognize answers CompreFace's recognize: each face of the image with the
// library's people nearest to it (prediction_count of them, default 1).
func (s *Server) recognize(w http.ResponseWriter, r *http.Request) error {
	n := 1
	if v := r.URL.Query().Get("prediction_count"); v != "" {
		k, err := strconv.Atoi(v)
		if err != nil || k < 1 || k > 100 {
			return badRequest("prediction_count %q: want 1 to 100", v)
		}
		n = k
	}
	found, err := s.uploadFaces(w, r)
	if err != nil {
		return err
	}
	faces, err := s.lookUp(found, 0)
	if err != nil {
		return err
	}
	res := make([]map[string]any, len(faces))
	for i, f := range faces {
		subjects := []cfSubject{}
		seen := map[int64]bool{}
		if f.PersonID != 0 {
			seen[f.PersonID] = true
			subjects = append(subjects, cfSubject{Subject: f.Person, Distance: f.Distance, Similarity: Similarity(f.Distance, tagging.SuggestDistance)})
		}
		for _, m := range f.Matches {
			if len(subjects) >= n {
				break
			}
			if m.PersonID == 0 || seen[m.PersonID] {
				continue
			}
			seen[m.PersonID] = true
			subjects = append(subjects, cfSubject{Subject: m.Person, Distance: m.Distance, Similarity: Similarity(m.Distance, tagging.SuggestDistance)})
		}
		if len(subjects) > n {
			subjects = subjects[:n]
		}
		res[i] = map[string]any{"box": toCFBox(found[i]), "subjects": subjects}
	}
	writeJSON(w, http.StatusOK, map[string]any{"result": res})
	return nil
}

// verify answers CompreFace's verify: the largest face of source_image
// against every face of target_image, each with its distance, similarity
// and whether it is the same person at veil compare's threshold.
func (s *Server) verify(w http.ResponseWriter, r *http.Request) error {
	up, err := s.readUploads(w, r, "source_image", "target_image")
	if err != nil {
		return err
	}
	src, err := s.facesIn("source_image", up["source_image"])
	if err != nil {
		return err
	}
	dst, err := s.facesIn("target_image", up["target_image"])
	if err != nil {
		return err
	}
	if len(src) == 0 {
		return badRequest("source_image: no face found")
	}
	best := 0
	for i, f := range src {
		if f.Box.Width*f.Box.Height > src[best].Box.Width*src[best].Box.Height {
			best = i
		}
	}
	thr := eval.DescriptorThreshold
	matches := make([]map[string]any, len(dst))
	for i, f := range dst {
		d := tagging.Distance(src[best].Descriptor, f.Descriptor)
		matches[i] = map[string]any{"box": toCFBox(f), "distance": d, "similarity": Similarity(d, thr), "same_person": d <= thr}
	}
	writeJSON(w, http.StatusOK, map[string]any{"threshold": thr, "result": []map[string]any{{
		"source_image_face": map[string]any{"box": toCFBox(src[best])}, "face_matches": matches}}})
	return nil
}
