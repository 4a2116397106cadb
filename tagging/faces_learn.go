package tagging

// The library's own metric (issue 15 §6; Irene, Section III.B).
//
// LearnMetric learns a linear map V (package metric, LMNN) from the user's
// decisions: the faces the user named (assigned_by = 'user') are the
// names, and every rejection ("this is not X") makes the face a negative
// for X's faces. Automatic assignments are not names: learning from the
// program's own guesses would entrench its mistakes. The first metric
// starts from the library's secret random rotation (metric.RandomRotation
// of RotationSeed, a sub-key of the library's data key), so the library's
// faceprints V·x are in coordinates only its key holder knows; each later
// one warm-starts from the previous V.
//
// Each metric is a new row of the metric table (its id is the version),
// sealed like every field that identifies people: the map, the
// suggestion distance carried over to its space (metric.MatchThreshold of
// SuggestDistance: as many unnamed faces within it as under plain
// descriptors) and the number of names it was learned from. The last keepMetrics versions are kept.
//
// Learning never changes a face, a person or a rejection: it writes only
// the metric table. Suggestions made with a metric are computed when asked
// for, so a new metric cannot overwrite the user's decisions either.
//
// Suggestions use the metric only when the library's setting says so
// (SetUseMetric; veil suggest --use-metric for one run): on LFW the
// learned metric did not improve suggestions enough to be the default (see
// UseMetricDefault).
//
// Automatic retraining (RetrainIfDue, which SpaceForSuggestions calls
// when suggestions are asked for with the metric in use, so a library that
// does not use its metric spends nothing on it): a metric is due when the library has at least RetrainFirstNames names
// and none yet, or when the names have grown since the last metric by at
// least RetrainGrowth of that metric's names and by at least
// RetrainMinNew. Growth by a fraction keeps the number of retrainings
// logarithmic in the library's size (each costs more as names accumulate),
// and the floor keeps a small library from retraining on every few names.

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/veil-privacy/veil/metric"
	"github.com/veil-privacy/veil/tagging/match"
)

// Retraining rule (see the file comment).
const (
	// RetrainFirstNames is the number of names after which the first
	// metric is learned automatically.
	RetrainFirstNames = 20
	// RetrainGrowth is the growth of the names, as a fraction of the last
	// metric's, that makes a new metric due.
	RetrainGrowth = 0.25
	// RetrainMinNew is the fewest new names that make a new metric due.
	RetrainMinNew = 20
	// keepMetrics is how many metric versions are kept.
	keepMetrics = 3
)

// UseMetricDefault is whether a library's suggestions use its learned
// metric when the user has not chosen: off, because on LFW's development
// identities the learned metric suggested worse than plain descriptors
// (veil bench metric, LMNN defaults): at the distance that lets 5% of the
// strangers' faces receive a suggestion, the right person was suggested
// for 87.1% (1 name per person) and 95.3% (3 names) of the named people's
// other faces with plain descriptors, 82.1% and 93.6% with the learned
// metric (training identities; test identities: 88.4% and 97.8% against
// 80.4% and 92.3%). The descriptors come from a network trained on
// millions of faces; a linear map fitted to a few hundred people's names
// overfits them.
const UseMetricDefault = false

// metaUseMetric is the meta key where libraries before schema version 5
// kept the setting ("1" or "0"); migrate5 moves it into the sealed state.
const metaUseMetric = "use_metric"

// Errors of learning.
var (
	// ErrNoMetric: the library has not learned a metric yet.
	ErrNoMetric = errors.New("the library has not learned a metric yet (veil library learn)")
	// ErrTooFewNames: not enough names to learn from.
	ErrTooFewNames = errors.New("learning a metric needs names of at least two people, one of them on two faces or more: name more faces first")
)

// MetricInfo describes a stored metric.
type MetricInfo struct {
	// Version is the metric's row id; later metrics have larger versions.
	Version int64 `json:"version"`
	// Names is the number of user names it was learned from.
	Names int `json:"names"`
	// TrainedAt is when it was learned.
	TrainedAt time.Time `json:"trained_at"`
	// Distance is the suggestion distance in its space.
	Distance float64 `json:"distance"`
}

// LearnOptions configure LearnMetric.
type LearnOptions struct {
	// LMNN configures the learning (metric's defaults; Workers default
	// GOMAXPROCS).
	LMNN metric.Options
	// Cold starts from the secret rotation even when an earlier metric
	// exists (default: warm start from the latest).
	Cold bool
}

// LearnReport describes a LearnMetric run.
type LearnReport struct {
	MetricInfo
	// People is the number of named people, Rejections the rejections used.
	People     int  `json:"people"`
	Rejections int  `json:"rejections"`
	WarmStart  bool `json:"warm_start"`
	Iterations int  `json:"iterations"`
	// ObjectiveBefore and ObjectiveAfter are LMNN's objective at the start
	// and the end.
	ObjectiveBefore float64 `json:"objective_before"`
	ObjectiveAfter  float64 `json:"objective_after"`
	Seconds         float64 `json:"seconds"`
}

// learnData gathers the user's names and rejections.
type learnData struct {
	data    metric.Data
	names   int
	people  int
	named   [][]float64 // the named faces (the first names entries of data.X)
	labels  []int
	unnamed [][]float64 // faces the user did not name (threshold calibration)
}

func (l *Library) learnData() (*learnData, error) {
	faces, rej, err := l.decisions(false)
	if err != nil {
		return nil, err
	}
	ld := &learnData{}
	label := map[int64]int{}
	index := map[int64]int{} // face id → row of data.X
	toF := func(d []float32) []float64 {
		x := make([]float64, len(d))
		for i, v := range d {
			x[i] = float64(v)
		}
		return x
	}
	dim := 0
	for _, f := range faces {
		if len(f.Descriptor) == 0 {
			continue
		}
		if f.PersonID == 0 || f.AssignedBy != ByUser {
			ld.unnamed = append(ld.unnamed, toF(f.Descriptor))
			continue
		}
		if dim == 0 {
			dim = len(f.Descriptor)
		}
		if len(f.Descriptor) != dim {
			return nil, fmt.Errorf("tagging: face %d's descriptor has %d values, others %d", f.ID, len(f.Descriptor), dim)
		}
		k, ok := label[f.PersonID]
		if !ok {
			k = len(label)
			label[f.PersonID] = k
		}
		index[f.ID] = len(ld.data.X)
		ld.data.X = append(ld.data.X, toF(f.Descriptor))
		ld.data.Labels = append(ld.data.Labels, k)
	}
	ld.names, ld.people = len(ld.data.X), len(label)
	ld.named = ld.data.X[:ld.names:ld.names]
	ld.labels = ld.data.Labels[:ld.names:ld.names]
	for _, f := range faces {
		persons := rej[f.ID]
		if len(persons) == 0 || len(f.Descriptor) != dim {
			continue
		}
		for _, p := range persons {
			k, ok := label[p]
			if !ok {
				continue // nobody named as that person: nothing to push from
			}
			row, ok := index[f.ID]
			if !ok {
				row = len(ld.data.X)
				index[f.ID] = row
				ld.data.X = append(ld.data.X, toF(f.Descriptor))
				ld.data.Labels = append(ld.data.Labels, metric.Unnamed)
			}
			if ld.data.Labels[row] == k {
				continue // named as the person since: the name wins
			}
			ld.data.Rejections = append(ld.data.Rejections, metric.Rejection{Face: row, Label: k})
		}
	}
	per := map[int]int{}
	two := false
	for _, k := range ld.labels {
		per[k]++
		two = two || per[k] >= 2
	}
	if ld.people < 2 || !two {
		return nil, ErrTooFewNames
	}
	return ld, nil
}

// LearnMetric learns a new metric from the user's names and rejections
// and stores it as the newest version. It changes nothing else.
func (l *Library) LearnMetric(ctx context.Context, o LearnOptions) (*LearnReport, error) {
	start := time.Now()
	ld, err := l.learnData()
	if err != nil {
		return nil, err
	}
	dim := len(ld.named[0])
	rep := &LearnReport{People: ld.people, Rejections: len(ld.data.Rejections)}
	var init *metric.Metric
	if !o.Cold {
		prev, _, err := l.LatestMetric()
		switch {
		case err == nil:
			if out, in := prev.Dims(); in == dim && (o.LMNN.OutputDim == 0 || o.LMNN.OutputDim == out) {
				init, rep.WarmStart = prev, true
			}
		case !errors.Is(err, ErrNoMetric):
			return nil, err
		}
	}
	if init == nil {
		rot, err := metric.RandomRotation(l.RotationSeed(), dim)
		if err != nil {
			return nil, fmt.Errorf("tagging: %w", err)
		}
		init = rot
		if o.LMNN.OutputDim > 0 && o.LMNN.OutputDim < dim {
			if init, err = rot.Truncate(o.LMNN.OutputDim); err != nil {
				return nil, fmt.Errorf("tagging: %w", err)
			}
		}
	}
	lm, err := metric.NewLMNN(o.LMNN)
	if err != nil {
		return nil, fmt.Errorf("tagging: %w", err)
	}
	m, fit, err := lm.Fit(ctx, ld.data, init)
	if err != nil {
		return nil, fmt.Errorf("tagging: learning the metric: %w", err)
	}
	// With every face named there is nothing unfitted to calibrate on: scale
	// the plain distance by V's root-mean-square singular value (1 for a
	// rotation). The next metric, learned once new faces arrive and are
	// named, calibrates properly.
	var fro float64
	for _, v := range m.Matrix() {
		fro += v * v
	}
	_, in := m.Dims()
	dist := SuggestDistance * math.Sqrt(fro/float64(in))
	if len(ld.unnamed) > 0 {
		if dist, err = metric.MatchThreshold(m, ld.named, ld.unnamed, SuggestDistance); err != nil {
			return nil, fmt.Errorf("tagging: carrying the suggestion distance over: %w", err)
		}
	}
	info, err := l.storeMetric(ctx, m, ld.names, dist)
	if err != nil {
		return nil, err
	}
	rep.MetricInfo = info
	rep.Iterations = fit.Iterations
	rep.ObjectiveBefore, rep.ObjectiveAfter = fit.Initial.Objective, fit.Final.Objective
	rep.Seconds = time.Since(start).Seconds()
	return rep, nil
}

// Stored metric encoding (sealed): "VLM" version 1, the suggestion
// distance (float64), the number of names (uint32), then the map in
// metric's own format.
const (
	storedMetricMagic   = "VLM"
	storedMetricVersion = 1
	storedMetricHeader  = len(storedMetricMagic) + 1 + 8 + 4
)

func encodeStoredMetric(m *metric.Metric, dist float64, names int) ([]byte, error) {
	mb, err := m.MarshalBinary()
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, storedMetricHeader+len(mb))
	b = append(b, storedMetricMagic...)
	b = append(b, storedMetricVersion)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(dist))
	b = binary.LittleEndian.AppendUint32(b, uint32(names))
	return append(b, mb...), nil
}

// decodeStoredMetric decodes encodeStoredMetric's bytes, checking every
// field (it reads bytes from disk: fuzzed).
func decodeStoredMetric(b []byte) (*metric.Metric, float64, int, error) {
	if len(b) < storedMetricHeader {
		return nil, 0, 0, errors.New("stored metric is too short")
	}
	if string(b[:3]) != storedMetricMagic {
		return nil, 0, 0, errors.New("stored metric has a bad header")
	}
	if b[3] != storedMetricVersion {
		return nil, 0, 0, fmt.Errorf("stored metric has format version %d, this build reads %d", b[3], storedMetricVersion)
	}
	dist := math.Float64frombits(binary.LittleEndian.Uint64(b[4:]))
	if !(dist > 0) || math.IsInf(dist, 0) {
		return nil, 0, 0, errors.New("stored metric's suggestion distance is not a positive number")
	}
	names := binary.LittleEndian.Uint32(b[12:])
	var m metric.Metric
	if err := m.UnmarshalBinary(b[storedMetricHeader:]); err != nil {
		return nil, 0, 0, err
	}
	return &m, dist, int(names), nil
}

// storeMetric adds m as the newest version and prunes old ones.
func (l *Library) storeMetric(ctx context.Context, m *metric.Metric, names int, dist float64) (MetricInfo, error) {
	plain, err := encodeStoredMetric(m, dist, names)
	if err != nil {
		return MetricInfo{}, err
	}
	now := time.Now()
	info := MetricInfo{Names: names, TrainedAt: time.Unix(now.Unix(), 0), Distance: dist}
	err = l.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO metric (blob, names, trained_at) VALUES (x'', ?, ?)`, names, now.Unix())
		if err != nil {
			return err
		}
		if info.Version, err = res.LastInsertId(); err != nil {
			return err
		}
		sealed, err := l.Seal("metric", "blob", info.Version, plain)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE metric SET blob = ? WHERE id = ?`, sealed, info.Version); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM metric WHERE id NOT IN (SELECT id FROM metric ORDER BY id DESC LIMIT ?)`, keepMetrics)
		return err
	})
	if err != nil {
		return MetricInfo{}, fmt.Errorf("tagging: storing the metric: %w", err)
	}
	return info, nil
}

// LatestMetric returns the newest stored metric (ErrNoMetric if none).
func (l *Library) LatestMetric() (*metric.Metric, MetricInfo, error) {
	var info MetricInfo
	var sealed []byte
	var at int64
	err := l.db.QueryRow(`SELECT id, blob, names, trained_at FROM metric ORDER BY id DESC LIMIT 1`).Scan(&info.Version, &sealed, &info.Names, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, MetricInfo{}, ErrNoMetric
	}
	if err != nil {
		return nil, MetricInfo{}, fmt.Errorf("tagging: reading the metric: %w", err)
	}
	plain, err := l.Unseal("metric", "blob", info.Version, sealed)
	if err != nil {
		return nil, MetricInfo{}, err
	}
	m, dist, names, err := decodeStoredMetric(plain)
	clear(plain)
	if err != nil {
		return nil, MetricInfo{}, fmt.Errorf("tagging: metric version %d: %w", info.Version, err)
	}
	if names != info.Names {
		return nil, MetricInfo{}, fmt.Errorf("tagging: metric version %d: %w", info.Version, ErrTampered)
	}
	info.Distance = dist
	info.TrainedAt = time.Unix(at, 0)
	return m, info, nil
}

// UserNames counts the faces the user named (not removed).
func (l *Library) UserNames() (int, error) {
	var n int
	err := l.db.QueryRow(`SELECT COUNT(*) FROM faces WHERE person_id IS NOT NULL AND assigned_by = 'user' AND removed = 0`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("tagging: counting names: %w", err)
	}
	return n, nil
}

// RetrainDue applies the retraining rule (file comment) to n names and
// the latest metric's names (last < 0: no metric yet).
func RetrainDue(n, last int) bool {
	if last < 0 {
		return n >= RetrainFirstNames
	}
	grown := n - last
	return grown >= RetrainMinNew && float64(grown) >= RetrainGrowth*float64(last)
}

// MetricDue says whether the retraining rule asks for a new metric now.
func (l *Library) MetricDue() (bool, error) {
	n, err := l.UserNames()
	if err != nil {
		return false, err
	}
	last := -1
	var lastNames sql.NullInt64
	if err := l.db.QueryRow(`SELECT names FROM metric ORDER BY id DESC LIMIT 1`).Scan(&lastNames); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return false, fmt.Errorf("tagging: reading the metric: %w", err)
	}
	if lastNames.Valid {
		last = int(lastNames.Int64)
	}
	return RetrainDue(n, last), nil
}

// RetrainIfDue learns a new metric when the retraining rule asks for one
// and the names allow it; it returns nil when nothing was learned.
func (l *Library) RetrainIfDue(ctx context.Context, o LearnOptions) (*LearnReport, error) {
	due, err := l.MetricDue()
	if err != nil || !due {
		return nil, err
	}
	rep, err := l.LearnMetric(ctx, o)
	if errors.Is(err, ErrTooFewNames) {
		return nil, nil
	}
	return rep, err
}

// UseMetric reports the library's setting: whether suggestions use the
// learned metric (UseMetricDefault when never set). The setting is kept
// in the library's sealed integrity state, so it cannot be changed outside
// Veil.
func (l *Library) UseMetric() (bool, error) {
	st, err := readIntegrityState(context.Background(), l.db, &l.keys)
	if err != nil {
		return false, fmt.Errorf("tagging: reading the metric setting: %w", err)
	}
	switch st.useMetric {
	case 0:
		return UseMetricDefault, nil
	case 2:
		return true, nil
	}
	return false, nil
}

// SetUseMetric sets whether suggestions use the learned metric.
func (l *Library) SetUseMetric(on bool) error {
	ctx := context.Background()
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		st, err := readIntegrityState(ctx, tx, &l.keys)
		if err != nil {
			return err
		}
		st.useMetric = 1
		if on {
			st.useMetric = 2
		}
		return writeIntegrityState(ctx, tx, &l.keys, &st)
	})
	if err != nil {
		return fmt.Errorf("tagging: saving the metric setting: %w", err)
	}
	return nil
}

// Space is how suggestions compare faces: plain descriptors (Metric nil)
// or the library's learned metric, with the suggestion options in that
// space.
type Space struct {
	Metric  *metric.Metric
	Version int64
	Options match.SuggestOptions
}

// SuggestSpace returns the space suggestions should use: the latest
// metric with its carried-over distance when use is true and a metric
// exists, else plain descriptors with DefaultSuggestOptions. Callers pass
// the library's UseMetric setting, or true for --use-metric.
func (l *Library) SuggestSpace(use bool) (Space, error) {
	o, err := l.scaledOptions(DefaultSuggestOptions())
	if err != nil {
		return Space{}, err
	}
	plain := Space{Options: o}
	if !use {
		return plain, nil
	}
	m, info, err := l.LatestMetric()
	if errors.Is(err, ErrNoMetric) {
		return plain, nil
	}
	if err != nil {
		return Space{}, err
	}
	o = DefaultSuggestOptions()
	// The margin scales with the distance, as the carried-over distance
	// scales the plain one.
	o.Margin *= info.Distance / SuggestDistance
	o.Distance = info.Distance
	return Space{Metric: m, Version: info.Version, Options: o}, nil
}

// SpaceForSuggestions is what veil suggest and veil search call: the
// learned metric when force (--use-metric) or the library's setting asks
// for it, after learning a new one if the retraining rule says it is due
// (the report is then non-nil); else plain descriptors.
func (l *Library) SpaceForSuggestions(ctx context.Context, force bool) (Space, *LearnReport, error) {
	use := force
	if !use {
		on, err := l.UseMetric()
		if err != nil {
			return Space{}, nil, err
		}
		use = on
	}
	var rep *LearnReport
	if use {
		var err error
		if rep, err = l.RetrainIfDue(ctx, LearnOptions{}); err != nil {
			return Space{}, nil, err
		}
	}
	s, err := l.SuggestSpace(use)
	return s, rep, err
}

// Apply maps a descriptor into the space (a copy for plain descriptors).
// It fails when the descriptor's length is not the metric's input size.
func (s Space) Apply(d []float32) ([]float32, error) {
	if s.Metric == nil {
		return append([]float32(nil), d...), nil
	}
	if _, in := s.Metric.Dims(); len(d) != in {
		return nil, fmt.Errorf("tagging: a descriptor of %d values under a metric of %d", len(d), in)
	}
	x := make([]float64, len(d))
	for i, v := range d {
		x[i] = float64(v)
	}
	y := s.Metric.Transform(nil, x)
	out := make([]float32, len(y))
	for i, v := range y {
		out[i] = float32(v)
	}
	return out, nil
}

// SuggestionsIn is Suggestions in space s: with a metric, every descriptor
// (named and unnamed) is mapped by it and s.Options apply in its space.
func (l *Library) SuggestionsIn(s Space) ([]LibrarySuggestion, error) {
	if s.Metric == nil {
		return l.Suggestions(s.Options)
	}
	g, un, rs, people, err := l.suggestionInputs()
	if err != nil {
		return nil, err
	}
	out, _ := s.Metric.Dims()
	mg, err := g.Map(out, s.Apply)
	if err != nil {
		return nil, err
	}
	for i := range un {
		if un[i].Descriptor, err = s.Apply(un[i].Descriptor); err != nil {
			return nil, err
		}
	}
	return namedSuggestions(mg, un, rs, people, s.Options)
}

// AcceptSuggestionsIn is AcceptSuggestions with the suggestions of space s
// (through AssignAuto: never over a decision of the user's).
func (l *Library) AcceptSuggestionsIn(faceIDs []int64, s Space) (applied []LibrarySuggestion, none []int64, err error) {
	if s.Metric == nil {
		return l.AcceptSuggestions(faceIDs, s.Options)
	}
	sugs, err := l.SuggestionsIn(s)
	if err != nil {
		return nil, nil, err
	}
	return l.acceptSuggested(faceIDs, sugs)
}
