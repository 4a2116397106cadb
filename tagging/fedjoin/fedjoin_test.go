package fedjoin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/veil-privacy/veil/collab"
	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/client/clienttest"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/ops"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/fed/wire"
	"github.com/veil-privacy/veil/tagging"
)

const testPass = "fedjoin test passphrase"

// synthLibrary makes a library of people with photos faces each (clustered
// descriptors), named names of each, one unnamed face of the first person
// rejected as the second and one accepted suggestion per person.
func synthLibrary(t *testing.T, people, photos, named int) *tagging.Library {
	t.Helper()
	l, err := tagging.Create(t.TempDir(), []byte(testPass), tagging.CreateOptions{KDF: tagging.KDFParams{Time: 1, MemoryKiB: 64, Threads: 1}, TestSettings: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	rng := rand.New(rand.NewPCG(7, uint64(people)))
	var unnamed [][]int64
	for p := range people {
		c := make([]float64, 128)
		for i := range c {
			c[i] = 0.09 * rng.NormFloat64()
		}
		var ids []int64
		for k := range photos {
			d := make([]float32, 128)
			for i := range d {
				d[i] = float32(c[i] + 0.02*rng.NormFloat64())
			}
			path := fmt.Sprintf("/photos/%d/%d.jpg", p, k)
			_, fids, err := l.AddPhoto(tagging.PhotoRecord{Path: path, SHA256: sha256.Sum256([]byte(path)), Size: 1, Width: 640, Height: 480},
				[]tagging.NewFace{{Box: tagging.Box{X: 10, Y: 20, Width: 80, Height: 90}, Score: 0.9, Source: tagging.Detected, Descriptor: d}})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, fids...)
		}
		if _, err := l.NameFaces(ids[:named], personName(p)); err != nil {
			t.Fatal(err)
		}
		unnamed = append(unnamed, ids[named:])
	}
	if people >= 2 && len(unnamed[0]) > 0 {
		if err := l.RejectFace(unnamed[0][0], personName(1)); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

func personName(p int) string { return fmt.Sprintf("Zelda Quimby-%d", p) }

// decisions is every user decision of the library: each face's person
// and who assigned it, the rejections and the people.
func decisions(t *testing.T, l *tagging.Library) string {
	t.Helper()
	faces, err := l.Faces(tagging.FaceFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range faces {
		fmt.Fprintf(&b, "face %d: person %d by %q removed %v\n", f.ID, f.PersonID, f.AssignedBy, f.Removed)
	}
	rej, err := l.Rejections()
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int64, 0, len(rej))
	for id := range rej {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		fmt.Fprintf(&b, "rejected %d: %v\n", id, rej[id])
	}
	ps, err := l.People()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		fmt.Fprintf(&b, "person %d %q hidden %v\n", p.ID, p.Name, p.Hidden)
	}
	return b.String()
}

// psiWeights is ψ at the identity, as the coordinator serves it.
func psiWeights(t *testing.T) wire.Weights {
	t.Helper()
	ck, err := InitialModel(collab.PsiOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := ops.WeightsFromCheckpoint(ck)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func testPolicy(eps float64) client.Policy {
	p := client.DefaultPolicy(dp.Budget{Epsilon: eps, Delta: 1e-5})
	return p
}

func roundTask(sigma float64, epochs uint32) *fedpb.RoundConfig {
	return &fedpb.RoundConfig{Round: 1, Rounds: 2, Strategy: "fedavg", LocalEpochs: epochs, LearningRate: 0.001, Batch: 4,
		Dp: &fedpb.DPParams{NoiseMultiplier: sigma, Clip: 1, Delta: 1e-5, PrivacyUnit: "identity"}}
}

func identity(t *testing.T, adv *clienttest.Coordinator, name string) *pki.Identity {
	t.Helper()
	id, err := pki.LoadIdentity(filepath.Join(adv.PKI, name+".crt"), filepath.Join(adv.PKI, name+".key"), filepath.Join(adv.PKI, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func joinAgainst(ctx context.Context, t *testing.T, adv *clienttest.Coordinator, l *tagging.Library, p client.Policy) (*Report, error) {
	t.Helper()
	return Join(ctx, Options{Library: l, Addr: adv.Addr, ServerName: "localhost", Identity: identity(t, adv, "lib"), Policy: p,
		ReconnectFor: -1})
}

var libSet = dp.DataSet{Name: DataSet, Unit: "identity"}

// ledgerBytes is the library ledger's encoding ("" when there is none).
func ledgerBytes(t *testing.T, l *tagging.Library) string {
	t.Helper()
	led, err := l.Ledger().Read(libSet)
	if errors.Is(err, dp.ErrNoLedger) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	b, err := led.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestTooFewPeopleSendsNothing: a library with two named people is
// refused before anything is dialled: the coordinator sees no join, no
// stream, no download, and the library keeps no ledger and no record.
func TestTooFewPeopleSendsNothing(t *testing.T) {
	l := synthLibrary(t, 2, 4, 3)
	before := decisions(t, l)
	adv := clienttest.Start(t, roundTask(2, 1), psiWeights(t), "lib")
	_, err := joinAgainst(t.Context(), t, adv, l, testPolicy(8))
	if !errors.Is(err, ErrTooFewPeople) || !strings.Contains(err.Error(), "2 people with named faces") || !strings.Contains(err.Error(), "at least 4") ||
		!strings.Contains(err.Error(), "nothing was sent") {
		t.Fatalf("Join with 2 named people: %v", err)
	}
	if len(adv.Joins()) != 0 || adv.Polls() != 0 || adv.Downloads() != 0 || len(adv.Updates()) != 0 {
		t.Fatalf("the coordinator heard from the library: %d joins, %d streams, %d downloads, %d updates",
			len(adv.Joins()), adv.Polls(), adv.Downloads(), len(adv.Updates()))
	}
	if ledgerBytes(t, l) != "" {
		t.Error("a refused library has a ledger")
	}
	if m, err := ReadMembership(t.Context(), l); err != nil || m != nil {
		t.Errorf("a refused library records a membership: %+v, %v", m, err)
	}
	if after := decisions(t, l); after != before {
		t.Errorf("decisions changed:\n%s\nwant\n%s", after, before)
	}
}

// charge spends on the library's ledger as an earlier run would have.
func charge(t *testing.T, l *tagging.Library, budget float64, sigma float64, steps int) {
	t.Helper()
	ev, err := dp.SubsampledDiscreteGaussianEvent(1, sigma, steps)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Ledger().Update(libSet, func(led *dp.DataLedger) error {
		if err := led.SetBudget(dp.Budget{Epsilon: budget, Delta: 1e-5}); err != nil {
			return err
		}
		_, err := led.Charge(dp.Charge{Label: "an earlier run", Events: []dp.Event{ev}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// TestRefusalsLeaveTheLedger plays a coordinator that offers a round the
// library must refuse: one that would take its people past the budget
// (the ledger already holds an earlier run's charge), one with less noise
// than the owner's least σ, one per image instead of per person, one
// without DP. Each is refused with its reason; the ledger is byte for
// byte what it was, no update is sent, and no user decision changes.
func TestRefusalsLeaveTheLedger(t *testing.T) {
	for _, c := range []struct {
		name    string
		edit    func(*fedpb.RoundConfig)
		outcome string
		want    error
	}{
		{"past the budget", func(r *fedpb.RoundConfig) { r.LocalEpochs = 40 }, "budget_exhausted", client.ErrBudgetExhausted},
		{"less noise", func(r *fedpb.RoundConfig) { r.Dp.NoiseMultiplier = 0.5 }, "refused", client.ErrPolicy},
		{"per image", func(r *fedpb.RoundConfig) { r.Dp.PrivacyUnit = "example" }, "refused", client.ErrPolicy},
		{"no DP", func(r *fedpb.RoundConfig) { r.Dp = nil }, "refused", client.ErrPolicy},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := synthLibrary(t, 6, 4, 3)
			charge(t, l, 3, 6, 5)
			before, beforeLedger := decisions(t, l), ledgerBytes(t, l)
			task := roundTask(1, 1)
			c.edit(task)
			adv := clienttest.Start(t, task, psiWeights(t), "lib")
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			rep, err := joinAgainst(ctx, t, adv, l, testPolicy(3))
			if !errors.Is(err, c.want) || rep == nil || rep.Outcome != c.outcome {
				t.Fatalf("Join: %+v, %v; want outcome %s and %v", rep, err, c.outcome, c.want)
			}
			if got := ledgerBytes(t, l); got != beforeLedger {
				t.Errorf("the refused round changed the ledger:\n%s\nwas\n%s", got, beforeLedger)
			}
			if n := len(adv.Updates()); n != 0 {
				t.Errorf("the library sent %d updates", n)
			}
			if d := adv.Declines(); len(d) != 1 {
				t.Errorf("declines %v, want one naming the reason", d)
			}
			if after := decisions(t, l); after != before {
				t.Errorf("decisions changed:\n%s\nwant\n%s", after, before)
			}
		})
	}
}

// TestRoundSendsOnlyPsi: a round within the policy is charged to the
// library's ledger (on ψ's and φ's noised values) before training, and
// what leaves is ψ's update alone: the model's tensors, no classifier, no
// tag; the join request carries no name; the people's names appear
// nowhere in what the coordinator received.
func TestRoundSendsOnlyPsi(t *testing.T) {
	l := synthLibrary(t, 6, 4, 3)
	before := decisions(t, l)
	model := psiWeights(t)
	adv := clienttest.Start(t, roundTask(2, 1), model, "lib")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	rep, err := joinAgainst(ctx, t, adv, l, testPolicy(8))
	// The adversary serves no status: the run ends without a model to adopt.
	if rep == nil || rep.Outcome != "done" || err == nil || rep.Decision != nil {
		t.Fatalf("Join: %+v, %v", rep, err)
	}
	ups := adv.Updates()
	if len(ups) != 1 {
		t.Fatalf("%d updates, want 1", len(ups))
	}
	h := ups[0]
	var names []string
	for _, x := range h.GetWeights().GetTensors() {
		names = append(names, x.GetName())
	}
	var want []string
	for _, x := range model {
		want = append(want, x.Name)
	}
	if !slices.Equal(names, want) || h.GetWeights().GetTotalBytes() != uint64(4*model.Len()) {
		t.Errorf("the update holds %v (%d bytes), want ψ's %v (%d bytes)", names, h.GetWeights().GetTotalBytes(), want, 4*model.Len())
	}
	if h.GetDp().GetPrivacyUnit() != "identity" || h.GetDp().GetNoiseMultiplier() != 2 {
		t.Errorf("the update states DP %v", h.GetDp())
	}
	seen := fmt.Sprint(adv.Joins(), h)
	for p := range 6 {
		if strings.Contains(seen, personName(p)) || strings.Contains(seen, "Zelda") {
			t.Fatalf("a name reached the coordinator: %s", seen)
		}
	}
	led, err := l.Ledger().Read(libSet)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := Prepare(l, DefaultMinPeople, TrainerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dim, err := tr.NoisedDimension(model)
	if err != nil {
		t.Fatal(err)
	}
	if dim <= model.Len() {
		t.Errorf("noised dimension %d, want ψ's %d plus φ's", dim, model.Len())
	}
	ev, err := client.Event(h.GetDp(), dim)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := dp.NewDataLedger(libSet, bytes.Repeat([]byte{1}, 32))
	if err != nil {
		t.Fatal(err)
	}
	if err := fresh.SetBudget(dp.Budget{Epsilon: 8, Delta: 1e-5}); err != nil {
		t.Fatal(err)
	}
	wantSpent, err := fresh.Charge(dp.Charge{Label: "x", Events: []dp.Event{ev}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := led.Spent(nil)
	if err != nil || got.Epsilon != wantSpent.Epsilon || rep.EpsilonSpent != got.Epsilon {
		t.Errorf("ledger spent %v (%v), report %g; want %g (the plan on %d values)", got.Epsilon, err, rep.EpsilonSpent, wantSpent.Epsilon, dim)
	}
	if after := decisions(t, l); after != before {
		t.Errorf("decisions changed:\n%s\nwant\n%s", after, before)
	}
}

// TestRefusesAModelThatIsNotPsi: a coordinator serving another network
// than ψ on the descriptor gets a decline ("training"), no update, and the
// library's ledger is not charged.
func TestRefusesAModelThatIsNotPsi(t *testing.T) {
	l := synthLibrary(t, 6, 4, 3)
	charge(t, l, 8, 6, 5)
	beforeLedger := ledgerBytes(t, l)
	other := wire.Weights{{Name: "head/fc/w", Shape: []int{128, 64}, Values: make([]float32, 128*64)}}
	adv := clienttest.Start(t, roundTask(2, 1), other, "lib")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, err := joinAgainst(ctx, t, adv, l, testPolicy(8))
	if !errors.Is(err, client.ErrTrainingFailed) || !strings.Contains(err.Error(), "veil fed init-model --model psi") {
		t.Fatalf("Join against a model that is not ψ: %v", err)
	}
	if got := ledgerBytes(t, l); got != beforeLedger {
		t.Error("the ledger was charged for a round the library could not train")
	}
	if n := len(adv.Updates()); n != 0 {
		t.Errorf("the library sent %d updates", n)
	}
	if d := adv.Declines(); len(d) != 1 || d[0].GetReason() != "training" {
		t.Errorf("declines %v, want one for training", d)
	}
}
