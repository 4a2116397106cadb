package serve

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"sort"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/tagging"
)

// Folder is a folder holding photos of the library, with how many.
type Folder struct {
	Path   string `json:"path"`
	Photos int    `json:"photos"`
}

// LibraryStatus is GET /status: the library's counts, folders, learned
// metric and latest scan.
type LibraryStatus struct {
	*tagging.Status
	Folders    []Folder            `json:"folders"`
	UseMetric  bool                `json:"use_metric"`
	Metric     *tagging.MetricInfo `json:"metric,omitempty"`
	LatestScan *ScanState          `json:"latest_scan,omitempty"`
}

func (s *Server) status(r *http.Request) (*LibraryStatus, error) {
	st, err := s.lib.Status(r.Context())
	if err != nil {
		return nil, err
	}
	out := &LibraryStatus{Status: st, Folders: []Folder{}}
	ps, err := s.lib.Photos()
	if err != nil {
		return nil, err
	}
	n := map[string]int{}
	for _, p := range ps {
		n[filepath.Dir(p.Path)]++
	}
	for d, c := range n {
		out.Folders = append(out.Folders, Folder{Path: d, Photos: c})
	}
	sort.Slice(out.Folders, func(i, j int) bool { return out.Folders[i].Path < out.Folders[j].Path })
	if out.UseMetric, err = s.lib.UseMetric(); err != nil {
		return nil, err
	}
	switch _, info, err := s.lib.LatestMetric(); {
	case err == nil:
		out.Metric = &info
	case !errors.Is(err, tagging.ErrNoMetric):
		return nil, err
	}
	if id := s.scans.latest(); id > 0 {
		st, _, _ := s.scans.get(id)
		out.LatestScan = &st
	}
	return out, nil
}

// ledgerView is one data-set ledger on the Privacy page.
type ledgerView struct {
	DataSet dp.DataSet
	Budget  dp.Budget
	Spent   float64
	Members int
	History []dp.HistoryEntry
}

// ledgers reads the ledger folder, if one is configured and exists (it is
// never created here: the page only reads).
func (s *Server) ledgers() ([]ledgerView, error) {
	if s.opt.LedgerDir == "" {
		return nil, nil
	}
	if _, err := os.Stat(filepath.Join(s.opt.LedgerDir, "ledger.key")); err != nil {
		return nil, nil
	}
	d, err := dp.OpenLedgerDir(s.opt.LedgerDir)
	if err != nil {
		return nil, err
	}
	sets, err := d.List()
	if err != nil {
		return nil, err
	}
	var out []ledgerView
	for _, set := range sets {
		l, err := d.Read(set)
		if err != nil {
			return nil, err
		}
		b, _ := l.Budget()
		sp, err := l.Spent(nil)
		if err != nil {
			return nil, err
		}
		out = append(out, ledgerView{DataSet: set, Budget: b, Spent: sp.Epsilon, Members: sp.Members, History: l.History()})
	}
	return out, nil
}
