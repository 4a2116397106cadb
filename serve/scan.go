package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/veil-privacy/veil/tagging"
)

// errScanRunning refuses a second scan while one runs.
var errScanRunning = errors.New("a scan is running: wait for it to finish")

// ScanState is a scan's progress as the API reports it.
type ScanState struct {
	ID    int      `json:"id"`
	Paths []string `json:"paths"`
	// State is "reading", "analysing", "done", "failed" or "stopped".
	State    string              `json:"state"`
	Read     int                 `json:"read"`
	Done     int                 `json:"done"`
	Total    int                 `json:"total"`
	Analyse  int                 `json:"analyse"`
	Analysed int                 `json:"analysed"`
	Added    int                 `json:"added"`
	Faces    int                 `json:"faces"`
	Errors   []tagging.FileError `json:"errors"`
	// Error is why the scan failed.
	Error   string    `json:"error,omitempty"`
	Started time.Time `json:"started"`
	Seconds float64   `json:"seconds"`
}

func (s ScanState) finished() bool {
	return s.State == "done" || s.State == "failed" || s.State == "stopped"
}

// scans runs one scan at a time and keeps the states of the scans run.
type scans struct {
	srv     *Server
	mu      sync.Mutex
	all     []*ScanState
	changed chan struct{} // closed and replaced on every change
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

func newScans(s *Server) *scans { return &scans{srv: s, changed: make(chan struct{})} }

// update changes scan st under the lock and wakes the watchers.
func (sc *scans) update(f func()) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	f()
	close(sc.changed)
	sc.changed = make(chan struct{})
}

func (sc *scans) start(paths []string) (ScanState, error) {
	p, err := sc.srv.pipeline()
	if err != nil {
		return ScanState{}, err
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	for _, st := range sc.all {
		if !st.finished() {
			return ScanState{}, errScanRunning
		}
	}
	st := &ScanState{ID: len(sc.all) + 1, Paths: paths, State: "reading", Started: time.Now(), Errors: []tagging.FileError{}}
	sc.all = append(sc.all, st)
	ctx, cancel := context.WithCancel(context.Background())
	sc.cancel = cancel
	sc.wg.Add(1)
	go func() {
		defer sc.wg.Done()
		defer cancel()
		opt := tagging.IndexOptions{Pipeline: p,
			Reading: func(done, total int) { sc.update(func() { st.Read, st.Total = done, total }) },
			Planned: func(analyse, rest int) { sc.update(func() { st.State, st.Analyse = "analysing", analyse }) },
			Progress: func(pr tagging.IndexProgress) {
				sc.update(func() {
					st.Done, st.Total = pr.Done, pr.Total
					if pr.Analysed {
						st.Analysed++
					}
				})
			}}
		rep, err := sc.srv.lib.Index(ctx, paths, opt)
		sc.update(func() {
			st.Seconds = time.Since(st.Started).Seconds()
			if rep != nil {
				st.Added, st.Faces = rep.Added+rep.Updated, rep.Faces
				if rep.Errors != nil {
					st.Errors = rep.Errors
				}
			}
			switch {
			case err != nil && ctx.Err() != nil:
				st.State = "stopped"
			case err != nil:
				st.State, st.Error = "failed", err.Error()
			default:
				st.State = "done"
			}
		})
	}()
	return *st, nil
}

// get returns scan id's state and the channel closed at its next change.
func (sc *scans) get(id int) (ScanState, <-chan struct{}, bool) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if id < 1 || id > len(sc.all) {
		return ScanState{}, nil, false
	}
	st := *sc.all[id-1]
	st.Errors = append([]tagging.FileError{}, st.Errors...)
	if !st.finished() {
		st.Seconds = time.Since(st.Started).Seconds()
	}
	return st, sc.changed, true
}

// latest returns the newest scan's id (0: none).
func (sc *scans) latest() int {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return len(sc.all)
}

func (sc *scans) stop() {
	sc.mu.Lock()
	if sc.cancel != nil {
		sc.cancel()
	}
	sc.mu.Unlock()
	sc.wg.Wait()
}

func (s *Server) startScan(w http.ResponseWriter, r *http.Request) error {
	var req struct {
		Paths []string `json:"paths"`
	}
	if err := s.readJSON(w, r, &req); err != nil {
		return err
	}
	if len(req.Paths) == 0 {
		return badRequest("paths: give at least one folder or photo")
	}
	for i, p := range req.Paths {
		if !filepath.IsAbs(p) {
			return badRequest("paths[%d] %q: give an absolute path", i, p)
		}
		if _, err := os.Stat(p); err != nil {
			return badRequest("paths[%d] %q: cannot read it", i, p)
		}
	}
	st, err := s.scans.start(req.Paths)
	if err != nil {
		return err
	}
	w.Header().Set("Location", fmt.Sprintf("/api/v1/scans/%d", st.ID))
	writeJSON(w, http.StatusAccepted, st)
	return nil
}

func (s *Server) scanOf(r *http.Request) (int, error) {
	v := r.PathValue("id")
	id, err := strconv.Atoi(v)
	if err != nil || id < 1 {
		return 0, badRequest("scan id %q: want a positive integer", v)
	}
	if _, _, ok := s.scans.get(id); !ok {
		return 0, notFound("no scan %d", id)
	}
	return id, nil
}

func (s *Server) getScan(w http.ResponseWriter, r *http.Request) error {
	id, err := s.scanOf(r)
	if err != nil {
		return err
	}
	st, _, _ := s.scans.get(id)
	writeJSON(w, http.StatusOK, st)
	return nil
}

// scanEvents streams a scan's progress as server-sent events: a "progress"
// event with the state at each change (at most every 200 ms), and a final
// "end" event when the scan finishes.
func (s *Server) scanEvents(w http.ResponseWriter, r *http.Request) error {
	id, err := s.scanOf(r)
	if err != nil {
		return err
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		return errors.New("streaming is not supported by this connection")
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		st, changed, _ := s.scans.get(id)
		b, _ := json.Marshal(st)
		ev := "progress"
		if st.finished() {
			ev = "end"
		}
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev, b); err != nil {
			return nil
		}
		fl.Flush()
		if st.finished() {
			return nil
		}
		select {
		case <-r.Context().Done():
			return nil
		case <-changed:
		}
		select {
		case <-r.Context().Done():
			return nil
		case <-tick.C:
		}
	}
}
