package coord_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/binary"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/fed/wire"
)

// vecTrainer's update is a distinct vector per client (base + i/100 in
// coordinate i), so that an update's bytes are recognisable.
type vecTrainer struct{ base float32 }

func (v vecTrainer) Plan(task *fedpb.RoundConfig, _ float64) (*fedpb.DPParams, error) {
	return fixedTrainer{sigma: 1, q: 0.1}.Plan(task, 0)
}

func (v vecTrainer) Train(_ context.Context, model wire.Weights, _ *fedpb.RoundConfig, plan *fedpb.DPParams) (client.Update, error) {
	up := model.Clone()
	k := 0
	for i := range up {
		for j := range up[i].Values {
			up[i].Values[j] = v.base + float32(k)/100
			k++
		}
	}
	return client.Update{Weights: up, DP: plan}, nil
}

func (v vecTrainer) values(n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = v.base + float32(i)/100
	}
	return out
}

var secNames = []string{"client-1", "client-2", "client-3", "client-4"}

// secOptions is a coordinator of four-client masking rounds (k = 3,
// t = 3, T = 2).
func secOptions(t *testing.T, dir, state string, rounds int) coord.Options {
	t.Helper()
	o := options(state, rounds)
	o.MinAvailable, o.MinUpdates, o.RoundTimeout = 4, 2, 12*time.Second
	ca, err := pki.ReadCert(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	o.SecAgg = &coord.SecAggOptions{Mode: "masking", MinHonest: 2, Roots: pool, PhaseTimeout: 2 * time.Second}
	return o
}

// recorder keeps every message the coordinator received, as protobuf
// bytes (server interceptors), and the secure rounds' unmasked sums.
type recorder struct {
	mu   sync.Mutex
	recv [][]byte
	sums map[uint64][]uint32
}

func (r *recorder) keep(m any) {
	if pm, ok := m.(proto.Message); ok {
		b, _ := proto.Marshal(pm)
		r.mu.Lock()
		r.recv = append(r.recv, b)
		r.mu.Unlock()
	}
}

type recvStream struct {
	grpc.ServerStream
	r *recorder
}

func (s recvStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		s.r.keep(m)
	}
	return err
}

func (r *recorder) options() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			r.keep(req)
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			return h(srv, recvStream{ss, r})
		}),
	}
}

// secClient is a client with its identity, noting its quantised inputs.
func secClient(t *testing.T, h *harness, name string, tr client.Trainer, drop func(uint64, int) bool, inputs *sync.Map) *client.Client {
	t.Helper()
	id, err := pki.LoadIdentity(filepath.Join(h.dir, name+".crt"), filepath.Join(h.dir, name+".key"), filepath.Join(h.dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pol := client.DefaultPolicy(dp.Budget{Epsilon: 100, Delta: 1e-5})
	pol.SecAgg = client.SecAggPolicy{Require: true, MinHonest: 2}
	c, err := client.New(client.Options{Addr: h.addr, Creds: h.creds(t, name), Policy: pol, Identity: id,
		Dir: filepath.Join(h.dir, "clients", name), LedgerDir: filepath.Join(h.dir, "clients", name, "ledgers"), DataSet: name, Trainer: tr,
		DropSecure: drop, Quantised: func(round uint64, x []uint32) {
			if inputs != nil {
				inputs.Store(name, x)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// runSecure runs the four clients (dropping as drop says) until the run
// ends or the context does.
func runSecure(t *testing.T, h *harness, drop map[string]int, inputs *sync.Map) map[string]error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var mu sync.Mutex
	errs := map[string]error{}
	var wg sync.WaitGroup
	for i, name := range secNames {
		var d func(uint64, int) bool
		if p, ok := drop[name]; ok {
			d = func(_ uint64, phase int) bool { return phase == p }
		}
		c := secClient(t, h, name, vecTrainer{base: float32(i + 1)}, d, inputs)
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := c.Run(ctx)
			mu.Lock()
			errs[name] = err
			mu.Unlock()
		}()
	}
	wg.Wait()
	return errs
}

func startSecure(t *testing.T, rounds int, rec *recorder) *harness {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "pki")
	testCA(t, dir) // first: the options need its certificate
	o := secOptions(t, dir, filepath.Join(t.TempDir(), "state.db"), rounds)
	var extra []grpc.ServerOption
	if rec != nil {
		extra = rec.options()
		rec.sums = map[uint64][]uint32{}
	}
	return startHarnessWith(t, o, dir, extra, func(c *coord.Coordinator) {
		if rec != nil {
			coord.OnSecureSum(c, func(n uint64, s []uint32) { rec.mu.Lock(); rec.sums[n] = s; rec.mu.Unlock() })
		}
	})
}

// TestMaskingRoundSumsExactly runs masking rounds over mutual TLS with no
// drop-out, a client that drops after sending its masked vector (before
// unmasking: its self mask is recovered from its neighbours' shares) and
// one that drops before sending it (excluded; its pairwise masks are
// recovered from its mask key's shares): each time the unmasked sum is
// exactly the sum, modulo 2^32, of the quantised vectors of the clients
// whose vectors were accepted, and the round is done.
func TestMaskingRoundSumsExactly(t *testing.T) {
	for _, tc := range []struct {
		name  string
		drop  map[string]int
		count []string
	}{
		{"all", nil, secNames},
		{"drops after sending", map[string]int{"client-4": 4}, secNames},
		{"drops before sending", map[string]int{"client-4": 3}, secNames[:3]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			h := startSecure(t, 1, rec)
			sumsExactly(t, h, rec, tc.drop, tc.count)
			// No noise share is proposed or required here, so the decoded
			// mean is the updates' mean within the lattice step: the model
			// moved by the server rate round(√n) = 2 times that mean.
			w, _ := h.co.Model()
			w0 := model0()
			got := append(slices.Clone(w[0].Values), w[1].Values...)
			for i, v := range append(slices.Clone(w0[0].Values), w0[1].Values...) {
				var mean float64
				for _, name := range tc.count {
					j := slices.Index(secNames, name)
					mean += float64(vecTrainer{base: float32(j + 1)}.values(6)[i]) / float64(len(tc.count))
				}
				if want := float64(v) + 2*mean; math.Abs(float64(got[i])-want) > 1e-4 {
					t.Fatalf("model value %d is %g, want %g (the initial model plus twice the mean update)", i, got[i], want)
				}
			}
		})
	}
}

// sumsExactly runs the four clients of a one-round run (dropping as drop
// says) until it ends and checks that round 1 is done with the clients
// named in count, its unmasked sum exactly the sum of their quantised
// vectors.
func sumsExactly(t *testing.T, h *harness, rec *recorder, drop map[string]int, count []string) {
	t.Helper()
	var inputs sync.Map
	for name, err := range runSecure(t, h, drop, &inputs) {
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := <-h.done; err != nil {
		t.Fatal(err)
	}
	st, updates, reason, _ := roundRow(t, h.state, "client-1")
	if st != "done" || updates != len(count) {
		t.Fatalf("round 1: %s with %d updates (%s), want done with %d", st, updates, reason, len(count))
	}
	want := sumOf(t, &inputs, count)
	if got := rec.sums[1]; !slices.Equal(got, want) {
		t.Fatalf("unmasked sum %v, want the quantised vectors' sum %v", got[:8], want[:8])
	}
}

// readStatus reads the state file's status as an operator would.
func readStatus(t *testing.T, state string) *fedpb.StatusResponse {
	t.Helper()
	db, err := coord.OpenStatus(state)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st, err := coord.ReadStatus(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// roundState is round n's state in the state file.
func roundState(t *testing.T, state string, n int) string {
	t.Helper()
	for _, r := range readStatus(t, state).Rounds {
		if r.Round == uint64(n) {
			return r.State
		}
	}
	return ""
}

// sumOf is the sum modulo 2^32 of the quantised vectors the clients
// named noted in inputs.
func sumOf(t *testing.T, inputs *sync.Map, names []string) []uint32 {
	t.Helper()
	var sum []uint32
	for _, name := range names {
		x, ok := inputs.Load(name)
		if !ok {
			t.Fatalf("%s quantised nothing", name)
		}
		if sum == nil {
			sum = make([]uint32, len(x.([]uint32)))
		}
		for i, v := range x.([]uint32) {
			sum[i] += v
		}
	}
	return sum
}

// TestTooFewSurvivorsRevealNothing: with two of four clients dropping
// before their masked vectors (two survivors, t = 3), the round fails,
// no unmasking request is ever sent, no sum is unmasked and the model
// stays as it was.
func TestTooFewSurvivorsRevealNothing(t *testing.T) {
	rec := &recorder{}
	h := startSecure(t, 1, rec)
	w0, _ := h.co.Model()
	runSecure(t, h, map[string]int{"client-3": 3, "client-4": 3}, nil)
	if err := <-h.done; err != nil {
		t.Fatal(err)
	}
	if st := roundState(t, h.state, 1); st != "failed" {
		t.Fatalf("round 1 %s, want failed", st)
	}
	nothingUnmasked(t, rec)
	if w, _ := h.co.Model(); !slices.Equal(w[0].Values, w0[0].Values) {
		t.Fatal("the model changed")
	}
}

// TestCoordinatorSeesNoUpdate plays an adversary with every byte the
// coordinator received (each message, as protobuf) and its state files
// during and after a masking round: no client's update (as float32 or
// float64 runs) and no client's quantised vector (runs of four values,
// big- and little-endian) appears anywhere.
func TestCoordinatorSeesNoUpdate(t *testing.T) {
	rec := &recorder{}
	h := startSecure(t, 2, rec)
	seesNoUpdate(t, h, rec)
	if !strings.Contains(roundState(t, h.state, 2), "done") {
		t.Fatal("round 2 is not done")
	}
}

// seesNoUpdate runs the four clients without drop-out until the run
// ends, then looks for each client's update (float32 and float64 runs)
// and quantised vector (runs of four values, either byte order) in every
// byte the coordinator received and in its state files.
func seesNoUpdate(t *testing.T, h *harness, rec *recorder) {
	t.Helper()
	var inputs sync.Map
	for name, err := range runSecure(t, h, nil, &inputs) {
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := <-h.done; err != nil {
		t.Fatal(err)
	}
	var needles [][]byte
	for i := range secNames {
		needles = append(needles, updateNeedles(vecTrainer{base: float32(i + 1)}.values(6), 1)...)
	}
	n := 0
	inputs.Range(func(_, v any) bool {
		n++
		needles = append(needles, u32Needles(v.([]uint32))...)
		return true
	})
	if n != 4 {
		t.Fatalf("%d clients quantised", n)
	}
	all := bytes.Join(rec.recv, nil)
	if len(all) < 4*4*4 {
		t.Fatalf("recorded only %d bytes", len(all))
	}
	for _, nd := range needles {
		if bytes.Contains(all, nd) {
			t.Fatal("a client's update or quantised vector is in what the coordinator received")
		}
	}
	if f := findUpdate(t, h.state, needles); len(f) > 0 {
		t.Fatalf("a client's update or quantised vector is in %v", f)
	}
}

// TestMaskingNeedsUniformWeighting: FedAvg weighted by example counts
// cannot run under masking (the coordinator never sees an update to
// weigh), and is refused when the coordinator is made.
func TestMaskingNeedsUniformWeighting(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	testCA(t, dir)
	o := secOptions(t, dir, filepath.Join(t.TempDir(), "state.db"), 1)
	o.Strategy.DP, o.Task.DP = false, nil
	if _, err := coord.New(o); err == nil || !strings.Contains(err.Error(), "uniform weighting") {
		t.Fatalf("FedAvg by examples under masking: %v", err)
	}
	o.Strategy.Weighting = "uniform"
	c, err := coord.New(o)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// nothingUnmasked checks that no sum was unmasked and no client sent
// unmasking shares (the coordinator never asked for them).
func nothingUnmasked(t *testing.T, rec *recorder) {
	t.Helper()
	if len(rec.sums) != 0 {
		t.Fatal("a sum was unmasked with fewer than t survivors")
	}
	for _, b := range rec.recv {
		m := &fedpb.SecAggMessage{}
		if proto.Unmarshal(b, m) == nil && m.GetUnmask() != nil {
			t.Fatal("a client sent unmasking shares: the coordinator asked with fewer than t survivors")
		}
	}
}

// u32Needles are runs of four of x's values, big- and little-endian.
func u32Needles(x []uint32) [][]byte {
	var out [][]byte
	for i := 0; i+4 <= len(x); i += 97 {
		var be, le []byte
		for _, v := range x[i : i+4] {
			be, le = binary.BigEndian.AppendUint32(be, v), binary.LittleEndian.AppendUint32(le, v)
		}
		out = append(out, be, le)
	}
	return out
}
