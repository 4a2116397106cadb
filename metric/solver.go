package metric

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
)

// Solver configures the gradient method shared by LMNN and MT-LMNN: plain
// gradient descent in the factor V with an adaptive ("bold driver") step —
// a step that lowers the objective is kept and the next is 10% longer; one
// that raises it is undone and the step halved — so every kept iterate
// lowers the objective on the current active set. The zero value means the
// defaults.
type Solver struct {
	// Iterations caps the gradient steps tried (default 200).
	Iterations int
	// LearningRate is the first step, relative to the data's scale: the
	// step applied to V is LearningRate / s, s the mean squared distance to
	// a target neighbour under the initial map (default 0.05).
	LearningRate float64
	// Tolerance stops the descent when five kept steps in a row each lower
	// the objective by less than this fraction and a fresh active set does
	// not raise it (default 1e-6).
	Tolerance float64
	// Impostors bounds the active set: each anchor's impostor candidates are
	// its Impostors nearest differently-named faces under the map at the
	// last rebuild, plus every face rejected as its person (default 64).
	Impostors int
	// Refresh is the number of steps between rebuilds of the active set
	// (default 10).
	Refresh int
	// Workers is the number of goroutines (default GOMAXPROCS). Results do
	// not depend on it.
	Workers int
}

func (s Solver) withDefaults() (Solver, error) {
	if s.Iterations < 0 || s.Impostors < 0 || s.Refresh < 0 || s.Workers < 0 {
		return s, errors.New("metric: iterations, impostors, refresh and workers must not be negative")
	}
	if s.LearningRate < 0 || s.Tolerance < 0 || math.IsNaN(s.LearningRate) || math.IsNaN(s.Tolerance) ||
		math.IsInf(s.LearningRate, 0) || math.IsInf(s.Tolerance, 0) {
		return s, errors.New("metric: learning rate and tolerance must be finite and not negative")
	}
	if s.Iterations == 0 {
		s.Iterations = 200
	}
	if s.LearningRate == 0 {
		s.LearningRate = 0.05
	}
	if s.Tolerance == 0 {
		s.Tolerance = 1e-6
	}
	if s.Impostors == 0 {
		s.Impostors = 64
	}
	if s.Refresh == 0 {
		s.Refresh = 10
	}
	if s.Workers == 0 {
		s.Workers = runtime.GOMAXPROCS(0)
	}
	return s, nil
}

// objectiveFunc is what the descent minimises: value and (into grad, when
// non-nil, overwritten) gradient at params, and a rebuild of the active set.
type objectiveFunc interface {
	value(params, grad []float64) float64
	refresh(params []float64)
}

// Progress is the solver's account of a run.
type Progress struct {
	Iterations  int     // steps tried
	Accepted    int     // steps kept
	Refreshes   int     // active-set rebuilds
	Converged   bool    // stopped by Tolerance, not by the iteration cap
	Step        float64 // last step size
	Objective   float64 // final objective on the final active set
	InitialStep float64 // first step size (LearningRate / s)
}

// descend minimises f from params, leaving the result in params.
func descend(ctx context.Context, f objectiveFunc, params []float64, s Solver, scale float64) (Progress, error) {
	var pr Progress
	out := params
	params = append([]float64(nil), params...)
	grad := make([]float64, len(params))
	trialGrad := make([]float64, len(params))
	trial := make([]float64, len(params))
	f.refresh(params)
	pr.Refreshes++
	fv := f.value(params, grad)
	if scale <= 0 || math.IsNaN(scale) || math.IsInf(scale, 0) {
		scale = 1
	}
	eta := s.LearningRate / scale
	pr.InitialStep = eta
	sinceRefresh, small := 0, 0
	for pr.Iterations < s.Iterations {
		if err := ctx.Err(); err != nil {
			copy(out, params)
			return pr, fmt.Errorf("metric: training stopped: %w", err)
		}
		if sinceRefresh >= s.Refresh {
			f.refresh(params)
			pr.Refreshes++
			fv = f.value(params, grad)
			sinceRefresh = 0
		}
		pr.Iterations++
		sinceRefresh++
		for i := range params {
			trial[i] = params[i] - eta*grad[i]
		}
		ft := f.value(trial, trialGrad)
		if ft <= fv && !math.IsNaN(ft) {
			rel := (fv - ft) / math.Max(math.Abs(fv), 1e-300)
			params, trial = trial, params
			grad, trialGrad = trialGrad, grad
			fv = ft
			eta *= 1.1
			pr.Accepted++
			if rel >= s.Tolerance {
				small = 0
			} else if small++; small >= 5 {
				small = 0
				f.refresh(params)
				pr.Refreshes++
				sinceRefresh = 0
				fr := f.value(params, grad)
				if fr <= fv*(1+s.Tolerance) {
					fv = fr
					pr.Converged = true
					break
				}
				fv = fr
			}
			continue
		}
		eta *= 0.5
		if eta < pr.InitialStep*1e-12 {
			pr.Converged = true
			break
		}
	}
	copy(out, params) // the buffers were swapped on every kept step
	pr.Step = eta
	pr.Objective = fv
	return pr, nil
}
