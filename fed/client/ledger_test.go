package client

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/credentials/insecure"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/wire"
)

// noTrainer is never asked to train: these tests exercise the ledger only.
type noTrainer struct{}

func (noTrainer) Plan(*fedpb.RoundConfig, float64) (*fedpb.DPParams, error) {
	return nil, errors.New("not in this test")
}

func (noTrainer) Train(context.Context, wire.Weights, *fedpb.RoundConfig, *fedpb.DPParams) (Update, error) {
	return Update{}, errors.New("not in this test")
}

var lfw = dp.DataSet{Name: "lfw", Unit: dp.UnitIdentity}

func newClient(ledgers, dir string, budget dp.Budget, members []string) (*Client, error) {
	return New(Options{Addr: "127.0.0.1:1", Creds: insecure.NewCredentials(), Policy: DefaultPolicy(budget),
		Dir: dir, LedgerDir: ledgers, DataSet: "lfw", Members: members, Trainer: noTrainer{}})
}

func epsOf(t *testing.T, events ...dp.Event) float64 {
	t.Helper()
	a, err := dp.NewAccountant(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Add(events...); err != nil {
		t.Fatal(err)
	}
	e, _, err := a.Epsilon(1e-5)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestClientChargesTheDataSetsLedger plays an owner who trained on Alice
// and Bob (veil train's charge), then runs a federated client on Bob and
// Carol, from a fresh client folder: the client sees Bob's spending,
// composes its round with it, and refuses a round that would take Bob
// past the budget although Carol could afford it. On the old code the
// client kept its own ledger in its folder, so a fresh folder started
// at ε = 0.
func TestClientChargesTheDataSetsLedger(t *testing.T) {
	ledgers := t.TempDir()
	budget := dp.Budget{Epsilon: 3, Delta: 1e-5}
	trainEv, err := dp.SubsampledGaussianEvent(0.05, 1.5, 100)
	if err != nil {
		t.Fatal(err)
	}
	d, err := dp.OpenLedgerDir(ledgers)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Update(lfw, func(l *dp.DataLedger) error {
		if err := l.SetBudget(budget); err != nil {
			return err
		}
		_, err := l.Charge(dp.Charge{Label: "veil train: epoch 1", Members: []string{"Alice", "Bob"}, Events: []dp.Event{trainEv}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	c, err := newClient(ledgers, t.TempDir(), budget, []string{"Bob", "Carol"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.Spent()
	if err != nil {
		t.Fatal(err)
	}
	if want := epsOf(t, trainEv); math.Abs(s.Epsilon-want) > 1e-12 {
		t.Errorf("a fresh client folder reads ε = %g for Bob and Carol, want Bob's %g from veil train", s.Epsilon, want)
	}
	roundEv, err := dp.SubsampledDiscreteGaussianEvent(0.05, 1.5, 100)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.charge("round 1", roundEv); err != nil {
		t.Fatal(err)
	}
	l, err := d.Read(lfw)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		who  string
		want float64
	}{{"Alice", epsOf(t, trainEv)}, {"Bob", epsOf(t, trainEv, roundEv)}, {"Carol", epsOf(t, roundEv)}} {
		s, err := l.Spent([]string{w.who})
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(s.Epsilon-w.want) > 1e-9*w.want {
			t.Errorf("%s: ε = %g, want %g", w.who, s.Epsilon, w.want)
		}
	}
	// A round Carol could afford alone but Bob cannot.
	big, err := dp.SubsampledDiscreteGaussianEvent(0.05, 1.5, 120)
	if err != nil {
		t.Fatal(err)
	}
	if epsOf(t, roundEv, big) > budget.Epsilon || epsOf(t, trainEv, roundEv, big) <= budget.Epsilon {
		t.Fatalf("the test's events do not separate Carol from Bob")
	}
	if ok, err := c.canCharge(big); err != nil || ok {
		t.Errorf("a round taking Bob past the budget: can charge %v (%v)", ok, err)
	}
	before, err := os.ReadFile(d.Path(lfw))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.charge("round 2", big); !errors.Is(err, dp.ErrBudgetExceeded) {
		t.Errorf("charging it: err = %v, want ErrBudgetExceeded", err)
	}
	after, err := os.ReadFile(d.Path(lfw))
	if err != nil || string(after) != string(before) {
		t.Errorf("the refused charge changed the ledger (%v)", err)
	}
}

// TestClientBudgetCannotBeRaised: a client started again with a larger
// budget, or another δ, after its people have spent, is refused; a client
// folder from an older version (ledger.json) is refused, not ignored.
func TestClientBudgetCannotBeRaised(t *testing.T) {
	ledgers := t.TempDir()
	budget := dp.Budget{Epsilon: 3, Delta: 1e-5}
	c, err := newClient(ledgers, t.TempDir(), budget, []string{"Bob"})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	ev, err := dp.GaussianEvent(5, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.charge("round 1", ev); err != nil {
		t.Fatal(err)
	}
	for _, b := range []dp.Budget{{Epsilon: 30, Delta: 1e-5}, {Epsilon: 3, Delta: 1e-3}} {
		if _, err := newClient(ledgers, t.TempDir(), b, []string{"Bob"}); !errors.Is(err, dp.ErrBudgetLocked) {
			t.Errorf("a client with budget %+v after spending: err = %v, want dp.ErrBudgetLocked", b, err)
		}
	}
	if c, err := newClient(ledgers, t.TempDir(), dp.Budget{Epsilon: 2, Delta: 1e-5}, []string{"Bob"}); err != nil {
		t.Errorf("a lower budget: %v", err)
	} else {
		c.Close()
	}
	old := t.TempDir()
	if err := os.WriteFile(filepath.Join(old, "ledger.json"), []byte(`{"version":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := newClient(ledgers, old, dp.Budget{Epsilon: 2, Delta: 1e-5}, []string{"Bob"}); err == nil || !strings.Contains(err.Error(), "older Veil versions") {
		t.Errorf("a folder with an old ledger.json: err = %v", err)
	}
}
