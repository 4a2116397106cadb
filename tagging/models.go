package tagging

// Shared models (issue 22 §4): a library adopts a model version ψ only if
// it measures at least as good on its owner's own names.
//
// A model version is a ψ file (package tagging/psimodel, as collab saves
// it) imported into the models table, sealed like every field. The active
// version (0: plain descriptors) and the scale of its space are sealed in
// meta. Adopting a version maps every stored descriptor through ψ into the
// face's projected column, in the same transaction that switches the
// active version and records the decision: an interruption (kill -9)
// leaves the old state or the new one. The raw descriptor is never
// rewritten, so returning to an earlier version (or plain descriptors)
// recomputes its projections exactly. Names, rejections and accepted
// suggestions are never touched: adoption writes only faces.projected,
// meta and the models tables.
//
// Measurement is leave-one-out over the faces the owner named: each is
// queried against all the other named faces under the library's
// suggestion rule (match.SuggestOptions.Accepts: the nearest person within
// the distance, the next farther by the margin), the distance swept over
// the queries' nearest distances and the margin in thresholds.go's
// proportion to it (SuggestMargin/SuggestDistance), so the score does not
// depend on the space's scale. A space's score is the setting with the
// most suggestions at precision ≥ ModelPrecisionTarget (ties: fewer
// wrong); once adopted, the library's thresholds are scaled by the ratio of
// the candidate's chosen distance to plain descriptors'. A candidate is adopted only if it makes no fewer
// suggestions and no more wrong ones than the current space at the target;
// the decision records both measurements.

import (
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/veil-privacy/veil/internal/digest"
	"github.com/veil-privacy/veil/tagging/match"
	"github.com/veil-privacy/veil/tagging/psimodel"
)

// ModelPrecisionTarget is the precision at which a model version is
// measured: the library's tuning target (thresholds.go: at least 98%).
const ModelPrecisionTarget = 0.98

// MinMeasurePeople is the fewest people with at least two named faces a
// measurement needs; with fewer, nothing is adopted.
const MinMeasurePeople = 2

// Errors of model versions.
var (
	ErrUnknownModel = errors.New("no such model version in the library")
	ErrNoRollback   = errors.New("no earlier model version to roll back to")
)

const metaModelActive = "model_active"

var modelActiveAAD = []byte("veil/tagging/v1|meta|" + metaModelActive)

// migrate6 adds model versions: the models table (sealed ψ files), the
// model_log of decisions (sealed), each face's projected descriptor
// (sealed, NULL under plain descriptors), and refreshes the integrity
// record's schema digest. Self-contained so it can be renumbered.
func migrate6(ctx context.Context, tx *sql.Tx, k *subKeys) error {
	if err := execAll(tx,
		`ALTER TABLE faces ADD COLUMN projected BLOB NULL`,
		`CREATE TABLE models (
			id INTEGER PRIMARY KEY AUTOINCREMENT,
			blob BLOB NOT NULL,
			imported_at INTEGER NOT NULL)`,
		`CREATE TABLE model_log (
			id INTEGER PRIMARY KEY AUTOINCREMENT,
			record BLOB NOT NULL,
			at INTEGER NOT NULL)`,
	); err != nil {
		return err
	}
	return resealSchema(ctx, tx, k)
}

// ModelInfo describes a stored model version.
type ModelInfo struct {
	Version    int64     `json:"version"`
	ImportedAt time.Time `json:"imported_at"`
	Layers     int       `json:"layers"`
	Hidden     int       `json:"hidden"`
	// SHA256 is the digest of the imported file.
	SHA256 string `json:"sha256"`
	Active bool   `json:"active"`
}

// Measurement is one space's leave-one-out score on the owner's names.
type Measurement struct {
	// Named is the number of named faces queried, People their people.
	Named  int `json:"named_faces"`
	People int `json:"people"`
	// Suggested and Wrong are the suggestions at the chosen setting.
	Suggested int     `json:"suggested"`
	Wrong     int     `json:"wrong"`
	Coverage  float64 `json:"coverage"`
	Precision float64 `json:"precision"`
	// MeetsTarget: some setting reached ModelPrecisionTarget (else the
	// space scores no suggestions).
	MeetsTarget bool    `json:"meets_target"`
	Distance    float64 `json:"distance"`
	Margin      float64 `json:"margin"`
	// Scale is the space's chosen distance over plain descriptors' (1
	// for plain descriptors): suggestions in the space scale the
	// library's thresholds by it.
	Scale float64 `json:"scale"`
}

// ModelDecision is a recorded decision about the active model.
type ModelDecision struct {
	// Action is "use" or "rollback".
	Action string `json:"action"`
	// From and To are versions (0: plain descriptors).
	From    int64  `json:"from"`
	To      int64  `json:"to"`
	Adopted bool   `json:"adopted"`
	Reason  string `json:"reason"`
	// Current and Candidate are the measurements (absent for a rollback).
	Current   *Measurement `json:"current,omitempty"`
	Candidate *Measurement `json:"candidate,omitempty"`
	At        time.Time    `json:"at"`
}

// modelCache holds the parsed active model for the write path.
type modelCache struct {
	mu      sync.Mutex
	version int64
	m       *psimodel.Model
}

// ImportModel stores a ψ model file (untrusted bytes) as a new version,
// not active. A malformed file, or one for descriptors of another size, is
// refused and the library is unchanged.
func (l *Library) ImportModel(ctx context.Context, file []byte) (ModelInfo, error) {
	m, err := psimodel.Parse(file)
	if err != nil {
		return ModelInfo{}, fmt.Errorf("tagging: importing a model: %w", err)
	}
	if dim := l.descriptorDim(ctx); m.Dim != dim {
		return ModelInfo{}, fmt.Errorf("tagging: importing a model: it maps %d-value descriptors, the library's have %d", m.Dim, dim)
	}
	now := time.Now().Unix()
	var id int64
	err = l.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO models (blob, imported_at) VALUES (x'', ?)`, now)
		if err != nil {
			return err
		}
		if id, err = res.LastInsertId(); err != nil {
			return err
		}
		sealed, err := l.Seal("models", "blob", id, file)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE models SET blob = ? WHERE id = ?`, sealed, id)
		return err
	})
	if err != nil {
		return ModelInfo{}, fmt.Errorf("tagging: importing a model: %w", err)
	}
	return infoOf(id, now, file, m, false), nil
}

func infoOf(id, at int64, file []byte, m *psimodel.Model, active bool) ModelInfo {
	sum := digest.Sum256(file)
	hidden := 0
	if len(m.Layers) > 1 {
		hidden = m.Layers[0].Out
	}
	return ModelInfo{Version: id, ImportedAt: time.Unix(at, 0), Layers: len(m.Layers), Hidden: hidden,
		SHA256: fmt.Sprintf("%x", sum), Active: active}
}

// descriptorDim is the size of the library's descriptors (128 if none).
func (l *Library) descriptorDim(ctx context.Context) int {
	var sealed []byte
	var id int64
	if err := l.db.QueryRowContext(ctx, `SELECT id, descriptor FROM faces WHERE descriptor IS NOT NULL LIMIT 1`).Scan(&id, &sealed); err == nil {
		if d, err := l.descriptor(id, sealed); err == nil {
			return len(d)
		}
	}
	return 128
}

// Models lists the stored versions, oldest first.
func (l *Library) Models(ctx context.Context) ([]ModelInfo, error) {
	active, _, err := activeModel(ctx, l.db, &l.keys)
	if err != nil {
		return nil, err
	}
	rows, err := l.db.QueryContext(ctx, `SELECT id, imported_at FROM models ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("tagging: listing models: %w", err)
	}
	type row struct{ id, at int64 }
	var rs []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.id, &r.at); err != nil {
			rows.Close()
			return nil, err
		}
		rs = append(rs, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var out []ModelInfo
	for _, r := range rs {
		file, m, err := l.loadModel(ctx, l.db, r.id)
		if err != nil {
			return nil, err
		}
		out = append(out, infoOf(r.id, r.at, file, m, r.id == active))
	}
	return out, nil
}

// rowQueryer reads one row (both *sql.DB and *sql.Tx).
type rowQueryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// loadModel unseals and parses a stored version.
func (l *Library) loadModel(ctx context.Context, q rowQueryer, version int64) ([]byte, *psimodel.Model, error) {
	var sealed []byte
	err := q.QueryRowContext(ctx, `SELECT blob FROM models WHERE id = ?`, version).Scan(&sealed)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil, fmt.Errorf("tagging: model version %d: %w", version, ErrUnknownModel)
	}
	if err != nil {
		return nil, nil, err
	}
	file, err := l.Unseal("models", "blob", version, sealed)
	if err != nil {
		return nil, nil, fmt.Errorf("tagging: model version %d: %w", version, err)
	}
	m, err := psimodel.Parse(file)
	if err != nil {
		return nil, nil, fmt.Errorf("tagging: model version %d: %w", version, err)
	}
	return file, m, nil
}

// activeModel reads the active version and its space's scale (0 and 1:
// plain descriptors).
func activeModel(ctx context.Context, q querier, k *subKeys) (int64, float64, error) {
	sealed, err := getMeta(ctx, q, metaModelActive)
	if errors.Is(err, errNoMeta) {
		return 0, 1, nil
	}
	if err != nil {
		return 0, 0, err
	}
	b, err := openWith(k.seal, sealed, modelActiveAAD)
	if err != nil || len(b) != 16 {
		return 0, 0, fmt.Errorf("tagging: the active model setting: %w", ErrTampered)
	}
	v := int64(binary.LittleEndian.Uint64(b))
	scale := math.Float64frombits(binary.LittleEndian.Uint64(b[8:]))
	if v < 0 || !(scale > 0) || math.IsInf(scale, 0) {
		return 0, 0, fmt.Errorf("tagging: the active model setting: %w", ErrTampered)
	}
	return v, scale, nil
}

func setActiveModel(ctx context.Context, e execer, k *subKeys, version int64, scale float64) error {
	b := binary.LittleEndian.AppendUint64(nil, uint64(version))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(scale))
	sealed, err := sealWith(k.seal, b, modelActiveAAD)
	if err != nil {
		return err
	}
	return setMeta(ctx, e, metaModelActive, sealed)
}

// ActiveModel returns the version suggestions use (0: plain descriptors).
func (l *Library) ActiveModel(ctx context.Context) (int64, error) {
	v, _, err := activeModel(ctx, l.db, &l.keys)
	return v, err
}

// activeModelTx returns the active model (nil under plain descriptors)
// for writing a new face's projection in tx.
func (l *Library) activeModelTx(ctx context.Context, tx *sql.Tx) (*psimodel.Model, error) {
	v, _, err := activeModel(ctx, tx, &l.keys)
	if err != nil || v == 0 {
		return nil, err
	}
	l.models.mu.Lock()
	defer l.models.mu.Unlock()
	if l.models.version == v && l.models.m != nil {
		return l.models.m, nil
	}
	_, m, err := l.loadModel(ctx, tx, v)
	if err != nil {
		return nil, err
	}
	l.models.version, l.models.m = v, m
	return m, nil
}

// sealProjected seals ψ(d) for face id's projected column.
func (l *Library) sealProjected(m *psimodel.Model, id int64, d []float32) ([]byte, error) {
	y, err := m.Apply(d)
	if err != nil {
		return nil, fmt.Errorf("tagging: projecting face %d: %w", id, err)
	}
	return l.Seal("faces", "projected", id, EncodeDescriptor(y))
}

// namedFaces returns the owner's named faces' raw descriptors and people.
func (l *Library) namedFaces() ([][]float32, []int64, error) {
	fs, err := l.Faces(FaceFilter{Descriptors: true, Raw: true})
	if err != nil {
		return nil, nil, err
	}
	var xs [][]float32
	var ps []int64
	for _, f := range fs {
		if f.AssignedBy == ByUser && f.PersonID != 0 && len(f.Descriptor) > 0 {
			xs = append(xs, f.Descriptor)
			ps = append(ps, f.PersonID)
		}
	}
	return xs, ps, nil
}

// looQueries returns, for each named face, the two nearest other people
// among the other named faces.
func looQueries(xs [][]float32, ps []int64) [][2]match.PersonDistance {
	out := make([][2]match.PersonDistance, len(xs))
	for i, q := range xs {
		var p1, p2 int64
		d1, d2 := math.Inf(1), math.Inf(1)
		for j, x := range xs {
			if j == i {
				continue
			}
			var s float64
			for k, v := range q {
				e := float64(v) - float64(x[k])
				s += e * e
			}
			switch p := ps[j]; {
			case p == p1:
				d1 = min(d1, s)
			case p == p2:
				if s < d2 {
					d2 = s
				}
				if d2 < d1 {
					p1, d1, p2, d2 = p2, d2, p1, d1
				}
			case s < d1:
				p2, d2 = p1, d1
				p1, d1 = p, s
			case s < d2:
				p2, d2 = p, s
			}
		}
		out[i] = [2]match.PersonDistance{{Person: p1, Distance: math.Sqrt(d1)}, {Person: p2, Distance: math.Sqrt(d2)}}
	}
	return out
}

// measure scores queries (truth ps) at the target: the rule's distance
// swept over the queries' nearest distances (at most maxSweep of them,
// evenly spaced in order), the margin in SuggestMargin's proportion.
func measure(qs [][2]match.PersonDistance, ps []int64) Measurement {
	people := map[int64]int{}
	for _, p := range ps {
		people[p]++
	}
	m := Measurement{Named: len(ps)}
	for _, n := range people {
		if n >= 2 {
			m.People++
		}
	}
	var ds []float64
	for _, q := range qs {
		if !math.IsInf(q[0].Distance, 0) && !math.IsNaN(q[0].Distance) {
			ds = append(ds, q[0].Distance)
		}
	}
	slices.Sort(ds)
	ds = slices.Compact(ds)
	if len(ds) > maxSweep {
		picked := make([]float64, maxSweep)
		for i := range picked {
			picked[i] = ds[i*(len(ds)-1)/(maxSweep-1)]
		}
		ds = picked
	}
	for _, d := range ds {
		rule := match.SuggestOptions{Distance: d, Margin: d * SuggestMargin / SuggestDistance}
		sug, wrong := 0, 0
		for i, q := range qs {
			if rule.Accepts(q[0], q[1]) {
				sug++
				if q[0].Person != ps[i] {
					wrong++
				}
			}
		}
		if sug == 0 || float64(sug-wrong) < ModelPrecisionTarget*float64(sug) {
			continue
		}
		if !m.MeetsTarget || sug > m.Suggested || (sug == m.Suggested && wrong < m.Wrong) {
			m.MeetsTarget, m.Suggested, m.Wrong, m.Distance, m.Margin = true, sug, wrong, rule.Distance, rule.Margin
		}
	}
	if m.Named > 0 {
		m.Coverage = float64(m.Suggested) / float64(m.Named)
	}
	if m.Suggested > 0 {
		m.Precision = float64(m.Suggested-m.Wrong) / float64(m.Suggested)
	}
	return m
}

// maxSweep bounds the distances a measurement tries.
const maxSweep = 512

// measureSpaces measures each model (nil: plain descriptors) on the
// owner's named faces. Each Scale is the space's chosen distance over
// plain descriptors' (1 when either reaches the target at no setting).
func measureSpaces(xs [][]float32, ps []int64, models ...*psimodel.Model) ([]Measurement, error) {
	plain := measure(looQueries(xs, ps), ps)
	out := make([]Measurement, len(models))
	for i, m := range models {
		if m == nil {
			out[i] = plain
			out[i].Scale = 1
			continue
		}
		ys := make([][]float32, len(xs))
		for j, x := range xs {
			y, err := m.Apply(x)
			if err != nil {
				return nil, fmt.Errorf("tagging: measuring a model: %w", err)
			}
			ys[j] = y
		}
		out[i] = measure(looQueries(ys, ps), ps)
		out[i].Scale = 1
		if plain.MeetsTarget && out[i].MeetsTarget {
			out[i].Scale = out[i].Distance / plain.Distance
		}
	}
	return out, nil
}

// modelOrPlain loads a version (nil for 0).
func (l *Library) modelOrPlain(ctx context.Context, version int64) (*psimodel.Model, error) {
	if version == 0 {
		return nil, nil
	}
	_, m, err := l.loadModel(ctx, l.db, version)
	return m, err
}

// UseModel measures version (0: plain descriptors) against the active
// space on the owner's named faces and adopts it only if it is at least
// as good; the decision, with both measurements, is recorded and returned
// (Adopted false with the reason when refused; err is for failures).
func (l *Library) UseModel(ctx context.Context, version int64) (ModelDecision, error) {
	from, _, err := activeModel(ctx, l.db, &l.keys)
	if err != nil {
		return ModelDecision{}, err
	}
	cand, err := l.modelOrPlain(ctx, version)
	if err != nil {
		return ModelDecision{}, err
	}
	cur, err := l.modelOrPlain(ctx, from)
	if err != nil {
		return ModelDecision{}, err
	}
	xs, ps, err := l.namedFaces()
	if err != nil {
		return ModelDecision{}, err
	}
	ms, err := measureSpaces(xs, ps, cur, cand)
	if err != nil {
		return ModelDecision{}, err
	}
	d := ModelDecision{Action: "use", From: from, To: version, Current: &ms[0], Candidate: &ms[1], At: time.Unix(time.Now().Unix(), 0)}
	d.Adopted, d.Reason = judge(ms[0], ms[1])
	if !d.Adopted {
		if err := l.inTx(ctx, func(tx *sql.Tx) error { return l.logDecision(ctx, tx, d) }); err != nil {
			return ModelDecision{}, fmt.Errorf("tagging: recording a model decision: %w", err)
		}
		return d, nil
	}
	if err := l.switchModel(ctx, cand, d, ms[1].Scale); err != nil {
		return ModelDecision{}, err
	}
	return d, nil
}

// judge decides from the current and the candidate measurement.
func judge(cur, cand Measurement) (bool, string) {
	both := fmt.Sprintf("candidate %d suggestions, %d wrong; current %d suggestions, %d wrong (leave-one-out over %d named faces, precision target %.0f%%)",
		cand.Suggested, cand.Wrong, cur.Suggested, cur.Wrong, cand.Named, 100*ModelPrecisionTarget)
	switch {
	case cand.People < MinMeasurePeople:
		return false, fmt.Sprintf("too few names to measure: %d people with two or more named faces, at least %d needed", cand.People, MinMeasurePeople)
	case cur.MeetsTarget && !cand.MeetsTarget:
		return false, "the candidate reaches the precision target at no setting: " + both
	case cand.Suggested < cur.Suggested:
		return false, "the candidate covers fewer named faces: " + both
	case cand.Wrong > cur.Wrong:
		return false, "the candidate makes more wrong suggestions: " + both
	}
	return true, "the candidate measures at least as good: " + both
}

// switchModel re-projects every stored descriptor under m (nil: plain),
// sets the active version and records d, in one transaction.
func (l *Library) switchModel(ctx context.Context, m *psimodel.Model, d ModelDecision, scale float64) error {
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		if m == nil {
			if _, err := tx.ExecContext(ctx, `UPDATE faces SET projected = NULL WHERE projected IS NOT NULL`); err != nil {
				return err
			}
		} else {
			fs, err := readIDBlobs(ctx, tx, `SELECT id, descriptor FROM faces WHERE descriptor IS NOT NULL ORDER BY id`)
			if err != nil {
				return err
			}
			for _, f := range fs {
				x, err := l.descriptor(f.id, f.sealed)
				if err != nil {
					return err
				}
				p, err := l.sealProjected(m, f.id, x)
				if err != nil {
					return err
				}
				if _, err := tx.ExecContext(ctx, `UPDATE faces SET projected = ? WHERE id = ?`, p, f.id); err != nil {
					return err
				}
			}
		}
		if err := setActiveModel(ctx, tx, &l.keys, d.To, scale); err != nil {
			return err
		}
		return l.logDecision(ctx, tx, d)
	})
	if err != nil {
		return fmt.Errorf("tagging: switching to model version %d: %w", d.To, err)
	}
	return nil
}

func (l *Library) logDecision(ctx context.Context, tx *sql.Tx, d ModelDecision) error {
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO model_log (record, at) VALUES (x'', ?)`, d.At.Unix())
	if err != nil {
		return err
	}
	id, err := res.LastInsertId()
	if err != nil {
		return err
	}
	sealed, err := l.Seal("model_log", "record", id, b)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `UPDATE model_log SET record = ? WHERE id = ?`, sealed, id)
	return err
}

// ModelLog returns the recorded decisions, oldest first.
func (l *Library) ModelLog(ctx context.Context) ([]ModelDecision, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT id, record FROM model_log ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("tagging: reading model decisions: %w", err)
	}
	defer rows.Close()
	var out []ModelDecision
	for rows.Next() {
		var id int64
		var sealed []byte
		if err := rows.Scan(&id, &sealed); err != nil {
			return nil, err
		}
		b, err := l.Unseal("model_log", "record", id, sealed)
		if err != nil {
			return nil, fmt.Errorf("tagging: model decision %d: %w", id, err)
		}
		var d ModelDecision
		if err := json.Unmarshal(b, &d); err != nil {
			return nil, fmt.Errorf("tagging: model decision %d: %w", id, err)
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// RollbackModel returns to the version that was active before the
// current one was adopted (without measuring: the owner asks for the
// earlier state), re-projecting from the raw descriptors, so the
// projections are exactly those of that version.
func (l *Library) RollbackModel(ctx context.Context) (ModelDecision, error) {
	from, _, err := activeModel(ctx, l.db, &l.keys)
	if err != nil {
		return ModelDecision{}, err
	}
	log, err := l.ModelLog(ctx)
	if err != nil {
		return ModelDecision{}, err
	}
	var prev *ModelDecision
	for i := len(log) - 1; i >= 0; i-- {
		if log[i].Action == "use" && log[i].Adopted && log[i].To == from && log[i].From != from {
			prev = &log[i]
			break
		}
	}
	if prev == nil {
		return ModelDecision{}, fmt.Errorf("tagging: model version %d: %w", from, ErrNoRollback)
	}
	to := prev.From
	m, err := l.modelOrPlain(ctx, to)
	if err != nil {
		return ModelDecision{}, err
	}
	scale := 1.0
	if prev.Current != nil && prev.Current.Scale > 0 {
		scale = prev.Current.Scale
	}
	d := ModelDecision{Action: "rollback", From: from, To: to, Adopted: true, At: time.Unix(time.Now().Unix(), 0),
		Reason: fmt.Sprintf("rolled back to the version active before %d was adopted", from)}
	if err := l.switchModel(ctx, m, d, scale); err != nil {
		return ModelDecision{}, err
	}
	return d, nil
}

// scaledOptions scales the suggestion thresholds to the active space.
func (l *Library) scaledOptions(o match.SuggestOptions) (match.SuggestOptions, error) {
	_, scale, err := activeModel(context.Background(), l.db, &l.keys)
	if err != nil {
		return o, err
	}
	o.Distance *= scale
	o.Margin *= scale
	return o, nil
}

// ProjectQuery maps descriptors computed now (a search's query photo)
// into the active space, as the stored ones are.
func (l *Library) ProjectQuery(ctx context.Context, xs [][]float32) ([][]float32, error) {
	v, _, err := activeModel(ctx, l.db, &l.keys)
	if err != nil || v == 0 {
		return xs, err
	}
	_, m, err := l.loadModel(ctx, l.db, v)
	if err != nil {
		return nil, err
	}
	out := make([][]float32, len(xs))
	for i, x := range xs {
		if out[i], err = m.Apply(x); err != nil {
			return nil, fmt.Errorf("tagging: %w", err)
		}
	}
	return out, nil
}

// resealModels re-seals the model versions, the decisions and the active
// setting from oldK to newK in tx: RotateKey's last transaction, which
// installs the new key (the tables are small and not row-authenticated,
// so they are converted there, with the key switch, in one step).
func resealModels(ctx context.Context, tx *sql.Tx, oldK, newK *subKeys) error {
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'models'`).Scan(&n); err != nil || n == 0 {
		return err // a library from before schema 6 has none
	}
	for _, c := range [][2]string{{"models", "blob"}, {"model_log", "record"}} {
		rs, err := readIDBlobs(ctx, tx, `SELECT id, `+c[1]+` FROM `+c[0]+` ORDER BY id`)
		if err != nil {
			return err
		}
		for _, r := range rs {
			aad := fieldAAD(c[0], c[1], r.id)
			plain, err := openWith(oldK.seal, r.sealed, aad)
			if err != nil {
				return fmt.Errorf("%s %d: %w", c[0], r.id, ErrTampered)
			}
			sealed, err := sealWith(newK.seal, plain, aad)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `UPDATE `+c[0]+` SET `+c[1]+` = ? WHERE id = ?`, sealed, r.id); err != nil {
				return err
			}
		}
	}
	v, scale, err := activeModel(ctx, tx, oldK)
	if err != nil {
		return err
	}
	return setActiveModel(ctx, tx, newK, v, scale)
}

// idBlob is a row's id and one of its sealed columns.
type idBlob struct {
	id     int64
	sealed []byte
}

// readIDBlobs reads every (id, sealed column) row a query selects.
func readIDBlobs(ctx context.Context, tx *sql.Tx, query string) ([]idBlob, error) {
	rows, err := tx.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []idBlob
	for rows.Next() {
		var r idBlob
		if err := rows.Scan(&r.id, &r.sealed); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
