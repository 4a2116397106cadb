package coord_test

import (
	"bytes"
	"context"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/coord"
	"github.com/veil-privacy/veil/fed/dphefed"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/keygen"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/fed/wire"
)

// dpheTol is the tolerance of a DPHE sum against the clients' updates:
// the release's noise (σ·C = 1e-9·20 per value, at most a few 1e-8) and
// the fixed-point encoding's step (2^−32 per value by default), summed
// over four clients, are far below it.
const dpheTol = 1e-5

// plainTrainer is vecTrainer without DP-SGD (a DPHE round's DP is the
// release): the update is base + i/100 in coordinate i.
type plainTrainer struct{ vecTrainer }

func (p plainTrainer) Train(ctx context.Context, model wire.Weights, task *fedpb.RoundConfig, _ *fedpb.DPParams) (client.Update, error) {
	return p.vecTrainer.Train(ctx, model, task, nil)
}

// dpheFed is a federation of a key generator (its own gRPC server, mTLS
// identity and state folder), a coordinator in DPHE mode and its sums.
type dpheFed struct {
	*harness
	kgAddr string
	mu     sync.Mutex
	sums   map[uint64][]float64
	rec    *recorder
	o      coord.Options
}

// startDPHE starts the key generator and a coordinator of rounds DPHE
// rounds of four selected clients.
func startDPHE(t *testing.T, rounds int) *dpheFed {
	t.Helper()
	return startDPHEWith(t, rounds, nil)
}

// startDPHEWith is startDPHE with the DPHE options changed by set.
func startDPHEWith(t *testing.T, rounds int, set func(*coord.DPHEOptions)) *dpheFed {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "pki")
	ca := testCA(t, dir)
	if _, err := ca.Issue(pki.IssueOptions{Name: "keygen", Role: pki.Server}); err != nil {
		t.Fatal(err)
	}
	load := func(name string) *pki.Identity {
		id, err := pki.LoadIdentity(filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key"), filepath.Join(dir, "ca.crt"))
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	svc, err := keygen.Open(keygen.Options{Dir: filepath.Join(t.TempDir(), "keygen"), Coordinator: "coordinator", Bits: 512, AllowInsecureTestKeySize: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := keygen.NewServer(svc, load("keygen"), nil, 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Stop(); svc.Close() })
	f := &dpheFed{kgAddr: ln.Addr().String(), sums: map[uint64][]float64{}, rec: &recorder{}}
	kg, err := dphefed.Dial(dphefed.DialOptions{Addr: f.kgAddr, Identity: load("coordinator"), Name: "keygen", AllowInsecureTestKeySize: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kg.Close() })
	o := options(filepath.Join(t.TempDir(), "state.db"), rounds)
	o.Strategy.DP, o.Strategy.Weighting, o.Task.DP = false, "uniform", nil
	o.MinAvailable, o.MinUpdates, o.RoundTimeout = 4, 3, 10*time.Second
	o.DPHE = &coord.DPHEOptions{KeyGen: kg, Addr: f.kgAddr, Name: "keygen", Count: 6, Clip: 20, NoiseMultiplier: 1e-9,
		SelectionEpsilon: 1e6, SelectionDelta: 1e-6, SelectionThreshold: 0.1}
	if set != nil {
		set(o.DPHE)
	}
	coord.OnDPHESum(o.DPHE, func(n uint64, s []float64) { f.mu.Lock(); f.sums[n] = s; f.mu.Unlock() })
	f.o = o
	f.harness = startHarnessWith(t, o, dir, f.rec.options(), nil)
	return f
}

// dpheClient is client i+1 of the federation, trusting the key generator
// "keygen", with budget ε; sitOut makes it skip every round.
func (f *dpheFed) dpheClient(t *testing.T, i int, eps float64, sitOut bool) *client.Client {
	t.Helper()
	return f.dpheClientWith(t, i, eps, sitOut, plainTrainer{vecTrainer{base: float32(i + 1)}})
}

// dpheClientWith is dpheClient with the trainer tr.
func (f *dpheFed) dpheClientWith(t *testing.T, i int, eps float64, sitOut bool, tr client.Trainer) *client.Client {
	t.Helper()
	name := secNames[i]
	id, err := pki.LoadIdentity(filepath.Join(f.dir, name+".crt"), filepath.Join(f.dir, name+".key"), filepath.Join(f.dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pol := client.DefaultPolicy(dp.Budget{Epsilon: eps, Delta: 1e-5})
	pol.MinNoiseMultiplier, pol.MaxClip = 0, 20
	o := client.Options{Addr: f.addr, Creds: f.creds(t, name), Policy: pol, Identity: id,
		Dir: filepath.Join(f.dir, "clients", name), LedgerDir: filepath.Join(f.dir, "clients", name, "ledgers"), DataSet: name,
		Members: []string{"alice", "bob"}, Trainer: tr,
		DPHE: client.DPHEOptions{KeyGenName: "keygen", AllowInsecureTestKeySize: true}}
	if sitOut {
		o.SitOut = func(*fedpb.RoundConfig) bool { return true }
	}
	c, err := client.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// run runs the clients until the run ends.
func runClients(t *testing.T, cs map[string]*client.Client) map[string]error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var mu sync.Mutex
	errs := map[string]error{}
	var wg sync.WaitGroup
	for name, c := range cs {
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

// dpheCharges counts the ledger's history entries of DPHE rounds.
func dpheCharges(t *testing.T, c *client.Client) []string {
	t.Helper()
	d, err := dp.OpenLedgerDir(filepath.Dir(c.LedgerPath()))
	if err != nil {
		t.Fatal(err)
	}
	sets, err := d.List()
	if err != nil || len(sets) != 1 {
		t.Fatalf("ledger sets %v: %v", sets, err)
	}
	l, err := d.Read(sets[0])
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, h := range l.History() {
		if strings.Contains(h.Note, "DPHE round") {
			out = append(out, h.Note)
		}
	}
	return out
}

// TestDPHERoundsOverMutualTLS runs two DPHE rounds of four clients over
// real gRPC with mutual TLS, with the key generator as its own server:
// each round is done, the decrypted sum is the clients' updates' sum
// within dpheTol, each client's ledger holds exactly one DPHE charge per
// round, and, playing the adversary with every byte the coordinator
// received and its state files, no client's update appears in either.
func TestDPHERoundsOverMutualTLS(t *testing.T) {
	f := startDPHE(t, 2)
	cs := map[string]*client.Client{}
	for i, name := range secNames {
		cs[name] = f.dpheClient(t, i, 1e300, false)
	}
	for name, err := range runClients(t, cs) {
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := <-f.done; err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= 2; n++ {
		if st := roundState(t, f.state, n); st != "done" {
			t.Fatalf("round %d is %q, want done", n, st)
		}
		got := f.sums[uint64(n)]
		if len(got) != 6 {
			t.Fatalf("round %d: decrypted sum of %d values, want 6", n, len(got))
		}
		for j := range got {
			var want float64
			for i := range secNames {
				want += float64(vecTrainer{base: float32(i + 1)}.values(6)[j])
			}
			if math.Abs(got[j]-want) > dpheTol {
				t.Fatalf("round %d: sum value %d is %g, want %g ± %g", n, j, got[j], want, dpheTol)
			}
		}
	}
	for name, c := range cs {
		if got := dpheCharges(t, c); !slices.Equal(got, []string{"veil fed client: DPHE round 1", "veil fed client: DPHE round 2"}) {
			t.Errorf("%s's ledger holds DPHE charges %q, want one per round", name, got)
		}
	}
	var needles [][]byte
	for i := range secNames {
		needles = append(needles, updateNeedles(vecTrainer{base: float32(i + 1)}.values(6), 1)...)
	}
	all := bytes.Join(f.rec.recv, nil)
	contributions := 0
	for _, b := range f.rec.recv {
		m := &fedpb.SecAggMessage{}
		if proto.Unmarshal(b, m) == nil && len(m.GetDphe().GetMessages()) > 0 {
			contributions++
		}
	}
	if contributions != 8 {
		t.Fatalf("the coordinator received %d DPHE contributions, want 8", contributions)
	}
	for _, nd := range needles {
		if bytes.Contains(all, nd) {
			t.Fatal("a client's update is in what the coordinator received")
		}
	}
	if found := findUpdate(t, f.state, needles); len(found) > 0 {
		t.Fatalf("a client's update is in %v", found)
	}
}

// TestDPHETooFewClientsDecryptNothing: two of four clients sit the round
// out, so at the deadline only two contributions are in: the round
// fails, nothing is decrypted and the model is unchanged.
func TestDPHETooFewClientsDecryptNothing(t *testing.T) {
	f := startDPHE(t, 1)
	w0, _ := f.co.Model()
	cs := map[string]*client.Client{}
	for i, name := range secNames {
		cs[name] = f.dpheClient(t, i, 1e300, i >= 2)
	}
	runClients(t, cs)
	if err := <-f.done; err != nil {
		t.Fatal(err)
	}
	if st := roundState(t, f.state, 1); st != "failed" {
		t.Fatalf("round 1 is %q, want failed", st)
	}
	if len(f.sums) != 0 {
		t.Fatal("a sum of two clients was decrypted")
	}
	if w, _ := f.co.Model(); !slices.Equal(w[0].Values, w0[0].Values) {
		t.Fatal("the model changed")
	}
}

// TestDPHEClientRefusesPastBudget: a client whose budget the release
// would exceed refuses before anything is sent, its ledger file byte for
// byte as it was; the other three complete the round.
func TestDPHEClientRefusesPastBudget(t *testing.T) {
	f := startDPHE(t, 1)
	cs := map[string]*client.Client{}
	for i, name := range secNames {
		eps := 1e300
		if i == 3 {
			eps = 8
		}
		cs[name] = f.dpheClient(t, i, eps, false)
	}
	before, err := os.ReadFile(cs["client-4"].LedgerPath())
	if err != nil {
		t.Fatal(err)
	}
	errs := runClients(t, cs)
	if err := <-f.done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errs["client-4"].Error(), "budget") {
		t.Fatalf("client-4: %v, want a refusal over its budget", errs["client-4"])
	}
	after, err := os.ReadFile(cs["client-4"].LedgerPath())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Fatal("the refused client's ledger changed")
	}
	if st := roundState(t, f.state, 1); st != "done" {
		t.Fatalf("round 1 is %q, want done with three clients", st)
	}
	if got := len(f.sums[1]); got != 6 {
		t.Fatalf("no sum of the three clients (%d values)", got)
	}
	contributions := 0
	for _, b := range f.rec.recv {
		m := &fedpb.SecAggMessage{}
		if proto.Unmarshal(b, m) == nil && len(m.GetDphe().GetMessages()) > 0 {
			contributions++
		}
	}
	if contributions != 3 {
		t.Fatalf("the coordinator received %d contributions, want 3 (the refused client sent none)", contributions)
	}
}

// TestDPHEClientRefusesCoordinatorSettings plays a coordinator that names
// itself as the key generator (so that it could hand out keys and decrypt
// single contributions), or proposes less noise or a larger clip than the
// clients' policies allow: every client refuses the round with the
// reason, its ledger is unchanged, nothing is sent or decrypted.
func TestDPHEClientRefusesCoordinatorSettings(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*coord.DPHEOptions)
		want string
	}{
		{"coordinator as key generator", func(o *coord.DPHEOptions) { o.Name = "coordinator" }, `names key generator "coordinator"; this client trusts only "keygen"`},
		{"clip above the policy", func(o *coord.DPHEOptions) { o.Clip = 40 }, "asks for clip C = 40"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startDPHEWith(t, 1, tc.set)
			cs := map[string]*client.Client{}
			before := map[string][]byte{}
			for i, name := range secNames {
				cs[name] = f.dpheClient(t, i, 1e300, false)
				b, err := os.ReadFile(cs[name].LedgerPath())
				if err != nil {
					t.Fatal(err)
				}
				before[name] = b
			}
			for name, err := range runClients(t, cs) {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("%s: %v, want a refusal %q", name, err, tc.want)
				}
				after, rerr := os.ReadFile(cs[name].LedgerPath())
				if rerr != nil {
					t.Fatal(rerr)
				}
				if !bytes.Equal(after, before[name]) {
					t.Errorf("%s's ledger changed", name)
				}
			}
			f.stop()
			for _, b := range f.rec.recv {
				m := &fedpb.SecAggMessage{}
				if proto.Unmarshal(b, m) == nil && m.GetDphe() != nil {
					t.Fatal("a client sent a contribution")
				}
			}
			if len(f.sums) != 0 {
				t.Fatal("a sum was decrypted")
			}
		})
	}
}

// TestDPHERoundSurvivesARestart stops the coordinator with three
// clients' contributions stored and the fourth client still training, and
// starts a new one on the same state file and address: it rebuilds the
// round from the key generator's keys, replays the stored contributions,
// takes the fourth, and the key generator decrypts one sum, the four
// updates' within dpheTol; each client is counted once, charged once,
// and the stored contributions are gone.
func TestDPHERoundSurvivesARestart(t *testing.T) {
	f := startDPHE(t, 1)
	cs, held, errs := f.heldRun(t, 1e300)
	f.stop()
	h2 := startHarnessOpts(t, f.o, f.dir, f.addr, nil, f.rec.options())
	close(held.release)
	for name, err := range <-errs {
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := <-h2.done; err != nil {
		t.Fatal(err)
	}
	st, updates, reason, _ := roundRow(t, f.state, "client-1")
	if st != "done" || updates != 4 {
		t.Fatalf("round 1: %s with %d updates (%s)", st, updates, reason)
	}
	if len(f.sums) != 1 || len(f.sums[1]) != 6 {
		t.Fatalf("%d sums decrypted, want one of round 1", len(f.sums))
	}
	for j, v := range f.sums[1] {
		var want float64
		for i := range secNames {
			want += float64(vecTrainer{base: float32(i + 1)}.values(6)[j])
		}
		if math.Abs(v-want) > dpheTol {
			t.Fatalf("sum value %d is %g, want %g ± %g", j, v, want, dpheTol)
		}
	}
	for _, c := range readStatus(t, f.state).Clients {
		if c.Updates != 1 {
			t.Errorf("client %s counted %d times", c.Id, c.Updates)
		}
	}
	for name, c := range cs {
		if got := dpheCharges(t, c); len(got) != 1 {
			t.Errorf("%s's ledger holds %d DPHE charges, want 1", name, len(got))
		}
	}
	if n := stored(t, f.state, "dphe"); n != 0 {
		t.Fatalf("%d stored contributions left after the round", n)
	}
}

// TestDPHEHalfRefusedContributionLeavesNoTrace plays a client that sends
// a contribution whose last message is a replay of its first: the
// coordinator refuses it after its first messages went into the
// aggregator, so it must rebuild the aggregator from the stored
// contributions. The same client's correct contribution is then
// accepted (it would be refused as a replay had the first messages
// stayed), and the round's sum is the four clients' updates'.
func TestDPHEHalfRefusedContributionLeavesNoTrace(t *testing.T) {
	f := startDPHE(t, 1)
	cs := map[string]*client.Client{}
	for i, name := range secNames[:3] {
		cs[name] = f.dpheClient(t, i, 1e300, false)
	}
	// client-4 is available and selected but sends nothing itself.
	sitter, tasks, id4 := f.sitter(t, 1e300)
	cs["client-4"] = sitter
	errs := make(chan map[string]error, 1)
	go func() { errs <- runClients(t, cs) }()
	cfg := (<-tasks).GetDphe()
	waitStored(t, f.state, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	msgs := f.contributeRaw(ctx, t, id4, cfg, (vecTrainer{base: 4}).values(6))
	send := func(msgs [][]byte) *fedpb.SecAggAck { return f.sendRaw(ctx, t, "client-4", msgs) }
	if a := send(append(slices.Clone(msgs), msgs[0])); a.GetAccepted() || !strings.Contains(a.GetReason(), "already received") {
		t.Fatalf("a contribution ending in a replayed message: accepted %v (%s)", a.GetAccepted(), a.GetReason())
	}
	if a := send(msgs); !a.GetAccepted() {
		t.Fatalf("the correct contribution after a refused one: %s", a.GetReason())
	}
	<-errs
	if err := <-f.done; err != nil {
		t.Fatal(err)
	}
	if st := roundState(t, f.state, 1); st != "done" {
		t.Fatalf("round 1 is %q, want done", st)
	}
	for j, v := range f.sums[1] {
		var want float64
		for i := range secNames {
			want += float64(vecTrainer{base: float32(i + 1)}.values(6)[j])
		}
		if math.Abs(v-want) > dpheTol {
			t.Fatalf("sum value %d is %g, want %g ± %g", j, v, want, dpheTol)
		}
	}
	if len(f.sums[1]) != 6 {
		t.Fatal("no sum")
	}
}
