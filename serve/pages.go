package serve

import (
	"bytes"
	"cmp"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/veil-privacy/veil/tagging"
)

//go:embed templates/*.html static/*
var assets embed.FS

// Page sizes of the UI.
const (
	peoplePerPage   = 120
	facesPerPage    = 200
	clustersPerPage = 20
	clusterShown    = 24
	// foldersShown is how many folders the Library page lists (those
	// with the most photos); GET /api/v1/status lists them all.
	foldersShown = 50
)

// pages holds the parsed templates, one set per page.
type pages struct {
	t map[string]*template.Template
}

func newPages() (*pages, error) {
	funcs := template.FuncMap{
		"add": func(a, b int) int { return a + b },
		"sub": func(a, b int) int { return a - b },
		"pct": func(a, b float64) string { return strconv.FormatFloat(100*a/b, 'f', 4, 64) },
	}
	p := &pages{t: map[string]*template.Template{}}
	names, err := fs.Glob(assets, "templates/*.html")
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		base := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if base == "layout" {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(assets, "templates/layout.html", n)
		if err != nil {
			return nil, fmt.Errorf("serve: template %s: %w", n, err)
		}
		p.t[base] = t
	}
	return p, nil
}

// view is what every page template receives.
type view struct {
	Title string
	Nav   string
	CSRF  string
	Data  any
}

// pager is the position in a paged list.
type pager struct {
	Page, Pages, Total int
	Base               string
}

func (p pager) Prev() int     { return p.Page - 1 }
func (p pager) Next() int     { return p.Page + 1 }
func (p pager) HasPrev() bool { return p.Page > 1 }
func (p pager) HasNext() bool { return p.Page < p.Pages }

// pageNumber reads ?page= (1-based) and returns the slice bounds for size
// items per page.
func pageNumber(r *http.Request, total, size int, base string) (pager, int, int, error) {
	n := 1
	if v := r.URL.Query().Get("page"); v != "" {
		k, err := strconv.Atoi(v)
		if err != nil || k < 1 {
			return pager{}, 0, 0, badRequest("page %q: want a positive integer", v)
		}
		n = k
	}
	pages := max(1, (total+size-1)/size)
	lo := min((n-1)*size, total)
	return pager{Page: n, Pages: pages, Total: total, Base: base}, lo, min(lo+size, total), nil
}

func (s *Server) page(name, nav string, h func(r *http.Request) (string, any, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		title, data, err := h(r)
		if err != nil {
			s.writePageError(w, r, err)
			return
		}
		var buf bytes.Buffer
		if err := s.pages.t[name].Execute(&buf, view{Title: title, Nav: nav, CSRF: csrfOf(r), Data: data}); err != nil {
			s.writePageError(w, r, err)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(buf.Bytes())
	})
}

func (s *Server) writePageError(w http.ResponseWriter, r *http.Request, err error) {
	st := statusOf(err)
	msg := err.Error()
	if st == http.StatusInternalServerError {
		s.log.Error("serve: page failed", "route", r.Pattern, "err", err)
		msg = "internal error (see the server's log)"
	}
	var buf bytes.Buffer
	if e := s.pages.t["error"].Execute(&buf, view{Title: "Error", CSRF: csrfOf(r), Data: map[string]any{"Status": st, "Message": msg}}); e != nil {
		writeError(w, st, msg)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(st)
	_, _ = w.Write(buf.Bytes())
}

func (s *Server) pageRoutes() []route {
	static, _ := fs.Sub(assets, "static")
	files := http.FileServerFS(static)
	return []route{
		{method: "GET", pattern: "/{$}", handler: s.page("people", "people", s.peoplePage)},
		{method: "GET", pattern: "/people/{id}", handler: s.page("person", "people", s.personPage)},
		{method: "GET", pattern: "/unknown", handler: s.page("unknown", "unknown", s.unknownPage)},
		{method: "GET", pattern: "/photos/{id}", handler: s.page("photo", "", s.photoPage)},
		{method: "GET", pattern: "/search", handler: s.page("search", "search", s.searchPage)},
		{method: "GET", pattern: "/library", handler: s.page("library", "library", s.libraryPage)},
		{method: "GET", pattern: "/privacy", handler: s.page("privacy", "privacy", s.privacyPage)},
		{method: "GET", pattern: "/static/", handler: http.StripPrefix("/static/", files)},
		s.api("GET", "/api/v1/people/{id}/thumbnail", s.imageByID(s.personThumbnail)),
	}
}

// personThumbnail returns the person's cover face, or their first face.
func (s *Server) personThumbnail(r *http.Request, id int64) ([]byte, error) {
	p, err := s.person(id)
	if err != nil {
		return nil, err
	}
	fid := p.Cover
	if fid == 0 {
		fs, err := s.lib.Faces(tagging.FaceFilter{Person: p.Name})
		if err != nil {
			return nil, err
		}
		if len(fs) == 0 {
			return nil, notFound("%s has no face", p.Name)
		}
		fid = fs[0].ID
	}
	return s.lib.FaceThumbnail(fid)
}

func (s *Server) peoplePage(r *http.Request) (string, any, error) {
	ps, err := s.lib.People()
	if err != nil {
		return "", nil, err
	}
	showHidden := r.URL.Query().Get("hidden") == "all"
	var shown []tagging.Person
	hidden := 0
	for _, p := range ps {
		if p.Hidden {
			hidden++
			if !showHidden {
				continue
			}
		}
		shown = append(shown, p)
	}
	base := "/?"
	if showHidden {
		base = "/?hidden=all&"
	}
	pg, lo, hi, err := pageNumber(r, len(shown), peoplePerPage, base)
	if err != nil {
		return "", nil, err
	}
	return "People", map[string]any{"People": shown[lo:hi], "Pager": pg, "Hidden": hidden, "ShowHidden": showHidden}, nil
}

func (s *Server) personPage(r *http.Request) (string, any, error) {
	id, err := pathID(r)
	if err != nil {
		return "", nil, err
	}
	p, err := s.person(id)
	if err != nil {
		return "", nil, err
	}
	// p.Faces counts them (an index): read only the page's faces.
	pg, lo, hi, err := pageNumber(r, p.Faces, facesPerPage, fmt.Sprintf("/people/%d?", id))
	if err != nil {
		return "", nil, err
	}
	fs, err := s.lib.Faces(tagging.FaceFilter{Person: p.Name, Offset: lo, Limit: max(hi-lo, 1)})
	if err != nil {
		return "", nil, err
	}
	photos, err := s.lib.PersonPhotos(p.Name)
	if err != nil {
		return "", nil, err
	}
	if len(fs) > hi-lo {
		fs = fs[:hi-lo]
	}
	return p.Name, map[string]any{"Person": p, "Faces": fs, "Pager": pg, "Photos": len(photos)}, nil
}

// clusterView is a cluster on the Unknown page.
type clusterView struct {
	ID, Size int
	Faces    []int64
	More     int
}

func (s *Server) unknownPage(r *http.Request) (string, any, error) {
	cs, err := s.clusters(r)
	if err != nil {
		return "", nil, err
	}
	pg, lo, hi, err := pageNumber(r, len(cs), clustersPerPage, "/unknown?")
	if err != nil {
		return "", nil, err
	}
	var views []clusterView
	for _, c := range cs[lo:hi] {
		v := clusterView{ID: c.ID, Size: c.Size, Faces: c.Faces}
		if len(v.Faces) > clusterShown {
			v.More, v.Faces = len(v.Faces)-clusterShown, v.Faces[:clusterShown]
		}
		views = append(views, v)
	}
	return "Unknown faces", map[string]any{"Clusters": views, "Pager": pg}, nil
}

func (s *Server) photoPage(r *http.Request) (string, any, error) {
	id, err := pathID(r)
	if err != nil {
		return "", nil, err
	}
	ph, err := s.photo(id)
	if err != nil {
		return "", nil, err
	}
	fs, err := s.lib.Faces(tagging.FaceFilter{Photo: ph.Path})
	if err != nil {
		return "", nil, err
	}
	return ph.Path, map[string]any{"Photo": ph, "Faces": fs}, nil
}

func (s *Server) searchPage(r *http.Request) (string, any, error) {
	return "Search", nil, nil
}

func (s *Server) libraryPage(r *http.Request) (string, any, error) {
	st, err := s.status(r)
	if err != nil {
		return "", nil, err
	}
	folders, more := topFolders(st.Folders, foldersShown)
	return "Library", map[string]any{"Status": st, "Folders": folders, "MoreFolders": more, "Dir": s.lib.Dir(),
		"Scanner": s.opt.Pipeline != nil}, nil
}

// topFolders returns the n folders holding the most photos (ties by
// path), in path order, and how many others there are: a library of
// photos in thousands of folders would otherwise give the page thousands
// of lines, which the browser takes hundreds of milliseconds to lay out.
func topFolders(fs []Folder, n int) ([]Folder, int) {
	if len(fs) <= n {
		return fs, 0
	}
	top := slices.Clone(fs)
	slices.SortFunc(top, func(a, b Folder) int {
		if a.Photos != b.Photos {
			return cmp.Compare(b.Photos, a.Photos)
		}
		return strings.Compare(a.Path, b.Path)
	})
	top = top[:n]
	slices.SortFunc(top, func(a, b Folder) int { return strings.Compare(a.Path, b.Path) })
	return top, len(fs) - n
}

func (s *Server) privacyPage(r *http.Request) (string, any, error) {
	st, err := s.status(r)
	if err != nil {
		return "", nil, err
	}
	ls, err := s.ledgers()
	if err != nil {
		return "", nil, err
	}
	return "Privacy", map[string]any{"Status": st, "Ledgers": ls, "LedgerDir": s.opt.LedgerDir, "Model": s.opt.ModelInfo,
		"Dir": s.lib.Dir(), "Token": s.opt.Token != ""}, nil
}
