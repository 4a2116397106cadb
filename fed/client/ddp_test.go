package client_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/client/clienttest"
	"github.com/veil-privacy/veil/fed/ddp"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/fed/secround"
	"github.com/veil-privacy/veil/fed/wire"
)

// ddpPolicy is policy() taking part in distributed DP-SGD: T = 3 (the
// one T, SecAgg.MinHonest), one colluder, its noise calibrated over 10
// rounds.
func ddpPolicy() client.Policy {
	p := policy()
	p.SecAgg = client.SecAggPolicy{Require: true, MinHonest: 3}
	p.DDP = client.DDPPolicy{MaxColluders: 1, Rounds: 10}
	return p
}

// ddpTask is secureTask() as a distributed DP-SGD round whose plan the
// owner of ddpPolicy accepts (its noise share is the least that owner's
// T, rounds and budget need) and whose masked length is the encoding's.
func ddpTask(t *testing.T) (*fedpb.RoundConfig, ddp.Plan) {
	t.Helper()
	task := secureTask()
	task.Dp, task.Secagg.Quant, task.Secagg.Threshold = nil, nil, 4
	plan := ddp.Plan{Unit: "identity", Delta: 1e-5, Clip: 1, SamplingRate: 0.1, Rounds: 10, Clients: 4, Threshold: 4, Noise: 1,
		Dim: 6, Scale: 1 << 10, Bits: 32, WrapProb: 1e-9, ExpectedBatch: 2}
	pol, err := ddpPolicy().Distributed()
	if err != nil {
		t.Fatal(err)
	}
	if plan.Noise, err = ddp.RequiredNoise(pol, plan); err != nil {
		t.Fatal(err)
	}
	task.Secagg.Length = uint32(plan.Padded())
	task.Secagg.Ddp = secround.PlanProto(plan)
	return task, plan
}

// sumTrainer is a DistributedTrainer returning a fixed clipped sum; it
// counts the sums asked of it (the client's data touched).
type sumTrainer struct {
	planTrainer
	mu   sync.Mutex
	sums int
}

func (s *sumTrainer) ClippedSum(context.Context, wire.Weights, *fedpb.RoundConfig, ddp.Plan) ([]float32, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sums++
	return []float32{0.1, 0.2, 0.3, 0, 0, 0.4}, nil
}

// TestDistributedPlanOutsideThePolicyIsRefused plays a coordinator whose
// distributed DP-SGD plan is weaker than the owner's policy, one setting
// at a time, over gRPC with mutual TLS: the client refuses naming
// distributed DP and the plan's setting, never downloads, trains or
// computes a clipped sum, and its folder (its ledger) is byte for byte as
// it was.
func TestDistributedPlanOutsideThePolicyIsRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*ddp.Plan, *client.Policy)
		want string
	}{
		{"noise below the owner's T", func(p *ddp.Plan, _ *client.Policy) { p.Noise /= 2 }, "noise share"},
		{"noise for a larger T", func(p *ddp.Plan, pol *client.Policy) {
			// The coordinator calibrates for 4 honest clients; the
			// owner trusts 3 (its one T).
			d, _ := pol.Distributed()
			d.MinHonest = 4
			p.Noise, _ = ddp.RequiredNoise(d, *p)
		}, "noise share"},
		{"threshold below T + colluders", func(p *ddp.Plan, _ *client.Policy) { p.Threshold = 3 }, "threshold"},
		{"larger clip", func(p *ddp.Plan, _ *client.Policy) { p.Clip = 2 }, "clip"},
		{"example unit", func(p *ddp.Plan, _ *client.Policy) { p.Unit = "example" }, "privacy unit"},
		{"owner takes part in no distributed round", func(_ *ddp.Plan, pol *client.Policy) { pol.DDP = client.DDPPolicy{} }, "DDP.Rounds 0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			task, plan := ddpTask(t)
			pol := ddpPolicy()
			c.edit(&plan, &pol)
			task.Secagg.Ddp = secround.PlanProto(plan)
			tr := &sumTrainer{}
			r := runAgainst(t, task, pol, tr)
			var pe *client.PolicyError
			if !errors.As(r.err, &pe) || pe.Setting != client.SettingDDP || !strings.Contains(r.err.Error(), c.want) {
				t.Fatalf("refused with %v, want %q naming %q", r.err, client.SettingDDP, c.want)
			}
			if tr.sums != 0 || tr.count() != 0 || r.adv.Downloads() != 0 || len(r.adv.Updates()) != 0 {
				t.Error("the client touched its data, downloaded or sent")
			}
			if len(r.before) != len(r.after) {
				t.Fatalf("the client's folder changed: %d files before, %d after", len(r.before), len(r.after))
			}
			for path, b := range r.before {
				if r.after[path] != b {
					t.Errorf("%s changed", filepath.Base(path))
				}
			}
		})
	}
}

// TestDistributedRoundIsNotChargedBeforeTheShares: a plan inside the
// policy is charged only once the neighbours' adverts and the shares
// addressed to the client check out (the charge itself, labelled with the
// mechanism and the owner's T, is checked in
// TestEquivocatedPlanIsRefusedByEveryClient's consistent round): a
// coordinator that stops the round at the key advert leaves the client's
// ledger byte for byte as it was, and no clipped sum is computed.
func TestDistributedRoundIsNotChargedBeforeTheShares(t *testing.T) {
	task, _ := ddpTask(t)
	// The adversary names every client "client" when it joins.
	task.Secagg.Roster[0].Client = "client"
	adv := clienttest.Start(t, task, model0(), "client-1")
	id, err := pki.LoadIdentity(filepath.Join(adv.PKI, "client-1.crt"), filepath.Join(adv.PKI, "client-1.key"), filepath.Join(adv.PKI, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "client-1")
	tr := &sumTrainer{}
	c, err := client.New(client.Options{Addr: adv.Addr, Creds: credentials.NewTLS(pki.ClientTLS(id, "localhost")), Policy: ddpPolicy(),
		Identity: id, Dir: dir, LedgerDir: filepath.Join(dir, "ledgers"), DataSet: "client-1", Trainer: tr, ReconnectFor: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	before := snapshot(t, filepath.Join(dir, "ledgers"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The adversary implements no secure aggregation messages: the run
	// ends at the advert.
	if err := c.Run(ctx); err == nil {
		t.Fatal("the run ended without an error at a coordinator that takes no key advert")
	}
	after := snapshot(t, filepath.Join(dir, "ledgers"))
	if len(before) == 0 || len(before) != len(after) {
		t.Fatalf("ledger folder: %d files before, %d after", len(before), len(after))
	}
	for path, b := range before {
		if after[path] != b {
			t.Errorf("%s changed: the round was charged before its shares arrived", filepath.Base(path))
		}
	}
	if tr.sums != 0 || tr.count() != 0 {
		t.Error("the client computed before the shares arrived")
	}
}
