package nets

import (
	"errors"
	"fmt"
	"sync"

	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"

	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/internal/engine"
)

// This file holds the batching executor shared by the descriptor, landmark
// and age/gender networks: square H×W×3 inputs in, one flat float32 vector
// per input out.

// ErrInput is wrapped by errors about inputs of the wrong size or shape.
var ErrInput = errors.New("nets: invalid network input")

// netMaxBatch is the largest batch one pass takes. Batches are split into
// chunks of 4, 2 and 1 so that at most three sizes are ever compiled per
// product and no compute is spent on padding; larger chunks measured no
// faster with the Go-kernel runners and would hold more memory.
const netMaxBatch = 4

// netRunner executes one network graph on batches of square RGB inputs.
type netRunner struct {
	name   string   // network name for errors
	size   int      // input height and width
	outLen int      // floats per input in the output
	par    *kernPar // how many goroutines run share the inputs
	exec   *graph.Exec
	// forward, when set, replaces exec: it maps n inputs (flat
	// [n][size][size][3]) to their n·outLen outputs.
	forward func(x []float32, n int) ([]float32, error)
}

// newKernRunner wraps forward (see netRunner.forward) into a batching,
// concurrency-safe runner.
func newKernRunner(par *kernPar, name string, size, outLen int, forward func(x []float32, n int) ([]float32, error)) *netRunner {
	return &netRunner{par: par, name: name, size: size, outLen: outLen, forward: forward}
}

// newNetRunner wraps build, which maps an [N,size,size,3] float32 node to an
// [N,outLen] node, into a cached, concurrency-safe executor.
func newNetRunner(eng *engine.Engine, name string, size, outLen int, build func(x *graph.Node) *graph.Node) (*netRunner, error) {
	exec, err := graph.NewExec(eng.Backend(), build)
	if err != nil {
		return nil, fmt.Errorf("nets: %s: creating executor: %w", name, err)
	}
	exec.SetMaxCache(16)
	return &netRunner{par: newKernPar(eng), name: name, size: size, outLen: outLen, exec: exec.WithName("nets." + name)}, nil
}

// check validates one input.
func (r *netRunner) check(i int, in *imaging.Float) error {
	if in == nil {
		return fmt.Errorf("%w: %s input %d is nil", ErrInput, r.name, i)
	}
	if in.W != r.size || in.H != r.size || in.C != 3 {
		return fmt.Errorf("%w: %s input %d is %d×%d×%d, want %d×%d×3", ErrInput, r.name, i, in.W, in.H, in.C, r.size, r.size)
	}
	if len(in.Pix) != r.size*r.size*3 {
		return fmt.Errorf("%w: %s input %d has %d values, want %d", ErrInput, r.name, i, len(in.Pix), r.size*r.size*3)
	}
	return nil
}

// run returns the network's output for every input, in order. Inputs are
// split evenly over r.par.workers goroutines (the pure-Go backend
// runs one execution on about one core), and each share is run in chunks
// of 4, 2 and 1.
func (r *netRunner) run(inputs []*imaging.Float) ([][]float32, error) {
	for i, in := range inputs {
		if err := r.check(i, in); err != nil {
			return nil, err
		}
	}
	out := make([][]float32, len(inputs))
	if len(inputs) == 0 {
		return out, nil
	}
	workers := min(r.par.workers, len(inputs))
	per := (len(inputs) + workers - 1) / workers
	var wg sync.WaitGroup
	errs := make([]error, workers)
	started := 0
	for w := 0; w < workers; w++ {
		lo, hi := w*per, min((w+1)*per, len(inputs))
		if lo >= hi {
			continue
		}
		wg.Add(1)
		started++
		go func(w, lo, hi int) {
			defer wg.Done()
			for lo < hi {
				n := batchChunk(hi - lo)
				if err := r.runChunk(inputs[lo:lo+n], out[lo:lo+n]); err != nil {
					errs[w] = err
					return
				}
				lo += n
			}
		}(w, lo, hi)
	}
	wg.Wait()
	if r.par.started != nil {
		r.par.started(started)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// chunk returns the largest allowed batch size not above n.
func batchChunk(n int) int {
	for b := netMaxBatch; b > 1; b /= 2 {
		if n >= b {
			return b
		}
	}
	return 1
}

// runChunk executes one batch and writes each input's output to out.
func (r *netRunner) runChunk(inputs []*imaging.Float, out [][]float32) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("nets: %s: execution failed: %v", r.name, p)
		}
	}()
	n := len(inputs)
	per := r.size * r.size * 3
	flat := make([]float32, n*per)
	for i, in := range inputs {
		copy(flat[i*per:(i+1)*per], in.Pix)
	}
	if r.forward != nil {
		vals, err := r.forward(flat, n)
		if err != nil {
			return fmt.Errorf("nets: %s: %w", r.name, err)
		}
		return r.split(vals, out)
	}
	x := tensors.FromFlatDataAndDimensions(flat, n, r.size, r.size, 3)
	res, err := r.exec.Call(x)
	x.FinalizeAll()
	if err != nil {
		return fmt.Errorf("nets: %s: %w", r.name, err)
	}
	defer func() {
		for _, t := range res {
			t.FinalizeAll()
		}
	}()
	if len(res) != 1 {
		return fmt.Errorf("nets: %s: graph returned %d outputs, want 1", r.name, len(res))
	}
	vals, err := tensors.CopyFlatData[float32](res[0])
	if err != nil {
		return fmt.Errorf("nets: %s: reading output: %w", r.name, err)
	}
	return r.split(vals, out)
}

// split cuts the flat output of a batch into one slice per input.
func (r *netRunner) split(vals []float32, out [][]float32) error {
	n := len(out)
	if len(vals) != n*r.outLen {
		return fmt.Errorf("nets: %s: output has %d values, want %d", r.name, len(vals), n*r.outLen)
	}
	for i := range out {
		out[i] = vals[i*r.outLen : (i+1)*r.outLen : (i+1)*r.outLen]
	}
	return nil
}

// faNormalize applies face-api's (x - mean) / 255 with the ImageNet-style
// mean [122.782, 117.001, 104.298] shared by the descriptor, landmark and
// age/gender networks.
func faNormalize(x *graph.Node) *graph.Node {
	g := x.Graph()
	mean := graph.Const(g, tensors.FromFlatDataAndDimensions([]float32{122.782, 117.001, 104.298}, 1, 1, 1, 3))
	return graph.Div(graph.Sub(x, mean), graph.Scalar(g, x.DType(), 255))
}

// relu is max(x, 0).
func netRelu(x *graph.Node) *graph.Node { return graph.Max(x, graph.ZerosLike(x)) }
