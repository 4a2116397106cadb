package ddp

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/dp"
)

// testPolicy is an owner's policy: ε = 4 over 30 rounds, trusting 5
// honest clients besides up to 1 colluder.
func testPolicy() Policy {
	return Policy{Unit: dp.UnitIdentity, Budget: dp.Budget{Epsilon: 4, Delta: 1e-5}, MaxClip: 1, MaxSamplingRate: 0.2,
		MinHonest: 5, MaxColluders: 1, Rounds: 30}
}

// testPlan is a coordinator's honest plan for testPolicy's clients, its
// noise share set to what the policy requires.
func testPlan(t *testing.T) Plan {
	t.Helper()
	p := Plan{Unit: dp.UnitIdentity, Delta: 1e-5, Clip: 1, SamplingRate: 0.1, Rounds: 30, Clients: 8, Threshold: 6, Noise: 1,
		Dim: 5000, Block: 1024, Scale: 1 << 16, Bits: 32, WrapProb: 1e-9, ExpectedBatch: 50}
	s, err := RequiredNoise(testPolicy(), p)
	if err != nil {
		t.Fatal(err)
	}
	p.Noise = s
	return p
}

// The required noise is the least integer share that keeps the policy's
// own rounds within its budget with its own T, and it does not move with
// the number of clients or the threshold a coordinator states.
func TestRequiredNoiseIsTheClientsOwn(t *testing.T) {
	pol, plan := testPolicy(), testPlan(t)
	m := plan.Mechanism(pol.MinHonest)
	eps, err := m.Epsilon(pol.Rounds, pol.Budget.Delta)
	if err != nil {
		t.Fatal(err)
	}
	if eps > pol.Budget.Epsilon {
		t.Errorf("ε = %g at the required share, over the budget %g", eps, pol.Budget.Epsilon)
	}
	m.Noise--
	if less, _ := m.Epsilon(pol.Rounds, pol.Budget.Delta); less <= pol.Budget.Epsilon {
		t.Errorf("a share of %d also fits the budget (ε = %g): %d is not the least", m.Noise, less, plan.Noise)
	}
	// A coordinator claiming 1000 clients, all of them in every sum,
	// changes nothing in what this client requires.
	big := plan
	big.Clients, big.Threshold = 1000, 1000
	big.Noise = 1
	s, err := RequiredNoise(pol, big)
	if err != nil {
		t.Fatal(err)
	}
	if s != plan.Noise {
		t.Errorf("required share %d with the coordinator's 1000 clients, %d with 8: it must depend on the client's own T only", s, plan.Noise)
	}
	// The owner trusting fewer honest clients needs a larger share.
	fewer := pol
	fewer.MinHonest = 2
	s2, err := RequiredNoise(fewer, plan)
	if err != nil {
		t.Fatal(err)
	}
	if s2 <= plan.Noise {
		t.Errorf("T = 2 requires share %d, T = 5 %d: fewer trusted clients must need more", s2, plan.Noise)
	}
}

// clientRound is what a client does with a round's plan before it touches
// its data: check it against its own policy, then charge its ledger.
func clientRound(dir *dp.LedgerDir, pol Policy, plan Plan) error {
	a, err := Accept(pol, plan)
	if err != nil {
		return err
	}
	_, err = a.Charge(dir, dp.DataSet{Name: "photos", Unit: dp.UnitIdentity}, []string{"alice", "bob"}, "round")
	return err
}

// An adversarial coordinator offers plans weaker than the client's policy
// in each setting; every one is refused with the setting named, and the
// client's ledger file stays byte for byte as it was.
func TestCoordinatorCannotWeakenTheClientsDistributedDP(t *testing.T) {
	pol, honest := testPolicy(), testPlan(t)
	dir, err := dp.OpenLedgerDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := clientRound(dir, pol, honest); err != nil {
		t.Fatalf("the honest plan is refused: %v", err)
	}
	set := dp.DataSet{Name: "photos", Unit: dp.UnitIdentity}
	before, err := os.ReadFile(dir.Path(set))
	if err != nil {
		t.Fatal(err)
	}
	// A coordinator that calibrates the share to the 1000 clients it
	// claims are honest: a smaller share than this client's T requires.
	inflated := honest
	inflated.Clients, inflated.Threshold = 1000, 1000
	big := pol
	big.MinHonest, big.MaxColluders = 1000, 0
	if inflated.Noise, err = RequiredNoise(big, inflated); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, setting string
		edit          func(*Plan)
	}{
		{"a threshold that lets a colluder replace an honest client", "threshold", func(p *Plan) { p.Threshold = 5 }},
		{"a threshold of one", "threshold", func(p *Plan) { p.Threshold = 1 }},
		{"one lattice unit less noise", "noise", func(p *Plan) { p.Noise-- }},
		{"half the noise", "noise", func(p *Plan) { p.Noise /= 2 }},
		{"noise for 1000 honest clients", "noise", func(p *Plan) { *p = inflated }},
		{"a larger sampling rate", "sampling rate", func(p *Plan) { p.SamplingRate = 0.3 }},
		{"a larger clip", "clip", func(p *Plan) { p.Clip = 2 }},
		{"a larger δ", "delta", func(p *Plan) { p.Delta = 1e-4 }},
		{"another unit", "privacy unit", func(p *Plan) { p.Unit = dp.UnitExample }},
		{"a likelier wrap", "wrap probability", func(p *Plan) { p.WrapProb = 0.01 }},
		{"a threshold above the clients", "plan", func(p *Plan) { p.Threshold = 9 }},
		{"no rounds", "plan", func(p *Plan) { p.Rounds = 0 }},
	} {
		plan := honest
		tc.edit(&plan)
		err := clientRound(dir, pol, plan)
		var pe *PlanError
		switch {
		case err == nil:
			t.Errorf("%s: accepted", tc.name)
		case !errors.Is(err, ErrPolicy) || !errors.As(err, &pe):
			t.Errorf("%s: refused with %v, not a policy refusal", tc.name, err)
		case pe.Setting != tc.setting:
			t.Errorf("%s: refused for %q, want %q (%v)", tc.name, pe.Setting, tc.setting, err)
		}
		after, err := os.ReadFile(dir.Path(set))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(before, after) {
			t.Fatalf("%s: the ledger changed", tc.name)
		}
	}
	// More noise, a stricter threshold, a smaller q or clip are accepted.
	stricter := honest
	stricter.Noise, stricter.Threshold, stricter.SamplingRate, stricter.Clip = honest.Noise*2, 8, 0.05, 0.5
	if err := clientRound(dir, pol, stricter); err != nil {
		t.Errorf("a stricter plan is refused: %v", err)
	}
}

// The ledger refuses the round past the budget, unchanged, and records the
// mechanism with its trust assumption.
func TestChargesStopAtTheBudgetAndNameTheAssumption(t *testing.T) {
	pol, plan := testPolicy(), testPlan(t)
	dir, err := dp.OpenLedgerDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a, err := Accept(pol, plan)
	if err != nil {
		t.Fatal(err)
	}
	set := dp.DataSet{Name: "photos", Unit: dp.UnitIdentity}
	people := []string{"alice", "bob"}
	var spent dp.MemberSpent
	for r := range pol.Rounds {
		if spent, err = a.Charge(dir, set, people, "round"); err != nil {
			t.Fatalf("round %d of %d: %v", r+1, pol.Rounds, err)
		}
	}
	if spent.Epsilon > pol.Budget.Epsilon || spent.Epsilon < 0.9*pol.Budget.Epsilon {
		t.Errorf("after the policy's %d rounds ε = %g, want just below %g", pol.Rounds, spent.Epsilon, pol.Budget.Epsilon)
	}
	before, _ := os.ReadFile(dir.Path(set))
	if _, err := a.Charge(dir, set, people, "round"); !errors.Is(err, dp.ErrBudgetExceeded) {
		t.Errorf("the round past the budget: %v, want dp.ErrBudgetExceeded", err)
	}
	after, _ := os.ReadFile(dir.Path(set))
	if !bytes.Equal(before, after) {
		t.Error("a refused charge changed the ledger")
	}
	l, err := dir.Read(set)
	if err != nil {
		t.Fatal(err)
	}
	h := l.History()
	last := h[len(h)-1]
	if !strings.Contains(last.Note, "at least 5 honest clients") || !strings.Contains(last.Note, "distributed discrete Gaussian") {
		t.Errorf("the ledger's charge does not name the mechanism and its assumption: %q", last.Note)
	}
}

func TestPolicyValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Policy)
	}{
		{"no honest client", func(p *Policy) { p.MinHonest = 0 }},
		{"negative colluders", func(p *Policy) { p.MaxColluders = -1 }},
		{"no rounds", func(p *Policy) { p.Rounds = 0 }},
		{"a certain wrap", func(p *Policy) { p.MaxWrapProb = 1 }},
		{"no clip", func(p *Policy) { p.MaxClip = 0 }},
		{"q above 1", func(p *Policy) { p.MaxSamplingRate = 2 }},
		{"unit", func(p *Policy) { p.Unit = "photo" }},
		{"no budget", func(p *Policy) { p.Budget = dp.Budget{} }},
	} {
		p := testPolicy()
		tc.edit(&p)
		if err := p.Validate(); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
	if err := testPolicy().Validate(); err != nil {
		t.Error(err)
	}
}
