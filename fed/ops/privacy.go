package ops

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/wire"
	"github.com/veil-privacy/veil/nn/checkpoint"
	"github.com/veil-privacy/veil/nn/train"
)

// ErrPrivateInit is returned (wrapped) by CheckInit for an initial model a
// DP federation must not start from.
var ErrPrivateInit = errors.New("the initial model may hold private data with no privacy bound")

// initKind classifies an initial model's privacy record.
type initKind int

const (
	// initPublic: marked public (every example it saw was public, or it
	// saw none, as veil fed init-model's).
	initPublic initKind = iota
	// initDP: trained with DP-SGD only; its ε bounds what it holds.
	initDP
	// initPlain: neither: it may hold private data with no bound.
	initPlain
)

// classifyInit reads an initial model's header.
func classifyInit(h checkpoint.Header) initKind {
	p := h.Privacy
	switch {
	case h.Public:
		return initPublic
	case p.NonPrivateSteps > 0:
		return initPlain
	case p.Epsilon > 0 && p.Delta > 0 && p.Delta < 1 && !math.IsInf(p.Epsilon, 0) &&
		(h.Step == p.Steps || h.Federation != nil):
		// Every optimiser step a DP-SGD step (veil train), or a DP
		// federation's model (whose own step count is 0).
		return initDP
	}
	return initPlain
}

// CheckInit refuses, under DP (dp true), an initial model that is neither
// marked public nor trained with DP-SGD only: a federation from it would
// write a model whose ε does not cover what the initial weights already
// hold. Without DP every initial model is accepted (the federated model
// carries no guarantee anyway).
func CheckInit(c *checkpoint.Checkpoint, dp bool) error {
	if !dp || classifyInit(c.Header) != initPlain {
		return nil
	}
	h := c.Header
	why := "it is not marked public and its record shows no DP-SGD training"
	if n := h.Privacy.NonPrivateSteps; n > 0 {
		why = fmt.Sprintf("it took %d optimiser steps without DP-SGD", n)
	} else if h.Privacy.Steps > 0 && h.Step != h.Privacy.Steps {
		why = fmt.Sprintf("%d of its %d optimiser steps were not DP-SGD steps", h.Step-h.Privacy.Steps, h.Step)
	}
	data := h.Data
	if data == "" {
		data = "unnamed"
	}
	return fmt.Errorf("%w: %s (training data: %s), so a DP federation from it would write a model whose ε does not cover those weights; "+
		"start from veil fed init-model (public), a checkpoint trained on public data only, or one trained with DP-SGD only", ErrPrivateInit, why, data)
}

// ReadFederationPrivacy reads the privacy log of the coordinator state at
// path (also while the coordinator runs) and works out FederationPrivacy.
func ReadFederationPrivacy(ctx context.Context, path string) (*checkpoint.Federation, *coord.PrivacyLog, error) {
	db, err := coord.OpenStatus(path)
	if err != nil {
		return nil, nil, err
	}
	defer db.Close()
	log, err := coord.ReadPrivacy(ctx, db)
	if err != nil {
		return nil, nil, err
	}
	f, err := FederationPrivacy(log)
	if err != nil {
		return nil, nil, err
	}
	return f, log, nil
}

// maxListedK bounds the k listed one by one in KClients; above it the
// list goes on in steps, always ending with every client.
const maxListedK = 20

// clientCounts is the list of k for n clients: 1..n up to maxListedK,
// then 1..10, 20, 50, 100, 200, 500, … and n.
func clientCounts(n int) []int {
	var ks []int
	if n <= maxListedK {
		for k := 1; k <= n; k++ {
			ks = append(ks, k)
		}
		return ks
	}
	for k := 1; k <= 10; k++ {
		ks = append(ks, k)
	}
	for m := 10; ; m *= 10 {
		for _, f := range []int{2, 5, 10} {
			if k := m * f; k < n {
				ks = append(ks, k)
			} else {
				return append(ks, n)
			}
		}
	}
}

// FederationPrivacy says what a federation's ε means, from its state's
// privacy log: the largest ε one client's releases spent (the bound for a
// person, or example, whose data one client alone holds: the assumption,
// stated), and for k = 1 … all charged clients the ε of a unit whose data
// k clients hold, those clients' releases composed by Rényi DP
// (dp.PartiesEpsilons), all at the smallest δ the DP rounds stated, per
// the weaker unit they stated. Its Init is not set.
func FederationPrivacy(log *coord.PrivacyLog) (*checkpoint.Federation, error) {
	f := &checkpoint.Federation{DPRounds: log.DPRounds, PlainRounds: log.PlainRounds}
	var parties [][]dp.Event
	for _, c := range log.Clients {
		if len(c.Events) > 0 {
			parties = append(parties, c.Events)
		}
	}
	f.Clients = len(parties)
	if len(log.Deltas) > 0 {
		f.Delta = log.Deltas[0]
	}
	f.Unit = train.UnitIdentity
	for _, u := range log.Units {
		if u != string(train.UnitIdentity) {
			f.Unit = train.UnitExample
		}
	}
	if len(log.Units) == 0 {
		f.Unit = ""
	}
	who, brief := "a person (all of a person's images)", "a person"
	if f.Unit == train.UnitExample {
		who, brief = "an example (one image)", "an example"
	}
	switch {
	case len(parties) == 0 && log.PlainRounds > 0:
		f.Assumption = "no round ran with DP-SGD: the model carries no privacy guarantee for anyone in the clients' data."
		return f, nil
	case len(parties) == 0:
		f.Assumption = "no client's update was accepted with DP-SGD: the federation has spent no privacy."
		return f, nil
	}
	if f.Delta <= 0 {
		return nil, errors.New("the clients' ledgers were charged but no round of the state states a δ")
	}
	ks := clientCounts(len(parties))
	eps, err := dp.PartiesEpsilons(parties, ks, f.Delta, nil)
	if err != nil {
		return nil, fmt.Errorf("composing the clients' ledgers: %w", err)
	}
	for _, e := range eps {
		f.KClients = append(f.KClients, checkpoint.ClientsEpsilon{K: e.K, Epsilon: e.Epsilon, Exact: e.Exact})
	}
	f.EpsilonOneClient = eps[0].Epsilon
	all := eps[len(eps)-1]
	f.Assumption = fmt.Sprintf("ε = %.4g (δ = %g) holds for %s whose data one client alone holds: it is the largest ε any one client's releases spent. "+
		"For %s in the data of k clients (a friend in many users' photos), all k clients' releases count: their mechanisms compose, "+
		"giving the ε listed for k (Rényi composition, worst case over which k clients), up to ε = %.4g if in all %d clients' data.",
		f.EpsilonOneClient, f.Delta, who, brief, all.Epsilon, all.K)
	if log.PlainRounds > 0 {
		f.Assumption += fmt.Sprintf(" But %d rounds ran without DP-SGD: the model carries no privacy guarantee for anyone in those rounds' data.", log.PlainRounds)
	}
	return f, nil
}

// ModelOptions are the DP settings the coordinator ran its rounds with;
// the privacy record itself comes from the state's log.
type ModelOptions struct {
	// DP says the coordinator was run with DP (its flags).
	DP bool
	// Unit and Delta are its settings, recorded when no DP round is done.
	Unit  train.Unit
	Delta float64
	// Clip and NoiseMultiplier are its DP-SGD settings (σ 0: each client
	// calibrated its own).
	Clip, NoiseMultiplier float64
}

// FederatedModel returns the checkpoint of a federation's model w, the
// network of its initial model init (CheckpointFromWeights), with a
// privacy record that composes the initial model's with the federation's,
// read from the state's log (ReadFederationPrivacy): its header's Privacy
// bounds every unit under the federation's stated assumption, with
// NonPrivateSteps counting the rounds without DP and, when the initial
// model was neither public nor trained with DP-SGD only, its steps (at
// least one), so that such weights never read as private; its Federation
// says what ε means for whom. It refuses an init that is not the model
// the state started from (the record would describe other weights).
func FederatedModel(init *checkpoint.Checkpoint, w wire.Weights, log *coord.PrivacyLog, o ModelOptions) (*checkpoint.Checkpoint, error) {
	fed, err := FederationPrivacy(log)
	if err != nil {
		return nil, err
	}
	iw, err := WeightsFromCheckpoint(init)
	if err != nil {
		return nil, err
	}
	if v := wire.Version(iw.Header()); v != log.InitialVersion {
		return nil, fmt.Errorf("the coordinator's state started from model %s, not from the initial checkpoint given (%s): "+
			"the final model's privacy record would describe other weights; give the --init the state was started with", short(log.InitialVersion), short(v))
	}
	h := init.Header
	fc := *fed
	origin := &checkpoint.Origin{Data: h.Data, Public: h.Public, Privacy: h.Privacy, Federation: h.Federation}
	fc.Init = origin

	priv := train.Privacy{Clip: o.Clip}
	if fed.Clients > 0 {
		priv.Unit, priv.Delta, priv.Epsilon, priv.NoiseMultiplier = fed.Unit, fed.Delta, fed.EpsilonOneClient, o.NoiseMultiplier
	} else if o.DP {
		priv.Unit, priv.Delta, priv.NoiseMultiplier = o.Unit, o.Delta, o.NoiseMultiplier
	}
	plain := fed.PlainRounds
	if !o.DP {
		plain = max(plain, 1)
	}
	priv.NonPrivateSteps = plain
	switch classifyInit(h) {
	case initPublic:
		origin.Note = "the initial model is marked public (every example it saw was public data, or it saw none, as veil fed init-model's): it adds nothing to the federation's ε."
	case initPlain:
		n := max(h.Privacy.NonPrivateSteps, 1)
		priv.NonPrivateSteps += n
		origin.Note = fmt.Sprintf("the initial model is neither marked public nor trained with DP-SGD only (%d non-private steps counted): "+
			"it may hold private data with no bound, so this model carries no privacy guarantee, whatever ε the federation spent.", n)
	case initDP:
		ip := h.Privacy
		iu := ip.Unit
		if iu == "" {
			iu = train.UnitExample // checkpoints from before units were all per example
		}
		unit := priv.Unit
		if unit == "" {
			unit = iu
		}
		if iu == train.UnitExample || unit == train.UnitExample {
			unit = train.UnitExample
		}
		fedEps, fedDelta := priv.Epsilon, priv.Delta
		priv.Unit, priv.Epsilon, priv.Delta = unit, priv.Epsilon+ip.Epsilon, priv.Delta+ip.Delta
		for i := range fc.KClients {
			fc.KClients[i].WithInit = fc.KClients[i].Epsilon + initEpsilonFor(h, fc.KClients[i].K)
		}
		units := ""
		if iu != fed.Unit && fed.Unit != "" {
			units = fmt.Sprintf(" The initial model's unit is the %s and the federation's the %s, so the composed bound is per example "+
				"(a per-%s ε bounds each of a person's examples, not the person).", iu, fed.Unit, train.UnitExample)
		}
		if h.Data == "federated" {
			origin.Note = fmt.Sprintf("the initial model is a federation's model, at ε = %.4g (δ = %.3g) per %s; its clients may be this federation's, "+
				"so its ε and this federation's (ε = %.4g, δ = %.3g) protect the same people and compose: this model's privacy record is their sum, "+
				"ε = %.4g at δ = %.3g per %s (basic composition).%s",
				ip.Epsilon, ip.Delta, iu, fedEps, fedDelta, priv.Epsilon, priv.Delta, unit, units)
		} else {
			data := h.Data
			if data == "" {
				data = "an unnamed data set"
			}
			origin.Note = fmt.Sprintf("the initial model was trained with DP-SGD on %s, a different data set from the clients' own data, "+
				"at ε = %.4g (δ = %.3g) per %s: that ε protects the people in %s, the federation's (ε = %.4g, δ = %.3g) the people in the clients' data; "+
				"for someone in only one of the two the other does not add. Someone in both is exposed to both and is protected at their sum, "+
				"ε = %.4g at δ = %.3g per %s (basic composition): this model's privacy record states that sum, the bound that covers everyone.%s",
				data, ip.Epsilon, ip.Delta, iu, data, fedEps, fedDelta, priv.Epsilon, priv.Delta, unit, units)
		}
	}
	out, err := CheckpointFromWeights(init, w, priv)
	if err != nil {
		return nil, err
	}
	out.Header.Federation = &fc
	return out, nil
}

// initEpsilonFor is the initial model's ε for a unit in k clients' data:
// a federated initial model's own figure for the least number of its
// clients ≥ k it lists (all of them when k is more), its initial model's
// ε included; else its ε.
func initEpsilonFor(h checkpoint.Header, k int) float64 {
	f := h.Federation
	if f == nil || len(f.KClients) == 0 {
		return h.Privacy.Epsilon
	}
	c := f.KClients[len(f.KClients)-1]
	for _, x := range f.KClients {
		if x.K >= k {
			c = x
			break
		}
	}
	if c.WithInit > 0 {
		return c.WithInit
	}
	return c.Epsilon
}

func short(v string) string {
	if len(v) > 12 {
		return v[:12]
	}
	return v
}

// CheckInitState refuses an initial checkpoint that is not the model the
// coordinator state at path started from, when that state exists: the
// state ignores --init, and a final model written with init's record
// would describe other weights. A state not yet created passes, and so
// does a file that cannot be read as a coordinator's state (the
// coordinator then says what is wrong with it); FederatedModel checks
// again before it writes a model.
func CheckInitState(ctx context.Context, path string, init *checkpoint.Checkpoint) error {
	if _, err := os.Stat(path); err != nil {
		return nil
	}
	db, err := coord.OpenStatus(path)
	if err != nil {
		return nil
	}
	defer db.Close()
	v, err := coord.InitialVersion(ctx, db)
	if err != nil {
		return nil
	}
	iw, err := WeightsFromCheckpoint(init)
	if err != nil {
		return err
	}
	if w := wire.Version(iw.Header()); w != v {
		return fmt.Errorf("the coordinator's state started from model %s, not from this checkpoint (%s): "+
			"the final model's privacy record would describe other weights; give the initial checkpoint the state was started with", short(v), short(w))
	}
	return nil
}
