package sim

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/keygen"
	"github.com/veil-privacy/veil/fed/local"
	"github.com/veil-privacy/veil/fed/strategy"
	"github.com/veil-privacy/veil/fed/wire"
	"github.com/veil-privacy/veil/nn/train"
	"github.com/veil-privacy/veil/secagg/dphe"
	"github.com/veil-privacy/veil/training"
)

// localKeyBits is the modulus the in-process DPHE simulation packs for:
// the key generator's default.
const localKeyBits = 2048

// dpheLocal runs a DPHE simulation in one process (DPHE.InProcess): the
// same rounds as through the network, without the network and the
// encryption. Each round every client trains its local epochs from the
// round's model without DP-SGD, releases its update with dphe.Release
// (charged to its own ledger folder for its people first: a dp.LedgerDir
// in the run's folder), and the releases are added as the key generator
// would reveal their sum: each value clamped to the packing's bound and
// rounded to its fixed point, added exactly. The coordinator's step is
// FedAvg's with the uniform mean. The packing is the one a 2048-bit key
// holds, so the lanes, the selection's blocks and the charge are those of
// the network run.
func dpheLocal(ctx context.Context, o Options, parts []*training.Data, eval *local.Evaluator, rep *Report, dir string) error {
	d := o.DPHE
	model := eval.Initial()
	pack, err := d.settleLocal(&o, model.Len())
	if err != nil {
		return err
	}
	rep.DPHE = d.report(o.DP.Clip)
	rep.DPHE.KeyBits = 0 // nothing is encrypted
	o.Progress(fmt.Sprintf("DPHE in one process: %d of %d blocks of %d lanes per client and round, σ = %.4f, C = %g, selection ε = %g",
		d.Count, d.blocks, d.lanes, d.NoiseMultiplier, o.DP.Clip, d.SelectionEpsilon))
	st, err := strategy.New(o.StrategyOptions())
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	cs, err := newLocalClients(&o, parts, dir)
	if err != nil {
		return err
	}
	avg := &average{decay: o.EMA, curve: o.Curve}
	var state wire.Weights
	for r := 1; r <= o.Rounds; r++ {
		task := &fedpb.RoundConfig{Round: uint64(r), Rounds: uint64(o.Rounds), Strategy: "fedavg", LocalEpochs: uint32(o.LocalEpochs),
			Batch: uint32(o.Batch), LearningRate: o.LearningRate}
		sum, err := dpheLocalRound(ctx, &o, cs, model, task, pack)
		if err != nil {
			return err
		}
		mean := model.Clone()
		k := 0
		scale := float64(int64(1)<<keygen.DefaultFracBits) * float64(len(cs))
		for i := range mean {
			for j := range mean[i].Values {
				mean[i].Values[j] = float32(float64(sum[k]) / scale)
				k++
			}
		}
		if model, state, err = st.Apply(model, mean, len(cs), state); err != nil {
			return fmt.Errorf("sim: round %d: %w", r, err)
		}
		avg.add(model)
		rep.Updates += len(cs)
		o.Progress(fmt.Sprintf("round %d/%d: %d releases added", r, o.Rounds, len(cs)))
	}
	return finishLocal(&o, cs, model, avg, eval, rep)
}

// settleLocal settles d's packing, count and σ for dim coordinates as
// settle does for a key of localKeyBits bits.
func (d *DPHE) settleLocal(o *Options, dim int) (*dphe.Packing, error) {
	return d.settleWith(o, dim, func(bound float64) (*dphe.Packing, error) {
		pack := &dphe.Packing{Coordinates: dim, Lanes: 1, Bound: bound, MaxUsers: o.Partition.Clients}
		w, err := pack.LaneBits(keygen.DefaultFracBits)
		if err != nil {
			return nil, err
		}
		pack.Lanes = max(1, min((localKeyBits-3)/w, dim))
		return pack, nil
	})
}

// localClient is a client of the in-process DPHE simulation.
type localClient struct {
	name    string
	tr      *local.Trainer
	ledger  *dp.LedgerDir
	set     dp.DataSet
	members []string
}

// Budget and Charge make the client's ledger folder a dphe.Charger for
// its people, as a federation client's is.
func (c *localClient) Budget(string) (dp.Budget, error) {
	l, err := c.ledger.Read(c.set)
	if err != nil {
		return dp.Budget{}, err
	}
	b, _ := l.Budget()
	return b, nil
}

func (c *localClient) Charge(_ string, events ...dp.Event) (dp.Spent, error) {
	var s dp.MemberSpent
	_, err := c.ledger.Update(c.set, func(l *dp.DataLedger) error {
		var err error
		s, err = l.Charge(dp.Charge{Label: "veil fed sim: DPHE release", Members: c.members, Events: events})
		return err
	})
	return dp.Spent{Epsilon: s.Epsilon, RDPEpsilon: s.Epsilon, Delta: s.Delta}, err
}

// newLocalClients makes each part's trainer and ledger folder (its
// budget set, as a client sets it).
func newLocalClients(o *Options, parts []*training.Data, dir string) ([]*localClient, error) {
	cs := make([]*localClient, len(parts))
	for k, p := range parts {
		c := &localClient{name: fmt.Sprintf("client-%d", k+1), set: dp.DataSet{Name: p.Name, Unit: o.DP.Unit}, members: p.Members(train.Unit(o.DP.Unit))}
		var err error
		if c.tr, err = local.New(local.Options{Model: o.Model, Optim: o.Optim, Data: p}); err != nil {
			return nil, fmt.Errorf("sim: %s: %w", c.name, err)
		}
		if c.ledger, err = dp.OpenLedgerDir(filepath.Join(dir, "clients", c.name, "ledgers")); err != nil {
			return nil, fmt.Errorf("sim: %w", err)
		}
		if _, err := c.ledger.Update(c.set, func(l *dp.DataLedger) error {
			return l.SetBudget(dp.Budget{Epsilon: o.DP.Epsilon, Delta: o.DP.Delta})
		}); err != nil {
			return nil, fmt.Errorf("sim: %s: %w", c.name, err)
		}
		cs[k] = c
	}
	return cs, nil
}

// dpheLocalRound trains and releases every client's update (at most
// o.Parallel at once) and returns the sum of the releases in fixed point.
func dpheLocalRound(ctx context.Context, o *Options, cs []*localClient, model wire.Weights, task *fedpb.RoundConfig, pack *dphe.Packing) ([]int64, error) {
	sum := make([]int64, model.Len())
	var mu sync.Mutex
	errs := make([]error, len(cs))
	sem := make(chan struct{}, o.Parallel)
	var wg sync.WaitGroup
	for k, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			up, err := c.tr.Train(ctx, model, task, nil)
			<-sem
			if err != nil {
				errs[k] = fmt.Errorf("sim: %s: %w", c.name, err)
				return
			}
			flat := make([]float64, 0, model.Len())
			for _, t := range up.Weights {
				for _, v := range t.Values {
					flat = append(flat, float64(v))
				}
			}
			p := o.DPHE.release(o.DP.Clip, o.DP.Delta)
			p.Ledger, p.Principal = c, "update"
			rel, err := dphe.Release(p, flat, pack.Lanes)
			if err != nil {
				errs[k] = fmt.Errorf("sim: %s: %w", c.name, err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for i, x := range rel {
				sum[i] += pack.FixedPoint(x, keygen.DefaultFracBits)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return sum, nil
}

// finishLocal scores the final model (and its average, and the curve)
// and reads the clients' ledgers into rep.
func finishLocal(o *Options, cs []*localClient, model wire.Weights, avg *average, eval *local.Evaluator, rep *Report) error {
	if err := rep.score(o, model, avg, eval); err != nil {
		return err
	}
	rep.Delta, rep.PrivacyUnit = o.DP.Delta, o.DP.Unit
	rep.EpsilonPerClient, rep.NoiseMultiplier = map[string]float64{}, map[string]float64{}
	for _, c := range cs {
		l, err := c.ledger.Read(c.set)
		if err != nil {
			return fmt.Errorf("sim: %w", err)
		}
		s, err := l.Spent(c.members)
		if err != nil {
			return fmt.Errorf("sim: %w", err)
		}
		rep.EpsilonPerClient[c.name], rep.NoiseMultiplier[c.name] = s.Epsilon, o.DPHE.NoiseMultiplier
	}
	return nil
}
