package collab

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// synthSplit is a split of people around random centres: people with
// faces photos, then strangers with one.
func synthSplit(seed uint64, people, faces, strangers int) *Split {
	l := synthLibrary(rand.New(rand.NewPCG(seed, 1)), people, faces, strangers)
	s := &Split{Descs: l.Descs, Identity: l.Person, Stranger: make([]bool, people+strangers)}
	for p := range l.Stranger {
		s.Stranger[p] = true
	}
	return s
}

func TestSimulateSpreadsPeopleAsAsked(t *testing.T) {
	s := synthSplit(1, 40, 8, 30)
	users := simulate(s, 6, 3, 5, false, rand.New(rand.NewPCG(2, 3)))
	strangers := 0
	for _, l := range users {
		per := map[int]int{}
		for _, p := range l.Person {
			per[p]++
		}
		for p, n := range per {
			if l.Stranger[p] {
				strangers++
				if n != 1 {
					t.Fatalf("a stranger with %d faces", n)
				}
			} else if n > 5 {
				t.Fatalf("a person with %d photos in one library (cap 5)", n)
			}
		}
	}
	if strangers != 30 {
		t.Fatalf("%d strangers placed, want each of the 30 in one library", strangers)
	}
	// Each named person is in 1…3 libraries: count libraries per split
	// person through the descriptors' identity.
	owner := map[*float32]int{}
	for i, d := range s.Descs {
		owner[&d[0]] = s.Identity[i]
	}
	libsOf := map[int]map[int]bool{}
	for u, l := range users {
		for _, d := range l.Descs {
			p := owner[&d[0]]
			if libsOf[p] == nil {
				libsOf[p] = map[int]bool{}
			}
			libsOf[p][u] = true
		}
	}
	for p := range 40 {
		if n := len(libsOf[p]); n < 1 || n > 3 {
			t.Fatalf("person %d in %d libraries, want 1…3", p, n)
		}
	}
	held := simulate(s, 4, 1, 1<<30, true, rand.New(rand.NewPCG(4, 5)))
	libsOf = map[int]map[int]bool{}
	total := 0
	for u, l := range held {
		total += len(l.Descs)
		for _, d := range l.Descs {
			p := owner[&d[0]]
			if libsOf[p] == nil {
				libsOf[p] = map[int]bool{}
			}
			libsOf[p][u] = true
		}
	}
	if total != len(s.Descs) {
		t.Fatalf("held-out libraries hold %d faces, want all %d", total, len(s.Descs))
	}
	for p, us := range libsOf {
		if len(us) != 1 {
			t.Fatalf("held-out person %d in %d libraries", p, len(us))
		}
	}
}

// TestRunReportsEveryMethod runs a small experiment end to end on
// synthetic people and checks the report: every method, both numbers of
// named photos, rates in [0, 1], the ε of each method, and plain's figures
// equal to the library's rule scored directly.
func TestRunReportsEveryMethod(t *testing.T) {
	train := withPublic(synthSplit(5, 40, 8, 40), 1)
	test := withPublic(synthSplit(6, 16, 8, 20), 2)
	o := Options{Users: 4, HeldOut: 2, MaxUsersPerPerson: 2, Trials: 1, Classes: 64, Epochs: 2, Batch: 16, Iterations: 5, Workers: 1, Seed: 7,
		PublicOut: 8, PublicHidden: -1}
	rep, err := Run(context.Background(), train, test, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range append(append([]string{}, Methods...), PublicMethods...) {
		r, ok := rep.Methods[m]
		if !ok {
			t.Fatalf("method %s missing", m)
		}
		for _, s := range []Score{r.Named1, r.Named3, r.LibraryGoal.Named1, r.LibraryGoal.Named3} {
			for _, v := range []float64{s.Precision, s.Coverage, s.StrangersRate} {
				if !(v >= 0 && v <= 1) {
					t.Fatalf("%s: a rate %g outside [0, 1]: %+v", m, v, s)
				}
			}
			if s.Known == 0 || s.Strangers == 0 {
				t.Fatalf("%s scored no faces: %+v", m, s)
			}
		}
	}
	if e := rep.Methods["plain"].EpsilonPerUser; e == nil || *e != 0 {
		t.Fatal("plain shares nothing: its ε must be 0")
	}
	for _, m := range []string{"shared_w0", "shared_w0_public"} {
		if rep.Methods[m].EpsilonPerUser != nil {
			t.Fatalf("%s: W₀ is shared without DP: its ε must be reported as unbounded (null)", m)
		}
		if b := rep.Methods[m].BytesPerUser; b != nil {
			t.Errorf("%s without DP: bytes per user %d, want null", m, *b)
		}
	}
	if rep.W0 != nil || rep.W0Public != nil {
		t.Fatalf("W₀ exchange reported without DP: %+v, %+v", rep.W0, rep.W0Public)
	}
	if rep.Methods["shared_bootstrap"].EpsilonPerUser != nil {
		t.Fatal("bootstrapping without DP reported an ε")
	}
	// Bytes per user (TestWireBytesHandComputed): ψ 128→128 is 66,124
	// bytes a message, 2 epochs → 2 rounds of a download and an upload;
	// W₀ without DP has no federated form (null).
	for m, want := range map[string]int64{"plain": 0, "local_lmnn": 0, "shared_bootstrap": 4 * 66124, "per_user_metric": 4 * 66124} {
		if b := rep.Methods[m].BytesPerUser; b == nil || *b != want {
			t.Errorf("%s: bytes per user %v, want %d", m, b, want)
		}
	}
	if rep.Methods["local_lmnn"].Fitted[0] != 0 {
		t.Fatal("a library with one name per person learned a metric")
	}
	if rep.Methods["local_lmnn"].Fitted[1] == 0 {
		t.Fatal("no library with three names per person learned a metric")
	}
	// plain, scored directly with the library's rule.
	rng := rand.New(rand.NewPCG(o.Seed, 0xc011ab))
	_ = simulate(train, o.Users, o.MaxUsersPerPerson, 10, false, rng)
	held := simulate(test, o.HeldOut, 1, 1<<62, true, rng)
	o2 := o
	if err := o2.defaults(); err != nil {
		t.Fatal(err)
	}
	got, err := heldOut(held, tuned{dist: 0.5, mg: 0.04}, 3, &o2)
	if err != nil {
		t.Fatal(err)
	}
	if got != rep.PlainDefaults.Named3 {
		t.Fatalf("plain at the library's thresholds with 3 named: report %+v, direct %+v", rep.PlainDefaults.Named3, got)
	}
	// The main figures' setting meets the matched goal on the training
	// users whenever plain's own setting can.
	if tr := rep.Methods["plain"].Train; tr == nil || !rep.Goal.meets(*tr) {
		t.Fatalf("plain's chosen setting %+v does not meet the goal %+v it was chosen by", tr, rep.Goal)
	}
	if rep.PersonLibraries < 40 || rep.Bootstrap == nil || rep.Bootstrap.Units != rep.PersonLibraries {
		t.Fatalf("bootstrapping on %d person-libraries: %+v", rep.PersonLibraries, rep.Bootstrap)
	}
}

func TestRunRefusesBadOptions(t *testing.T) {
	s := synthSplit(1, 4, 5, 2)
	for _, o := range []Options{
		{Users: 1},
		{MaxUsersPerPerson: 99},
		{PhotosPerUser: 2},
		{Epsilon: -1},
		{Epsilon: 8, Budget: 4},
	} {
		if _, err := Run(context.Background(), s, s, o); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
}

// withPublic gives s public features: a fixed random map of each
// descriptor to 24 values, plus noise.
func withPublic(s *Split, seed uint64) *Split {
	rng := rand.New(rand.NewPCG(seed, 77))
	proj := make([]float64, 24*128)
	for i := range proj {
		proj[i] = rng.NormFloat64()
	}
	s.Public = nil
	for _, d := range s.Descs {
		p := make([]float32, 24)
		for r := range p {
			v := 0.3 * rng.NormFloat64()
			for c, x := range d {
				v += proj[r*128+c] * float64(x)
			}
			p[r] = float32(v)
		}
		s.Public = append(s.Public, p)
	}
	return s
}

// TestRunUnderDPChargesW0: under DP, W₀'s exchange is charged to the
// same ledgers as bootstrapping, so shared_w0's ε per user is the two
// composed (above bootstrapping's alone, within the budget); a budget
// that covers bootstrapping but not W₀ stops the run; public features
// give the public methods.
func TestRunUnderDPChargesW0(t *testing.T) {
	train := withPublic(synthSplit(5, 40, 8, 40), 1)
	test := withPublic(synthSplit(6, 16, 8, 20), 2)
	o := Options{Users: 4, HeldOut: 2, MaxUsersPerPerson: 2, Trials: 1, Classes: 64, Epochs: 2, Batch: 16, Iterations: 5, Workers: 1, Seed: 7,
		Epsilon: 4, EpsilonW0: 2, W0: W0DP{Steps: 3}, PublicOut: 8, PublicHidden: -1}
	rep, err := Run(context.Background(), train, test, o)
	if err != nil {
		t.Fatal(err)
	}
	eb, ew := rep.Methods["shared_bootstrap"].EpsilonPerUser, rep.Methods["shared_w0"].EpsilonPerUser
	if eb == nil || ew == nil || !(*ew > *eb) || *ew > 6 || *eb > 4 {
		t.Fatalf("ε per user: bootstrapping %v, with W₀ %v (targets 4 and 2, budget 6)", eb, ew)
	}
	if rep.W0 == nil || rep.W0.Epsilon > 2 || rep.W0.Steps != 3 || rep.W0.Libraries != 4 {
		t.Fatalf("W₀ exchange %+v", rep.W0)
	}
	for _, m := range PublicMethods {
		r, ok := rep.Methods[m]
		if !ok || r.Named3.Known == 0 {
			t.Fatalf("public method %s missing or empty", m)
		}
	}
	ebp, ewp := rep.Methods["shared_bootstrap_public"].EpsilonPerUser, rep.Methods["shared_w0_public"].EpsilonPerUser
	if ebp == nil || *ebp > 4 {
		t.Fatalf("ψ on public features: ε %v", deref(ebp))
	}
	// W₀ on public features is charged to the public ledgers after ψ's
	// bootstrapping: ε composed from both stages, above bootstrapping's
	// alone, within the budget; the same mechanisms on the same units
	// (person-libraries, epochs, batch, steps) as the descriptor design,
	// so the same composition as shared_w0's (to 10⁻³: bootstrapping's σ
	// comes from a numerical search).
	if ewp == nil || !(*ewp > *ebp) || *ewp > 6 || math.Abs(*ewp-*ew) > 1e-3 {
		t.Fatalf("ε per user on public features: bootstrapping %v, with W₀ %v (shared_w0 %g)", deref(ebp), deref(ewp), *ew)
	}
	if w := rep.W0Public; w == nil || w.Epsilon > 2 || w.Steps != 3 || w.Libraries != 4 || *ewp < w.Epsilon {
		t.Fatalf("W₀ exchange on public features %+v", w)
	}
	// ψ 128→128: 66,124 bytes a message; W₀'s 3 steps of 65,591 each
	// way; ψ 24→8 on public features: 872 a message; 2 epochs each; its
	// 8×8 V₀: 308 bytes a message (a 52-byte header and 256 of values).
	for m, want := range map[string]int64{"shared_bootstrap": 4 * 66124, "shared_w0": 4*66124 + 6*65591,
		"per_user_metric": 4 * 66124, "public_plain": 0, "shared_bootstrap_public": 4 * 872, "shared_w0_public": 4*872 + 6*308} {
		if b := rep.Methods[m].BytesPerUser; b == nil || *b != want {
			t.Errorf("%s: bytes per user %v, want %d", m, b, want)
		}
	}
	o.Budget = 4.5
	if _, err := Run(context.Background(), train, test, o); err == nil || !strings.Contains(err.Error(), "W₀") {
		t.Fatalf("a budget below bootstrapping and W₀ together: %v", err)
	}
}

// deref prints an optional ε: its value, or null.
func deref(e *float64) any {
	if e == nil {
		return "null"
	}
	return *e
}
