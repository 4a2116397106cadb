package coord_test

import (
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/strategy"
	"github.com/veil-privacy/veil/fed/wire"
)

// bufferOptions is a FedBuff coordinator under masking with buffers of
// K = 4 clients (k = 3, t = 3, T = 2) making buffers model versions.
func bufferOptions(t *testing.T, dir string, buffers int) coord.Options {
	t.Helper()
	o := secOptions(t, dir, filepath.Join(t.TempDir(), "state.db"), buffers)
	o.Async = &coord.AsyncOptions{Strategy: coord.AsyncFedBuff, BufferSize: 4, MaxStaleness: 2, ServerLR: 1.5}
	return o
}

// startBuffers starts a FedBuff coordinator under masking, recording what
// it receives and the sums it unmasks.
func startBuffers(t *testing.T, buffers int, rec *recorder) *harness {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "pki")
	testCA(t, dir)
	o := bufferOptions(t, dir, buffers)
	rec.sums = map[uint64][]uint32{}
	return startHarnessWith(t, o, dir, rec.options(), func(c *coord.Coordinator) {
		coord.OnSecureSum(c, func(n uint64, s []uint32) { rec.mu.Lock(); rec.sums[n] = s; rec.mu.Unlock() })
	})
}

// plainFedBuff is plaintext FedBuff's model (strategy.FedBuff, η = 1.5)
// after one full buffer of the named clients' vecTrainer updates, each
// based on the model served (staleness 0).
func plainFedBuff(t *testing.T, names []string) []float32 {
	t.Helper()
	f, err := strategy.NewFedBuff(strategy.FedBuffOptions{BufferSize: len(names), ServerLR: 1.5}, model0())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		i := slices.Index(secNames, name)
		u := vecTrainer{base: float32(i + 1)}.values(6)
		up := wire.Weights{{Name: "w", Shape: []int{2, 2}, Values: u[:4]}, {Name: "b", Shape: []int{2}, Values: u[4:]}}
		if _, err := f.Add(up, 0); err != nil {
			t.Fatal(err)
		}
	}
	if f.Version() != 1 {
		t.Fatalf("plaintext FedBuff made %d versions, want 1", f.Version())
	}
	w := f.Model()
	return append(slices.Clone(w[0].Values), w[1].Values...)
}

// TestFedBuffBufferUnderMasking runs one FedBuff buffer of K = 4 clients
// as a masking round over mutual TLS: with no dropout, with a client that
// drops after sending its masked vector (recovered) and one that drops
// before (excluded, 3 = t survivors). Each time the unmasked sum is
// exactly the sum of the counted clients' quantised vectors, and the
// model is plaintext FedBuff's (strategy.FedBuff over the same updates)
// within 1e-4, the quantisation's tolerance at this lattice step (as
// TestMaskingRoundSumsExactly).
func TestFedBuffBufferUnderMasking(t *testing.T) {
	for _, tc := range []struct {
		name  string
		drop  map[string]int
		count []string
	}{
		{"all", nil, secNames},
		{"drops after sending", map[string]int{"client-2": 4}, secNames},
		{"drops before sending", map[string]int{"client-2": 3}, []string{"client-1", "client-3", "client-4"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			h := startBuffers(t, 1, rec)
			sumsExactly(t, h, rec, tc.drop, tc.count)
			w, _ := h.co.Model()
			got := append(slices.Clone(w[0].Values), w[1].Values...)
			for i, want := range plainFedBuff(t, tc.count) {
				if math.Abs(float64(got[i])-float64(want)) > 1e-4 {
					t.Fatalf("model value %d is %g, plaintext FedBuff's is %g", i, got[i], want)
				}
			}
		})
	}
}

// TestFedBuffTooFewSurvivorsRevealNothing: two of the buffer's four
// clients drop before their masked vectors (2 survivors, t = 3): the
// buffer is abandoned, no unmasking request is sent, nothing is unmasked
// and the model stays.
func TestFedBuffTooFewSurvivorsRevealNothing(t *testing.T) {
	rec := &recorder{}
	h := startBuffers(t, 1, rec)
	w0, _ := h.co.Model()
	runSecure(t, h, map[string]int{"client-1": 3, "client-4": 3}, nil)
	if err := <-h.done; err != nil {
		t.Fatal(err)
	}
	if st := roundState(t, h.state, 1); st != "failed" {
		t.Fatalf("buffer 1 %s, want failed", st)
	}
	nothingUnmasked(t, rec)
	w, _ := h.co.Model()
	if !slices.Equal(w[0].Values, w0[0].Values) || !slices.Equal(w[1].Values, w0[1].Values) {
		t.Fatal("the model changed")
	}
}

// TestFedBuffCoordinatorSeesNoUpdate plays the adversary with every byte
// a FedBuff coordinator under masking received over two buffers and its
// state files: no client's update (float32 or float64 runs) nor quantised
// vector (runs of four values, either byte order) appears. The state file
// then refuses to be resumed as plaintext FedBuff.
func TestFedBuffCoordinatorSeesNoUpdate(t *testing.T) {
	rec := &recorder{}
	h := startBuffers(t, 2, rec)
	seesNoUpdate(t, h, rec)
	if st := roundState(t, h.state, 2); st != "done" {
		t.Fatalf("buffer 2 %s, want done", st)
	}
	h.co.Close()
	o := bufferOptions(t, h.dir, 3)
	o.StatePath, o.SecAgg = h.state, nil
	if c, err := coord.New(o); err == nil || !strings.Contains(err.Error(), "fedbuff+masking") {
		if c != nil {
			c.Close()
		}
		t.Fatalf("plaintext FedBuff on the masked buffers' state file: %v", err)
	}
}

// Asynchronous strategies under secure aggregation: FedBuff's buffer must
// hold at least 3 and at least t clients, EASGD is refused (its exchange
// needs each client's x in plaintext), as are DPHE and thinned models.
func TestAsyncSecureOptionsValidated(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	testCA(t, dir)
	for _, tc := range []struct {
		name string
		edit func(*coord.Options)
		want string
	}{
		{"small buffer", func(o *coord.Options) { o.Async.BufferSize = 2 }, "at least 3 clients; the buffer size K is 2"},
		{"below threshold", func(o *coord.Options) { o.SecAgg.Threshold = 5 }, "at least the secure threshold t = 5 clients; the buffer size K is 4"},
		{"honest above threshold", func(o *coord.Options) { o.SecAgg.Threshold, o.SecAgg.MinHonest = 3, 4 }, "T = 4 must be in [2, the buffer's threshold t = 3]"},
		{"easgd", func(o *coord.Options) {
			*o.Async = coord.AsyncOptions{Strategy: coord.AsyncEASGD, Beta: 0.5, Period: 1}
		}, "must see every client's x in plaintext"},
		{"dphe", func(o *coord.Options) { o.SecAgg, o.DPHE = nil, &coord.DPHEOptions{} }, "DPHE"},
		{"thinned", func(o *coord.Options) { o.Async.Thin.Drop = 0.3 }, "thinned models"},
		{"distributed DP-SGD", func(o *coord.Options) { o.SecAgg.DDP = &coord.DDPOptions{} }, "distributed DP-SGD rounds are synchronous"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := bufferOptions(t, dir, 1)
			tc.edit(&o)
			c, err := coord.New(o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				if c != nil {
					c.Close()
				}
				t.Fatalf("err %v, want one saying %q", err, tc.want)
			}
		})
	}
	c, err := coord.New(bufferOptions(t, dir, 1))
	if err != nil {
		t.Fatalf("FedBuff with K = 4 ≥ t = 3 under masking: %v", err)
	}
	c.Close()
}
