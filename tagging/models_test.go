package tagging

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/tagging/psimodel"
)

// nuisanceWorld fills l with people photos people×photos whose
// descriptors are a person's centre, small noise, and a large nuisance
// along one direction v (as lighting might be); the first named photos
// of each person are named by the user. It returns v.
func nuisanceWorld(t testing.TB, l *Library, seed uint64, people, photos, named int) []float32 {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	v := make([]float32, 128)
	var n float64
	for i := range v {
		v[i] = float32(rng.NormFloat64())
		n += float64(v[i]) * float64(v[i])
	}
	for i := range v {
		v[i] /= float32(math.Sqrt(n))
	}
	for p := range people {
		c := make([]float64, 128)
		for i := range c {
			c[i] = 0.09 * rng.NormFloat64()
		}
		var ids []int64
		for k := range photos {
			a := 1.5 * rng.NormFloat64()
			d := make([]float32, 128)
			for i := range d {
				d[i] = float32(c[i] + 0.02*rng.NormFloat64() + a*float64(v[i]))
			}
			path := fmt.Sprintf("/photos/n%d/p%d/%d.jpg", seed, p, k)
			_, fids, err := l.AddPhoto(PhotoRecord{Path: path, SHA256: sha256.Sum256([]byte(path)), Size: 1, Width: 100, Height: 100},
				[]NewFace{{Box: Box{X: 10, Y: 10, Width: 50, Height: 50}, Score: 0.9, Source: Detected, Descriptor: d}})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, fids...)
		}
		if _, err := l.NameFaces(ids[:named], fmt.Sprintf("Person %d", p)); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

// removeDirection is ψ(x) = x − v vᵀx: it removes the nuisance.
func removeDirection(v []float32) *psimodel.Model {
	m := psimodel.Identity(len(v))
	for i := range v {
		for o := range v {
			m.Layers[0].W[i*len(v)+o] = -v[i] * v[o]
		}
	}
	return m
}

// scramble is ψ(x) = u uᵀx for a random unit u: every face onto one line,
// where people overlap.
func scramble(seed uint64) *psimodel.Model {
	rng := rand.New(rand.NewPCG(seed, 1))
	u := make([]float32, 128)
	for i := range u {
		u[i] = float32(rng.NormFloat64() / math.Sqrt(128))
	}
	m := removeDirection(u)
	for i := range u {
		for o := range u {
			m.Layers[0].W[i*128+o] *= -1
		}
		m.Layers[0].W[i*128+i] -= 1
	}
	return m
}

func importModel(t testing.TB, l *Library, m *psimodel.Model) int64 {
	t.Helper()
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	info, err := l.ImportModel(t.Context(), b)
	if err != nil {
		t.Fatal(err)
	}
	return info.Version
}

// decisionRows is every row that holds a user decision or an accepted
// suggestion, as stored (bytes included): faces' assignment columns and
// MACs, people and rejections.
func decisionRows(t testing.TB, l *Library) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{
		`SELECT id, person_id, assigned_by, removed, mac, descriptor, landmarks, thumbnail FROM faces ORDER BY id`,
		`SELECT * FROM people ORDER BY id`,
		`SELECT * FROM rejections ORDER BY face_id, person_id`,
	} {
		rows, err := l.db.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%q\n", vals)
		}
		rows.Close()
	}
	return b.String()
}

func faceDescriptors(t testing.TB, l *Library, raw bool) map[int64][]float32 {
	t.Helper()
	fs, err := l.Faces(FaceFilter{Descriptors: true, Raw: raw, Removed: true})
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64][]float32{}
	for _, f := range fs {
		out[f.ID] = f.Descriptor
	}
	return out
}

// TestAdoptionRefusesWorseAcceptsBetter: a ψ that scrambles the space is
// refused with both measurements in the reason and nothing changes; the
// identity and a ψ that removes a nuisance direction are adopted.
func TestAdoptionRefusesWorseAcceptsBetter(t *testing.T) {
	ctx := t.Context()
	l := testLibrary(t)
	v := nuisanceWorld(t, l, 1, 8, 5, 4)
	// An accepted suggestion and a rejection: decisions adoption must keep.
	fs, err := l.Faces(FaceFilter{Unknown: true})
	if err != nil {
		t.Fatal(err)
	}
	people, _ := l.People()
	if _, err := l.AssignAuto([]Assignment{{Face: fs[0].ID, Person: people[0].ID}}); err != nil {
		t.Fatal(err)
	}
	if err := l.RejectFace(fs[1].ID, people[1].Name); err != nil {
		t.Fatal(err)
	}
	before := decisionRows(t, l)
	raw := faceDescriptors(t, l, true)

	bad := importModel(t, l, scramble(5))
	d, err := l.UseModel(ctx, bad)
	if err != nil {
		t.Fatal(err)
	}
	if d.Adopted || !strings.Contains(d.Reason, "candidate") || d.Current == nil || d.Candidate == nil {
		t.Fatalf("the scrambling ψ: %+v", d)
	}
	if d.Candidate.Suggested >= d.Current.Suggested && d.Candidate.Wrong <= d.Current.Wrong {
		t.Fatalf("the scrambling ψ measured as good: %+v vs %+v", d.Candidate, d.Current)
	}
	t.Logf("refused: %s", d.Reason)
	if v, _ := l.ActiveModel(ctx); v != 0 {
		t.Fatalf("active model %d after a refusal", v)
	}
	if got := faceDescriptors(t, l, false); !equalDescs(got, raw) {
		t.Fatal("a refused model changed the descriptors suggestions use")
	}
	log, err := l.ModelLog(ctx)
	if err != nil || len(log) != 1 || log[0].Adopted || log[0].Reason != d.Reason {
		t.Fatalf("model log after the refusal: %+v, %v", log, err)
	}

	id := importModel(t, l, psimodel.Identity(128))
	if d, err = l.UseModel(ctx, id); err != nil || !d.Adopted || *d.Current != *d.Candidate {
		t.Fatalf("the identity: %+v, %v", d, err)
	}
	if got := faceDescriptors(t, l, false); !equalDescs(got, raw) {
		t.Fatal("the identity changed descriptors")
	}

	better := importModel(t, l, removeDirection(v))
	d, err = l.UseModel(ctx, better)
	if err != nil || !d.Adopted {
		t.Fatalf("the better ψ: %+v, %v", d, err)
	}
	if d.Candidate.Suggested <= d.Current.Suggested {
		t.Fatalf("the constructed ψ is not better: %+v vs %+v", d.Candidate, d.Current)
	}
	t.Logf("adopted: %s", d.Reason)
	if v, _ := l.ActiveModel(ctx); v != better {
		t.Fatalf("active model %d, want %d", v, better)
	}
	proj := faceDescriptors(t, l, false)
	m := removeDirection(v)
	for fid, x := range raw {
		want, _ := m.Apply(x)
		if !slices.Equal(proj[fid], want) {
			t.Fatalf("face %d not re-projected", fid)
		}
	}
	if after := decisionRows(t, l); after != before {
		t.Fatal("adoption changed a decision's row")
	}
	// Suggestions in the new space: the thresholds follow its scale.
	s, err := l.SuggestSpace(false)
	if err != nil || s.Options.Distance == SuggestDistance {
		t.Fatalf("suggestion options in the adopted space: %+v, %v", s.Options, err)
	}
	if _, err := l.SuggestionsIn(s); err != nil {
		t.Fatal(err)
	}
	// Search takes a query photo's raw descriptors and finds the face
	// they came from at distance 0 in the adopted space.
	res, _, err := l.SearchLibrary([][]float32{raw[fs[2].ID]}, DefaultSuggestOptions(), SearchDistance, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) == 0 || len(res[0].Matches) == 0 || res[0].Matches[0].Face != fs[2].ID || res[0].Matches[0].Distance > 1e-6 {
		t.Fatalf("search under the adopted model: %+v", res)
	}
	// A face added now is projected too.
	nx := slices.Clone(raw[fs[2].ID])
	_, nids, err := l.AddPhoto(PhotoRecord{Path: "/new.jpg", SHA256: sha256.Sum256([]byte("/new.jpg")), Size: 1, Width: 9, Height: 9},
		[]NewFace{{Box: Box{Width: 5, Height: 5}, Score: 0.9, Source: Detected, Descriptor: nx}})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := m.Apply(nx)
	if got := faceDescriptors(t, l, false)[nids[0]]; !slices.Equal(got, want) {
		t.Fatal("a face added under an adopted model is not projected")
	}
	if got := faceDescriptors(t, l, true)[nids[0]]; !slices.Equal(got, nx) {
		t.Fatal("the raw descriptor of a new face changed")
	}
}

func equalDescs(a, b map[int64][]float32) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// TestRollbackRestoresExactly: plain → identity → better, then rollback
// twice restores each earlier state bit for bit; a third has nothing to
// return to.
func TestRollbackRestoresExactly(t *testing.T) {
	ctx := t.Context()
	l := testLibrary(t)
	v := nuisanceWorld(t, l, 2, 6, 4, 3)
	raw := faceDescriptors(t, l, true)
	before := decisionRows(t, l)
	id := importModel(t, l, psimodel.Identity(128))
	better := importModel(t, l, removeDirection(v))
	for _, ver := range []int64{id, better} {
		if d, err := l.UseModel(ctx, ver); err != nil || !d.Adopted {
			t.Fatalf("use %d: %+v, %v", ver, d, err)
		}
	}
	d, err := l.RollbackModel(ctx)
	if err != nil || d.To != id {
		t.Fatalf("rollback: %+v, %v", d, err)
	}
	if got := faceDescriptors(t, l, false); !equalDescs(got, raw) {
		t.Fatal("rollback to the identity did not restore the descriptors exactly")
	}
	if d, err = l.RollbackModel(ctx); err != nil || d.To != 0 {
		t.Fatalf("second rollback: %+v, %v", d, err)
	}
	var projected int
	if err := l.db.QueryRow(`SELECT count(*) FROM faces WHERE projected IS NOT NULL`).Scan(&projected); err != nil || projected != 0 {
		t.Fatalf("%d projected descriptors left under plain descriptors, %v", projected, err)
	}
	if got := faceDescriptors(t, l, false); !equalDescs(got, raw) {
		t.Fatal("rollback to plain descriptors is not exact")
	}
	if _, err := l.RollbackModel(ctx); !errors.Is(err, ErrNoRollback) {
		t.Fatalf("rollback from plain: %v", err)
	}
	if after := decisionRows(t, l); after != before {
		t.Fatal("adoption and rollback changed a decision's row")
	}
	if err := l.CheckIntegrity(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestTooFewNamesRefused: without two people named twice, nothing is
// adopted, not even the identity.
func TestTooFewNamesRefused(t *testing.T) {
	l := testLibrary(t)
	nuisanceWorld(t, l, 3, 3, 2, 1)
	d, err := l.UseModel(t.Context(), importModel(t, l, psimodel.Identity(128)))
	if err != nil || d.Adopted || !strings.Contains(d.Reason, "too few names") {
		t.Fatalf("%+v, %v", d, err)
	}
}

// TestImportRefusesHostileFiles: model files with NaN or Inf weights, a
// wrong dimension, truncated or with trailing bytes are refused with an
// error naming the fault, and the library is unchanged.
func TestImportRefusesHostileFiles(t *testing.T) {
	l := testLibrary(t)
	nuisanceWorld(t, l, 4, 3, 3, 2)
	before := decisionRows(t, l)
	good, _ := psimodel.Identity(128).MarshalBinary()
	withWeight := func(w float32) []byte {
		// Encode by hand: MarshalBinary refuses non-finite weights.
		b := slices.Clone(good)
		off := len("VPSI") + 1 + 8 + 8 + 4*77
		bits := math.Float32bits(w)
		b[off], b[off+1], b[off+2], b[off+3] = byte(bits), byte(bits>>8), byte(bits>>16), byte(bits>>24)
		s := sha256.Sum256(b[:len(b)-32])
		return append(b[:len(b)-32], s[:]...)
	}
	small, _ := psimodel.Identity(64).MarshalBinary()
	for _, c := range []struct {
		name, want string
		b          []byte
	}{
		{"NaN", "non-finite", withWeight(float32(math.NaN()))},
		{"Inf", "non-finite", withWeight(float32(math.Inf(1)))},
		{"wrong dimension", "64-value descriptors", small},
		{"truncated", "truncated", good[:len(good)/2]},
		{"trailing bytes", "checksum", append(slices.Clone(good), 0)},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := l.ImportModel(t.Context(), c.b)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("ImportModel = %v, want an error with %q", err, c.want)
			}
			ms, err := l.Models(t.Context())
			if err != nil || len(ms) != 0 {
				t.Fatalf("models after a refused import: %v, %v", ms, err)
			}
		})
	}
	if after := decisionRows(t, l); after != before {
		t.Fatal("a refused import changed the library")
	}
}

// TestMigrationAddsModels: a version 5 library with a face opens at this
// build's version, its face intact, plain descriptors active, and can
// import a model; its integrity record follows the new schema.
func TestMigrationAddsModels(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	l, err := create(ctx, dir, []byte(testPass), cheapKDF, 5, deriveKEK)
	if err != nil {
		t.Fatal(err)
	}
	d := testDescriptor(3)
	if err := l.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.Exec(`INSERT INTO photos (path, content_mac, size, width, height, added_at) VALUES ('/v5.jpg', ?, 1, 1, 1, 0)`, bytes.Repeat([]byte{1}, 32)); err != nil {
			return err
		}
		if _, err := tx.Exec(`INSERT INTO faces (photo_id, x, y, w, h, score, fit, source) VALUES (1, 0, 0, 1, 1, 0.9, 0.1, 'detected')`); err != nil {
			return err
		}
		sealed, err := l.Seal("faces", "descriptor", 1, EncodeDescriptor(d))
		if err != nil {
			return err
		}
		_, err = tx.Exec(`UPDATE faces SET descriptor = ? WHERE id = 1`, sealed)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l, err = Open(dir, []byte(testPass))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if v, err := schemaVersion(ctx, l.db); err != nil || v != SchemaVersion {
		t.Fatalf("schema version %d, %v", v, err)
	}
	if got := faceDescriptors(t, l, false)[1]; !slices.Equal(got, d) {
		t.Fatal("the face's descriptor changed in the migration")
	}
	if v, err := l.ActiveModel(ctx); err != nil || v != 0 {
		t.Fatalf("active model %d, %v", v, err)
	}
	importModel(t, l, psimodel.Identity(128))
	if err := l.CheckIntegrity(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRotateKeyKeepsModels: after RotateKey, the model versions, the
// decisions, the active setting and the projected descriptors all read
// under the new key.
func TestRotateKeyKeepsModels(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	l, err := Create(dir, []byte(testPass), cheapKDF)
	if err != nil {
		t.Fatal(err)
	}
	v := nuisanceWorld(t, l, 6, 5, 4, 3)
	better := importModel(t, l, removeDirection(v))
	if d, err := l.UseModel(ctx, better); err != nil || !d.Adopted {
		t.Fatalf("%+v, %v", d, err)
	}
	want := faceDescriptors(t, l, false)
	l.Close()
	const newTestPass = "a new passphrase for the rotation"
	if err := RotateKey(ctx, dir, []byte(testPass), func() ([]byte, error) { return []byte(newTestPass), nil }, cheapKDF, nil); err != nil {
		t.Fatal(err)
	}
	l, err = Open(dir, []byte(newTestPass))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if a, err := l.ActiveModel(ctx); err != nil || a != better {
		t.Fatalf("active model after rotation: %d, %v", a, err)
	}
	if ms, err := l.Models(ctx); err != nil || len(ms) != 1 {
		t.Fatalf("models after rotation: %v, %v", ms, err)
	}
	if log, err := l.ModelLog(ctx); err != nil || len(log) != 1 {
		t.Fatalf("decisions after rotation: %v, %v", log, err)
	}
	if got := faceDescriptors(t, l, false); !equalDescs(got, want) {
		t.Fatal("projected descriptors changed in the rotation")
	}
	if d, err := l.RollbackModel(ctx); err != nil || d.To != 0 {
		t.Fatalf("rollback after rotation: %+v, %v", d, err)
	}
}
