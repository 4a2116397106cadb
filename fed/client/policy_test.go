package client_test

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/client/clienttest"
	"github.com/veil-privacy/veil/fed/ddp"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/wire"
)

func model0() wire.Weights {
	return wire.Weights{{Name: "w", Shape: []int{2, 2}, Values: []float32{1, 2, 3, 4}}, {Name: "b", Shape: []int{2}, Values: []float32{0, 0}}}
}

// round is a task inside the test policy: FedAvg, 5 steps, σ = 1, C = 1,
// δ = 1e-5, per identity.
func round() *fedpb.RoundConfig {
	return &fedpb.RoundConfig{Round: 3, Rounds: 5, Strategy: "fedavg", LocalSteps: 5, LearningRate: 0.1, Batch: 8,
		Dp: &fedpb.DPParams{NoiseMultiplier: 1, Clip: 1, Delta: 1e-5, PrivacyUnit: "identity"}}
}

// policy is the test owner's: per identity, ε = 10 at δ = 1e-5, σ ≥ 1,
// C ≤ 1, q ≤ 0.5.
func policy() client.Policy {
	p := client.DefaultPolicy(dp.Budget{Epsilon: 10, Delta: 1e-5})
	p.MaxSamplingRate = 0.5
	return p
}

// planTrainer plans what the round asks (σ: the round's, or its own when
// the round leaves σ to the client; q its own) and edit may then change
// the plan, as a trainer that calibrates or misbehaves would. It records
// whether it was asked to train.
type planTrainer struct {
	sigma, q float64
	edit     func(*fedpb.DPParams)

	mu      sync.Mutex
	trained []*fedpb.DPParams
}

func (p *planTrainer) Plan(task *fedpb.RoundConfig, _ float64) (*fedpb.DPParams, error) {
	d := task.GetDp()
	plan := &fedpb.DPParams{NoiseMultiplier: d.GetNoiseMultiplier(), Clip: d.GetClip(), SamplingRate: p.q, Steps: uint64(task.GetLocalSteps()),
		Delta: d.GetDelta(), PrivacyUnit: d.GetPrivacyUnit()}
	if plan.NoiseMultiplier == 0 {
		plan.NoiseMultiplier = p.sigma
	}
	if p.edit != nil {
		p.edit(plan)
	}
	return plan, nil
}

func (p *planTrainer) Train(_ context.Context, model wire.Weights, task *fedpb.RoundConfig, plan *fedpb.DPParams) (client.Update, error) {
	p.mu.Lock()
	p.trained = append(p.trained, plan)
	p.mu.Unlock()
	up := model.Clone()
	for i := range up {
		for j := range up[i].Values {
			up[i].Values[j] = 0.01
		}
	}
	u := client.Update{Weights: up, DP: plan}
	if task.GetDp() == nil {
		u.Examples = 1
	}
	return u, nil
}

func (p *planTrainer) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.trained)
}

// snapshot returns every file under dir with its bytes.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		files[path] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// run is what runAgainst saw: the client's error, the adversary, and the
// client's folder and its files before and after the run.
type run struct {
	err           error
	adv           *clienttest.Coordinator
	before, after map[string]string
	dir           string
}

// ledgerFile is the ledger runAgainst's client keeps in its folder dir.
func ledgerFile(dir string) string { return filepath.Join(dir, "ledgers", "client-1.identity.ledger") }

// runAgainst runs a client with policy p and trainer tr against an
// adversary offering task.
func runAgainst(t *testing.T, task *fedpb.RoundConfig, p client.Policy, tr client.Trainer) run {
	t.Helper()
	adv := clienttest.Start(t, task, model0(), "client-1")
	dir := filepath.Join(t.TempDir(), "client-1")
	// The ledger folder is inside the client's folder here, so that the
	// snapshots hold the ledger too.
	c, err := client.New(client.Options{Addr: adv.Addr, Creds: adv.Creds(t, "client-1"), Policy: p, Dir: dir,
		LedgerDir: filepath.Join(dir, "ledgers"), DataSet: "client-1", Trainer: tr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	before := snapshot(t, dir)
	if len(before) == 0 {
		t.Fatal("the client keeps no ledger in its folder")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	runErr := c.Run(ctx)
	return run{err: runErr, adv: adv, before: before, after: snapshot(t, dir), dir: dir}
}

// TestRoundOutsideThePolicyIsRefused plays a coordinator that asks a
// client for weaker privacy than its owner's policy, one setting at a
// time (in the round's task, or through a trainer whose plan would run
// it): the client refuses, the error names the setting, no update is
// sent, the trainer never trains, and every file of the client (its
// ledger) is unchanged, byte for byte.
func TestRoundOutsideThePolicyIsRefused(t *testing.T) {
	for _, c := range []struct {
		name    string
		task    func(*fedpb.RoundConfig)
		plan    func(*fedpb.DPParams)
		setting client.Setting
		want    string
	}{
		{name: "no DP", task: func(r *fedpb.RoundConfig) { r.Dp = nil }, setting: client.SettingDP, want: "without differential privacy"},
		{name: "unit example", task: func(r *fedpb.RoundConfig) { r.Dp.PrivacyUnit = "example" }, setting: client.SettingUnit,
			want: `round 3 asks for privacy unit "example"; this client protects "identity"`},
		{name: "delta above the owner's", task: func(r *fedpb.RoundConfig) { r.Dp.Delta = 1e-3 }, setting: client.SettingDelta, want: "δ = 0.001"},
		{name: "less noise", task: func(r *fedpb.RoundConfig) { r.Dp.NoiseMultiplier = 0.5 }, setting: client.SettingNoise,
			want: "noise multiplier σ = 0.5; this client runs σ ≥ 1"},
		{name: "larger clip", task: func(r *fedpb.RoundConfig) { r.Dp.Clip = 4 }, setting: client.SettingClip, want: "clip C = 4"},
		{name: "larger sampling rate stated", task: func(r *fedpb.RoundConfig) { r.Dp.SamplingRate = 0.9 }, setting: client.SettingSamplingRate,
			want: "sampling rate q = 0.9"},
		{name: "plan: larger sampling rate", plan: func(p *fedpb.DPParams) { p.SamplingRate = 0.9 }, setting: client.SettingSamplingRate,
			want: "is planned with sampling rate q = 0.9"},
		{name: "plan: calibrated below the floor", task: func(r *fedpb.RoundConfig) { r.Dp.NoiseMultiplier = 0 },
			plan: func(p *fedpb.DPParams) { p.NoiseMultiplier = 0.3 }, setting: client.SettingNoise, want: "is planned with noise multiplier σ = 0.3"},
		{name: "plan: other unit", plan: func(p *fedpb.DPParams) { p.PrivacyUnit = "example" }, setting: client.SettingUnit,
			want: `is planned with privacy unit "example"`},
		{name: "plan: larger clip", plan: func(p *fedpb.DPParams) { p.Clip = 2 }, setting: client.SettingClip, want: "is planned with clip C = 2"},
		{name: "plan: larger delta", plan: func(p *fedpb.DPParams) { p.Delta = 0.01 }, setting: client.SettingDelta, want: "is planned with δ = 0.01"},
		{name: "plan: no noise", plan: func(p *fedpb.DPParams) { p.NoiseMultiplier = 0 }, setting: client.SettingNoise, want: "σ = 0;"},
	} {
		t.Run(c.name, func(t *testing.T) {
			task := round()
			if c.task != nil {
				c.task(task)
			}
			tr := &planTrainer{sigma: 2, q: 0.1, edit: c.plan}
			r := runAgainst(t, task, policy(), tr)
			err, adv, before, after := r.err, r.adv, r.before, r.after
			var pe *client.PolicyError
			if !errors.Is(err, client.ErrPolicy) || !errors.As(err, &pe) {
				t.Fatalf("the client did not refuse: %v", err)
			}
			if pe.Setting != c.setting || pe.Round != 3 || !strings.Contains(err.Error(), c.want) {
				t.Errorf("refused for %q in round %d: %v; want %q naming %q", pe.Setting, pe.Round, err, c.setting, c.want)
			}
			if n := len(adv.Updates()); n != 0 {
				t.Errorf("the client sent %d updates", n)
			}
			// The coordinator is told the round is declined and why, as
			// the setting's name alone: nothing of the policy's values.
			if d := adv.Declines(); len(d) != 1 || d[0].GetRound() != 3 || d[0].GetReason() != "policy: "+string(c.setting) {
				t.Errorf("the client declined with %v, want round 3 for %q", d, "policy: "+string(c.setting))
			}
			if n := tr.count(); n != 0 {
				t.Errorf("the trainer trained %d times", n)
			}
			if adv.Downloads() != 0 {
				t.Errorf("the client downloaded the model of a round it refuses")
			}
			if len(before) != len(after) {
				t.Fatalf("the client's folder changed: %d files before, %d after", len(before), len(after))
			}
			for path, b := range before {
				if after[path] != b {
					t.Errorf("%s changed", filepath.Base(path))
				}
			}
		})
	}
}

// TestRoundInsideThePolicyIsCharged is the control of the refusals: the
// same adversary with a round inside the policy gets its update, and the
// client's ledger holds the cost of exactly the plan the trainer ran, at
// the owner's δ.
func TestRoundInsideThePolicyIsCharged(t *testing.T) {
	for _, c := range []struct {
		name  string
		task  func(*fedpb.RoundConfig)
		sigma float64
	}{
		{name: "the round's σ", sigma: 2},
		{name: "the trainer's σ", task: func(r *fedpb.RoundConfig) { r.Dp.NoiseMultiplier = 0 }, sigma: 1.5},
		{name: "smaller δ and clip", task: func(r *fedpb.RoundConfig) { r.Dp.Delta, r.Dp.Clip = 1e-7, 0.5 }, sigma: 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			task := round()
			if c.task != nil {
				c.task(task)
			}
			tr := &planTrainer{sigma: c.sigma, q: 0.5}
			r := runAgainst(t, task, policy(), tr)
			adv, before, after, dir := r.adv, r.before, r.after, r.dir
			if r.err != nil {
				t.Fatal(r.err)
			}
			ups := adv.Updates()
			if len(ups) != 1 || tr.count() != 1 {
				t.Fatalf("%d updates sent, %d trainings", len(ups), tr.count())
			}
			ran := tr.trained[0]
			if !proto.Equal(ups[0].GetDp(), ran) {
				t.Errorf("the update states %v, the trainer ran %v", ups[0].GetDp(), ran)
			}
			if ledger := ledgerFile(dir); before[ledger] == after[ledger] {
				t.Fatal("the ledger was not charged")
			}
			ev, err := client.Event(ran, model0().Len())
			if err != nil {
				t.Fatal(err)
			}
			ref, _ := dp.NewLedger(dp.LedgerOptions{})
			_ = ref.SetBudget("x", policy().Budget)
			want, err := ref.Charge("x", ev)
			if err != nil {
				t.Fatal(err)
			}
			ld, err := dp.OpenLedgerDir(filepath.Join(dir, "ledgers"))
			if err != nil {
				t.Fatal(err)
			}
			l, err := ld.Read(dp.DataSet{Name: "client-1", Unit: dp.UnitIdentity})
			if err != nil {
				t.Fatal(err)
			}
			got, err := l.Spent(nil)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(got.Epsilon-want.Epsilon) > 1e-12*want.Epsilon || got.Delta != 1e-5 {
				t.Errorf("the ledger holds ε = %.15g at δ = %g, the plan run costs %.15g at 1e-5", got.Epsilon, got.Delta, want.Epsilon)
			}
		})
	}
}

// TestNoDPOnlyWhenTheOwnerAllowsIt: a round without DP trains (uncharged)
// only for a client whose owner allowed it.
func TestNoDPOnlyWhenTheOwnerAllowsIt(t *testing.T) {
	task := round()
	task.Dp = nil
	p := policy()
	p.AllowNoDP = true
	tr := &planTrainer{}
	r := runAgainst(t, task, p, tr)
	adv, before, after, dir := r.adv, r.before, r.after, r.dir
	if r.err != nil {
		t.Fatal(r.err)
	}
	if ups := adv.Updates(); len(ups) != 1 || ups[0].GetDp() != nil || ups[0].GetExamples() != 1 {
		t.Fatalf("updates %v", ups)
	}
	if ledger := ledgerFile(dir); before[ledger] != after[ledger] {
		t.Error("a round without DP charged the ledger")
	}
}

// liar plans inside the policy and then reports other DP in its update.
type liar struct{ planTrainer }

func (l *liar) Train(ctx context.Context, model wire.Weights, task *fedpb.RoundConfig, plan *fedpb.DPParams) (client.Update, error) {
	u, err := l.planTrainer.Train(ctx, model, task, plan)
	u.DP = proto.Clone(plan).(*fedpb.DPParams)
	u.DP.NoiseMultiplier /= 4
	return u, err
}

// TestUpdateMustStateThePlanCharged: an update whose DP differs from the
// plan the client checked and charged is not sent.
func TestUpdateMustStateThePlanCharged(t *testing.T) {
	tr := &liar{planTrainer{q: 0.1}}
	r := runAgainst(t, round(), policy(), tr)
	if r.err == nil || !strings.Contains(r.err.Error(), "not the plan") {
		t.Fatalf("err %v", r.err)
	}
	if n := len(r.adv.Updates()); n != 0 {
		t.Errorf("%d updates sent", n)
	}
}

func TestPolicyValidate(t *testing.T) {
	good := policy()
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (client.Policy{}).Validate(); err == nil {
		t.Error("the zero policy is valid")
	}
	for name, edit := range map[string]func(*client.Policy){
		"unit":                     func(p *client.Policy) { p.Unit = "person" },
		"no unit":                  func(p *client.Policy) { p.Unit = "" },
		"budget":                   func(p *client.Policy) { p.Budget.Epsilon = 0 },
		"delta":                    func(p *client.Policy) { p.Budget.Delta = 1 },
		"noise":                    func(p *client.Policy) { p.MinNoiseMultiplier = -1 },
		"noise NaN":                func(p *client.Policy) { p.MinNoiseMultiplier = math.NaN() },
		"clip":                     func(p *client.Policy) { p.MaxClip = 0 },
		"clip inf":                 func(p *client.Policy) { p.MaxClip = math.Inf(1) },
		"rate":                     func(p *client.Policy) { p.MaxSamplingRate = 0 },
		"rate over 1":              func(p *client.Policy) { p.MaxSamplingRate = 1.5 },
		"rounds < 0":               func(p *client.Policy) { p.DDP.Rounds = -1 },
		"colluders without rounds": func(p *client.Policy) { p.DDP.MaxColluders = 1 },
		"distributed without T":    func(p *client.Policy) { p.DDP.Rounds = 10 },
		"distributed with T = 1":   func(p *client.Policy) { p.SecAgg.MinHonest, p.DDP.Rounds = 1, 10 },
		"wrap 1":                   func(p *client.Policy) { p.SecAgg.MinHonest, p.DDP = 3, client.DDPPolicy{Rounds: 10, MaxWrapProb: 1} },
	} {
		p := good
		edit(&p)
		if err := p.Validate(); err == nil {
			t.Errorf("%s: %+v is valid", name, p)
		}
		if _, err := client.New(client.Options{Addr: "127.0.0.1:1", Creds: insecure.NewCredentials(), Policy: p, Dir: t.TempDir(),
			LedgerDir: t.TempDir(), DataSet: "client-1", Trainer: &planTrainer{}}); err == nil {
			t.Errorf("%s: client.New accepted %+v", name, p)
		}
	}
}

// A coordinator's distributed DP plan is checked against the owner's own
// T, colluders and rounds (fed/ddp): a plan that trusts more clients than
// the owner does, or adds less noise than the owner's T needs, is refused;
// an owner who trusts no one takes part in no distributed round.
func TestDistributedPlanIsCheckedAgainstTheOwnersTrust(t *testing.T) {
	p := policy()
	if _, err := p.Distributed(); err == nil {
		t.Error("a policy trusting no honest client gave a distributed policy")
	}
	p.SecAgg.MinHonest = 6
	if _, err := p.Distributed(); err == nil {
		t.Error("a policy with no distributed rounds gave a distributed policy")
	}
	p.DDP = client.DDPPolicy{MaxColluders: 1, Rounds: 40}
	dpol, err := p.Distributed()
	if err != nil {
		t.Fatal(err)
	}
	// One T: the distributed DP trust is the secure aggregation's.
	if dpol.MinHonest != p.SecAgg.MinHonest {
		t.Fatalf("distributed DP trusts T = %d, secure aggregation T = %d", dpol.MinHonest, p.SecAgg.MinHonest)
	}
	plan := ddp.Plan{Unit: p.Unit, Delta: p.Budget.Delta, Clip: p.MaxClip, SamplingRate: 0.05, Rounds: 40, Clients: 8, Threshold: 7,
		Noise: 1, Dim: 2000, Block: 512, Scale: 1 << 16, Bits: 32, WrapProb: 1e-9, ExpectedBatch: 20}
	if plan.Noise, err = ddp.RequiredNoise(dpol, plan); err != nil {
		t.Fatal(err)
	}
	if err := ddp.CheckPlan(dpol, plan); err != nil {
		t.Fatalf("the owner's own plan is refused: %v", err)
	}
	weak := plan
	weak.Threshold = 6 // one colluder could leave only 5 honest shares
	if err := ddp.CheckPlan(dpol, weak); !errors.Is(err, ddp.ErrPolicy) {
		t.Errorf("a threshold below T + colluders: %v", err)
	}
	// The coordinator calibrates the share for the 8 clients it selects
	// rather than the owner's 6: less noise than the owner needs.
	claimed := dpol
	claimed.MinHonest, claimed.MaxColluders = 8, 0
	weak = plan
	weak.Threshold = 8
	if weak.Noise, err = ddp.RequiredNoise(claimed, weak); err != nil {
		t.Fatal(err)
	}
	if err := ddp.CheckPlan(dpol, weak); !errors.Is(err, ddp.ErrPolicy) {
		t.Errorf("a share calibrated to the coordinator's count of honest clients: %v", err)
	}
}
