package training

import (
	"context"
	"errors"
	"fmt"
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
	if resume != nil && resume.State.Privacy.Steps > 0 {
		p := resume.State.Privacy
		if o.DP == nil {
			return nil, fmt.Errorf("train: the weights of %s have spent ε = %.4g in %d DP-SGD steps; training them without DP would spend an unbounded ε", o.Resume, p.Epsilon, p.Steps)
		}
		if err := checkLegacy(o.Resume); err != nil {
			return nil, err
		}
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
	var ledger *Ledger
	if mech != nil {
		if ledger, err = j.checkBudget(s, data, resume, firstEpoch); err != nil {
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
			if _, err := ledger.Charge(fmt.Sprintf("veil train: epoch %d", ep+1), ev); err != nil {
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
		b, _, err := ledger.Budget()
		if err != nil {
			return nil, err
		}
		rep.Ledger, rep.BudgetEpsilon, rep.LedgerEpsilon = ledger.Path(), b.Epsilon, sp.Epsilon
	}
	rep.DevAccuracy, rep.Threshold = acc, thr
	rep.WallS = time.Since(start).Seconds()
	return rep, nil
}

// checkBudget opens the ledger of the run's data set, checks that it
// accounts for a resumed checkpoint's spending, sets the budget (the
// first for the data set: Options' BudgetEpsilon, else TargetEpsilon, else
// what the run's epochs spend; later only a lower one), and refuses,
// before anything is written, a run whose remaining epochs would take one
// of its members past the budget.
func (j *Job) checkBudget(s *Session, data *Data, resume *checkpoint.Checkpoint, firstEpoch int) (*Ledger, error) {
	o := &j.o
	set := dp.DataSet{Name: data.Name, Unit: string(o.DP.Unit)}
	l, err := OpenLedger(o.LedgerDir, set, data.Members(o.DP.Unit))
	if err != nil {
		return nil, err
	}
	if resume != nil && resume.State.Privacy.Steps > 0 {
		if err := l.CheckCovers(resume.State.Privacy, o.Resume); err != nil {
			return nil, err
		}
	}
	remaining := o.Epochs - firstEpoch
	if remaining <= 0 {
		return l, nil
	}
	ev, err := s.EpochEvent(remaining)
	if err != nil {
		return nil, err
	}
	b, ok, err := l.Budget()
	if err != nil {
		return nil, err
	}
	want := o.DP.BudgetEpsilon
	switch {
	case !ok:
		if want == 0 {
			want = o.DP.TargetEpsilon
		}
		if want == 0 {
			// No budget given: what this run's epochs spend, so that
			// later runs on these people cannot silently spend more.
			a, err := dp.NewAccountant(nil)
			if err != nil {
				return nil, err
			}
			if err := a.Add(ev); err != nil {
				return nil, err
			}
			if want, _, err = a.Epsilon(o.DP.Delta); err != nil {
				return nil, err
			}
		}
		if err := l.SetBudget(dp.Budget{Epsilon: want, Delta: o.DP.Delta}); err != nil {
			return nil, err
		}
	case b.Delta != o.DP.Delta:
		return nil, fmt.Errorf("train: the privacy ledger of data set %s (%s) is kept at δ = %g; this run asks for δ = %g: run with --delta %g (changing a ledger's δ needs veil privacy ledger reset)",
			set, l.Path(), b.Delta, o.DP.Delta, b.Delta)
	case want > 0 && want != b.Epsilon:
		if err := l.SetBudget(dp.Budget{Epsilon: want, Delta: b.Delta}); err != nil {
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
		b, _, err := l.Budget()
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("train: %w: the budget of data set %s in %s is ε = %g at δ = %g; the people of this run have spent up to ε = %.4g (this run's %d epochs so far included), and %d more epochs would bring them to ε = %.4g: train fewer epochs, or have the owner reset the ledger (veil privacy ledger reset)",
			ErrBudget, set, l.Path(), b.Epsilon, b.Delta, spent.Epsilon, firstEpoch, remaining, need)
	}
	return l, nil
}
