package metric

import (
	"bytes"
	"encoding/binary"
	"flag"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/ golden files")

func TestMetricRoundTrip(t *testing.T) {
	rot, _ := RandomRotation([32]byte{7}, 5)
	proj, _ := rot.Truncate(2)
	for _, m := range []*Metric{Identity(1), Identity(3), rot, proj} {
		b, err := m.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var got Metric
		if err := got.UnmarshalBinary(b); err != nil {
			t.Fatal(err)
		}
		if got.out != m.out || got.in != m.in {
			t.Fatalf("decoded %d×%d, encoded %d×%d", got.out, got.in, m.out, m.in)
		}
		for i := range m.v {
			if math.Float64bits(got.v[i]) != math.Float64bits(m.v[i]) {
				t.Fatalf("entry %d: %v decoded as %v", i, m.v[i], got.v[i])
			}
		}
	}
}

// The golden file pins format version 1: a change to the encoding that
// would make stored (encrypted) maps unreadable fails here.
func TestMetricGolden(t *testing.T) {
	m, err := NewMetric(2, 3, []float64{1, -2, 0.5, 0, math.Pi, -1e-300})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := m.MarshalBinary()
	path := filepath.Join("testdata", "metric-v1.bin")
	if *update {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, want) {
		t.Fatalf("encoding changed:\n got %x\nwant %x", b, want)
	}
	var got Metric
	if err := got.UnmarshalBinary(want); err != nil {
		t.Fatal(err)
	}
	if got.At(1, 1) != math.Pi || got.At(0, 1) != -2 {
		t.Fatalf("golden file decodes to %v", got.v)
	}
}

func header(out, in uint32) []byte {
	b := []byte("VMTR\x01")
	b = binary.LittleEndian.AppendUint32(b, out)
	return binary.LittleEndian.AppendUint32(b, in)
}

func TestMetricUnmarshalRejects(t *testing.T) {
	good, _ := Identity(2).MarshalBinary()
	nan := append([]byte(nil), good...)
	binary.LittleEndian.PutUint64(nan[headerLen+8:], math.Float64bits(math.NaN()))
	inf := append([]byte(nil), good...)
	binary.LittleEndian.PutUint64(inf[headerLen:], math.Float64bits(math.Inf(-1)))
	for _, tc := range []struct {
		name, data, want string
	}{
		{"empty", "", "shorter than"},
		{"short header", "VMTR\x01\x02", "shorter than"},
		{"bad magic", "XMTR" + string(good[4:]), "bad magic"},
		{"future version", "VMTR\x02" + string(good[5:]), "version 2"},
		{"zero rows", string(header(0, 2)), "outside"},
		{"zero columns", string(header(2, 0)), "outside"},
		{"too large", string(header(MaxDim+1, 1)), "outside"},
		{"huge claim, no data", string(header(MaxDim, MaxDim)), "needs"},
		{"truncated", string(good[:len(good)-1]), "needs"},
		{"trailing byte", string(good) + "x", "needs"},
		{"NaN entry", string(nan), "non-finite"},
		{"-Inf entry", string(inf), "non-finite"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := Identity(1)
			err := m.UnmarshalBinary([]byte(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if m.out != 1 || m.in != 1 || m.v[0] != 1 {
				t.Fatal("failed decode changed the metric")
			}
		})
	}
	// A header claiming the largest map must be refused before allocating it.
	h := header(MaxDim, MaxDim)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var m Metric
	_ = m.UnmarshalBinary(h)
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<16 {
		t.Errorf("rejecting a 4096×4096 header with no data allocated %d bytes", got)
	}
}

func FuzzMetricUnmarshal(f *testing.F) {
	good, _ := Identity(2).MarshalBinary()
	rot, _ := RandomRotation([32]byte{1}, 3)
	r, _ := rot.MarshalBinary()
	f.Add(good)
	f.Add(r)
	f.Add(header(MaxDim, MaxDim))
	f.Add([]byte("VMTR"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var m Metric
		if err := m.UnmarshalBinary(data); err != nil {
			return
		}
		again, err := m.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, data) {
			t.Fatalf("decode/encode changed the bytes")
		}
		x := make([]float64, m.in)
		for i := range x {
			x[i] = float64(i)
		}
		if d := m.Distance(x, x); d != 0 {
			t.Fatalf("distance of a point to itself is %v", d)
		}
	})
}

func TestNewMetricValidates(t *testing.T) {
	for _, tc := range []struct {
		name    string
		out, in int
		v       []float64
	}{
		{"zero size", 0, 1, nil},
		{"too large", MaxDim + 1, 1, make([]float64, MaxDim+1)},
		{"wrong length", 2, 2, []float64{1, 2, 3}},
		{"NaN", 1, 1, []float64{math.NaN()}},
		{"Inf", 1, 1, []float64{math.Inf(1)}},
	} {
		if _, err := NewMetric(tc.out, tc.in, tc.v); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
	v := []float64{1, 2}
	m, err := NewMetric(1, 2, v)
	if err != nil {
		t.Fatal(err)
	}
	v[0] = 9
	if m.At(0, 0) != 1 {
		t.Error("NewMetric did not copy its slice")
	}
}

func TestStackAddsMetrics(t *testing.T) {
	a, _ := NewMetric(1, 2, []float64{1, 2})
	b, _ := NewMetric(2, 2, []float64{0, 3, -1, 1})
	s, err := a.Stack(b)
	if err != nil {
		t.Fatal(err)
	}
	wa, wb, ws := a.Mahalanobis(), b.Mahalanobis(), s.Mahalanobis()
	for i := range ws {
		if math.Abs(ws[i]-wa[i]-wb[i]) > 1e-12 {
			t.Fatalf("W of stack %v ≠ %v + %v", ws, wa, wb)
		}
	}
	x, y := []float64{0.3, -1}, []float64{2, 0.5}
	if got, want := s.SquaredDistance(x, y), a.SquaredDistance(x, y)+b.SquaredDistance(x, y); math.Abs(got-want) > 1e-12 {
		t.Fatalf("stacked d² %v, sum %v", got, want)
	}
	if _, err := a.Stack(Identity(3)); err == nil {
		t.Error("stacked maps of different input sizes")
	}
}
