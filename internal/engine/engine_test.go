package engine

import (
	"strings"
	"testing"

	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
)

func TestNewValidatesOptions(t *testing.T) {
	tests := []struct {
		name    string
		o       Options
		wantErr string // "" for success
		wantPar int
	}{
		{name: "zero value", o: Options{}, wantPar: Parallelism()},
		{name: "go backend, pinned parallelism", o: Options{Backend: "go", Parallelism: 3}, wantPar: 3},
		{name: "unknown backend", o: Options{Backend: "xla"}, wantErr: `backend "xla" is not supported`},
		{name: "negative parallelism", o: Options{Parallelism: -1}, wantErr: "Parallelism -1 is negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, err := New(tc.o)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("New(%+v) error = %v, want one containing %q", tc.o, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if e.Parallelism() != tc.wantPar {
				t.Errorf("Parallelism() = %d, want %d", e.Parallelism(), tc.wantPar)
			}
			if e.Backend() == nil {
				t.Error("Backend() is nil")
			}
		})
	}
}

// TestEnginesAreIndependent checks that New returns a fresh backend each
// time: there is no process-wide one.
func TestEnginesAreIndependent(t *testing.T) {
	a, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if a.Backend() == b.Backend() {
		t.Fatal("two engines share one backend")
	}
}

func TestBackendRunsAGraph(t *testing.T) {
	e, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := e.Backend()
	exec, err := graph.NewExec(b, func(x *graph.Node) *graph.Node {
		return graph.ReduceAllSum(graph.Mul(x, x))
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Call(tensors.FromValue([]float32{1, 2, 3}))
	if err != nil {
		t.Fatal(err)
	}
	got := tensors.MustCopyFlatData[float32](out[0])
	if len(got) != 1 || got[0] != 14 {
		t.Fatalf("sum of squares = %v, want [14]", got)
	}
}

func BenchmarkConv3x3(b *testing.B) {
	e, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	be := e.Backend()
	exec, err := graph.NewExec(be, func(x, k *graph.Node) *graph.Node {
		return graph.Convolve(x, k).PadSame().Done()
	})
	if err != nil {
		b.Fatal(err)
	}
	x := tensors.FromFlatDataAndDimensions(make([]float32, 35*35*32), 1, 35, 35, 32)
	k := tensors.FromFlatDataAndDimensions(make([]float32, 9*32*32), 3, 3, 32, 32)
	if _, err := exec.Call(x, k); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := exec.Call(x, k); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(35*35*32*288*2)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

func BenchmarkConv3x3Im2col(b *testing.B) {
	e, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	be := e.Backend()
	exec, err := graph.NewExec(be, func(x, k *graph.Node) *graph.Node {
		g := x.Graph()
		zr := graph.Zeros(g, shapes.Make(x.DType(), 1, 1, 35, 32))
		x = graph.Concatenate([]*graph.Node{zr, x, zr}, 1)
		zc := graph.Zeros(g, shapes.Make(x.DType(), 1, 37, 1, 32))
		x = graph.Concatenate([]*graph.Node{zc, x, zc}, 2)
		var parts []*graph.Node
		for dy := 0; dy < 3; dy++ {
			for dx := 0; dx < 3; dx++ {
				parts = append(parts, graph.Slice(x, graph.AxisRange(), graph.AxisRange(dy, dy+35), graph.AxisRange(dx, dx+35), graph.AxisRange()))
			}
		}
		cols := graph.Reshape(graph.Concatenate(parts, 3), 35*35, 288)
		return graph.Dot(cols, graph.Reshape(k, 288, 32)).Product()
	})
	if err != nil {
		b.Fatal(err)
	}
	x := tensors.FromFlatDataAndDimensions(make([]float32, 35*35*32), 1, 35, 35, 32)
	k := tensors.FromFlatDataAndDimensions(make([]float32, 9*32*32), 3, 3, 32, 32)
	if _, err := exec.Call(x, k); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := exec.Call(x, k); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(35*35*32*288*2)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
