package training

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/nn/arch"
	"github.com/veil-privacy/veil/nn/checkpoint"
)

// ErrBudget is returned (wrapped) when a run would spend more than its
// ledger's privacy budget. Nothing has been written when it is returned.
var ErrBudget = errors.New("privacy budget exceeded")

// Job is a validated veil-train run.
type Job struct {
	o Options
}

// New validates o (see Options.Validate) without reading any file.
func New(o Options) (*Job, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	return &Job{o: o}, nil
}

// Options returns the job's options with their defaults filled in.
func (j *Job) Options() Options { return j.o }

func (o *Options) progress(e Event) {
	if o.Progress != nil {
		o.Progress(e)
	}
}

// modelConfig is the configuration arch.New completes from the options,
// to compare with checkpoints before any data are read.
func (o *Options) modelConfig() (arch.Config, error) {
	mc := arch.Config{Kind: "lightface", Input: o.Model.Input, Width: o.Model.Width, Norm: o.Model.Norm}
	if o.Model.Kind == "head" {
		mc = arch.Config{Kind: "head"}
		if o.Model.Features != "descriptor" {
			mc.Features = o.Model.Features
		}
	}
	m, err := arch.New(mc)
	if err != nil {
		return arch.Config{}, fmt.Errorf("train: %w", err)
	}
	return m.Config(), nil
}

// Run trains: it checks the checkpoints it starts from and the privacy
// ledger, reads the data, refuses (before touching the training data or
// writing anything) a DP run whose epochs would exceed the budget, then
// for each epoch charges the ledger, trains and saves the checkpoint, and
// finally scores the development pairs.
func (j *Job) Run(ctx context.Context) (*Report, error) {
	start := time.Now()
	o := &j.o
	mc, err := o.modelConfig()
	if err != nil {
		return nil, err
	}
	var resume, initCk *checkpoint.Checkpoint
	if o.Resume != "" {
		if resume, err = checkpoint.Load(o.Resume); err != nil {
			return nil, fmt.Errorf("train: %w", err)
		}
		if !resume.Header.Model.Equal(mc) {
			return nil, fmt.Errorf("train: checkpoint %s holds another model (%+v), not %+v", o.Resume, resume.Header.Model, mc)
		}
		if d := resume.Header.Data; d != "" && d != o.Data.Set {
			return nil, fmt.Errorf("train: checkpoint %s was trained on the %s data, not %s", o.Resume, d, o.Data.Set)
		}
	}
	if o.Init != "" {
		if initCk, err = checkpoint.Load(o.Init); err != nil {
			return nil, fmt.Errorf("train: %w", err)
		}
		if !initCk.Header.Model.Equal(mc) {
			return nil, fmt.Errorf("train: initial checkpoint %s holds another model (%+v), not %+v", o.Init, initCk.Header.Model, mc)
		}
		if o.DP != nil && !initCk.Header.Public {
			return nil, fmt.Errorf("train: initial checkpoint %s was trained on private data (%q); DP-SGD from it would not bound what the weights already hold: start from a checkpoint trained on public data only", o.Init, initCk.Header.Data)
		}
	}
	// public: every example these weights will have seen is public.
	public := o.Data.Set == "mtfl" && (initCk == nil || initCk.Header.Public) && (resume == nil || resume.Header.Public)
	ledger, err := j.openLedger(resume)
	if err != nil {
		return nil, err
	}
	data, err := LoadData(o)
	if err != nil {
		return nil, err
	}
	var dpo *DPOptions
	if o.DP != nil {
		c := *o.DP
		if resume != nil && resume.State.Privacy.Steps > 0 {
			// A resumed run continues the same mechanism: σ and q are the
			// checkpoint's unless given (recalibrating σ for a new number
			// of epochs would change it mid-run).
			p := resume.State.Privacy
			if c.TargetEpsilon > 0 {
				c.TargetEpsilon, c.NoiseMultiplier = 0, p.NoiseMultiplier
			}
			if c.SamplingRate == 0 {
				c.SamplingRate = p.SamplingRate
			}
		}
		dpo = &c
	}
	s, err := NewSession(o.Model, o.Optim, dpo, o.Epochs, data)
	if err != nil {
		return nil, err
	}
	mech := s.Mechanism()
	if initCk != nil {
		if err := s.Init(initCk); err != nil {
			return nil, fmt.Errorf("train: initial checkpoint %s: %w", o.Init, err)
		}
	}
	firstEpoch := 0
	if resume != nil {
		if err := s.Resume(resume); err != nil {
			return nil, fmt.Errorf("train: resuming %s: %w", o.Resume, err)
		}
		firstEpoch = resume.Header.Epoch
	}
	if mech != nil {
		if ledger, err = j.checkBudget(s, ledger, firstEpoch); err != nil {
			return nil, err
		}
	}
	rep := &Report{Model: s.Model(), Loss: s.Loss().Kind, TrainSet: o.Data.Set, Identities: data.Identities, Images: data.Train.Len(),
		DP: mech != nil, Checkpoint: o.Checkpoint, EMA: o.Optim.EMA, Init: o.Init, FrozenBlocks: o.Optim.FreezeBlocks, Trainable: s.Trainable()}
	if resume == nil {
		a, _, err := s.Evaluate()
		if err != nil {
			return nil, err
		}
		rep.InitAccuracy = &a
		o.progress(Event{Kind: EventNote, Message: fmt.Sprintf("development-pairs accuracy as initialised: %.4f", a)})
	}
	removeStale := resume == nil && mech == nil
	for ep := firstEpoch; ep < o.Epochs; ep++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if mech != nil {
			// Charge, and save the charge, before the epoch touches the data.
			ev, err := s.EpochEvent(1)
			if err != nil {
				return nil, err
			}
			if _, err := ledger.Charge(ev); err != nil {
				return nil, fmt.Errorf("train: epoch %d: %w", ep+1, err)
			}
		}
		l, err := s.TrainEpoch(ctx, ep, func(step, steps int, loss float64) {
			o.progress(Event{Kind: EventStep, Done: step, Total: steps, Epoch: ep + 1, Epochs: o.Epochs, Loss: loss})
		})
		if err != nil {
			return nil, err
		}
		rep.LossCurve = append(rep.LossCurve, l)
		if err := s.Checkpoint(ep+1, o.Optim.Optimizer, o.Optim.Seed, public).Save(o.Checkpoint); err != nil {
			return nil, err
		}
		if mech != nil {
			// What the trainer accounts must be covered by what was charged.
			if err := ledger.CheckCovers(s.Privacy(), o.Checkpoint); err != nil {
				return nil, err
			}
		}
		if removeStale {
			// A new run without DP replaced the checkpoint: a ledger left
			// beside it accounted for the weights it replaced.
			if err := os.Remove(LedgerPath(o.Checkpoint)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("train: removing the replaced checkpoint's ledger: %w", err)
			}
			removeStale = false
		}
		o.progress(Event{Kind: EventEpoch, Epoch: ep + 1, Epochs: o.Epochs, Loss: l, Privacy: s.Privacy()})
	}
	acc, thr, err := s.Evaluate()
	if err != nil {
		return nil, err
	}
	if a, ok, err := data.Pairs.RawAccuracy(); err != nil {
		return nil, err
	} else if ok {
		rep.DescriptorAccuracy = &a
	}
	p := s.Privacy()
	rep.Epochs, rep.Steps = o.Epochs, s.Steps()
	if n := len(rep.LossCurve); n > 0 {
		rep.FinalLoss = rep.LossCurve[n-1]
	}
	if mech != nil {
		rep.PrivacyUnits, rep.NoiseMult, rep.Clip, rep.SamplingQ, rep.Delta = mech.Units, p.NoiseMultiplier, p.Clip, p.SamplingRate, p.Delta
	}
	rep.NonPrivateSteps = p.NonPrivateSteps
	if mech != nil && p.Bounded() && !public {
		eps := p.Epsilon
		rep.Epsilon, rep.PrivacyUnit = &eps, string(p.Unit)
	}
	if ledger != nil {
		sp, err := ledger.Spent()
		if err != nil {
			return nil, err
		}
		rep.Ledger, rep.BudgetEpsilon, rep.LedgerEpsilon = ledger.Path(), ledger.Budget().Epsilon, sp.Epsilon
	}
	rep.DevAccuracy, rep.Threshold = acc, thr
	rep.WallS = time.Since(start).Seconds()
	return rep, nil
}

// openLedger reads the ledger beside the checkpoint being resumed and
// checks that it accounts for the checkpoint's weights. A run without DP
// may not continue weights a ledger accounts for: it would spend an
// unbounded ε.
func (j *Job) openLedger(resume *checkpoint.Checkpoint) (*Ledger, error) {
	o := &j.o
	if resume == nil {
		return nil, nil
	}
	path := LedgerPath(o.Resume)
	l, ok, err := OpenLedger(path, o.Data.Set)
	if err != nil {
		return nil, err
	}
	p := resume.State.Privacy
	switch {
	case !ok && p.Steps > 0:
		return nil, fmt.Errorf("train: checkpoint %s has spent ε = %.4g in %d DP-SGD steps, but its privacy ledger %s is missing: without it the budget cannot be enforced", o.Resume, p.Epsilon, p.Steps, path)
	case !ok:
		return nil, nil
	case o.DP == nil:
		return nil, fmt.Errorf("train: the weights of %s are accounted in %s with a budget of ε = %g; training them without DP would spend an unbounded ε", o.Resume, path, l.Budget().Epsilon)
	}
	if err := l.CheckCovers(p, o.Resume); err != nil {
		return nil, err
	}
	// The resumed run writes its checkpoint, and so its ledger, where
	// asked.
	l.path = LedgerPath(o.Checkpoint)
	return l, nil
}

// checkBudget sets up the ledger of a DP run (a new one for a new run)
// and refuses, before anything is written, a run whose remaining epochs
// would exceed the budget.
func (j *Job) checkBudget(s *Session, l *Ledger, firstEpoch int) (*Ledger, error) {
	o := &j.o
	remaining := o.Epochs - firstEpoch
	if remaining <= 0 {
		return l, nil
	}
	ev, err := s.EpochEvent(remaining)
	if err != nil {
		return nil, err
	}
	if l == nil {
		budget := o.DP.BudgetEpsilon
		if budget == 0 {
			budget = o.DP.TargetEpsilon
		}
		if budget == 0 {
			// No budget given: what this run's epochs spend, so that a
			// later resume cannot silently spend more.
			free, err := NewLedger(LedgerPath(o.Checkpoint), o.Data.Set, dp.Budget{Epsilon: 1e300, Delta: o.DP.Delta})
			if err != nil {
				return nil, err
			}
			if budget, _, err = free.Would(ev); err != nil {
				return nil, err
			}
		}
		if l, err = NewLedger(LedgerPath(o.Checkpoint), o.Data.Set, dp.Budget{Epsilon: budget, Delta: o.DP.Delta}); err != nil {
			return nil, err
		}
		if _, err := os.Stat(l.Path()); err == nil {
			o.progress(Event{Kind: EventNote, Message: fmt.Sprintf("a new run: replacing %s and its privacy ledger %s", o.Checkpoint, l.Path())})
		}
	} else if o.DP.BudgetEpsilon > 0 {
		if err := l.SetBudget(o.DP.BudgetEpsilon); err != nil {
			return nil, err
		}
	}
	need, within, err := l.Would(ev)
	if err != nil {
		return nil, err
	}
	if !within {
		spent, err := l.Spent()
		if err != nil {
			return nil, err
		}
		b := l.Budget()
		return nil, fmt.Errorf("train: %w: the budget in %s is ε = %g at δ = %g (per %s); %d epochs have spent ε = %.4g, and %d more would bring it to ε = %.4g: raise the budget or train fewer epochs",
			ErrBudget, l.Path(), b.Epsilon, b.Delta, o.DP.Unit, firstEpoch, spent.Epsilon, remaining, need)
	}
	return l, nil
}
