package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/nn/arch"
	"github.com/veil-privacy/veil/nn/checkpoint"
	"github.com/veil-privacy/veil/nn/train"
	"github.com/veil-privacy/veil/nn/trained"
)

// proc is a veil process started by the test.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stdout bytes.Buffer
	stderr *os.File
	done   chan struct{}
	err    error
}

type procs struct {
	t   *testing.T
	bin string
	dir string
	mu  sync.Mutex
	all []*proc
}

func (ps *procs) start(name string, args ...string) *proc {
	ps.t.Helper()
	p := &proc{name: name, done: make(chan struct{})}
	var err error
	if p.stderr, err = os.Create(filepath.Join(ps.dir, name+".log")); err != nil {
		ps.t.Fatal(err)
	}
	p.cmd = exec.Command(ps.bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, p.stderr
	if err := p.cmd.Start(); err != nil {
		ps.t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); p.stderr.Close(); close(p.done) }()
	ps.mu.Lock()
	ps.all = append(ps.all, p)
	ps.mu.Unlock()
	return p
}

// wait waits for p to exit within d and returns its error.
func (ps *procs) wait(p *proc, d time.Duration) error {
	ps.t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(d):
		ps.t.Fatalf("%s did not exit within %s; its log:\n%s", p.name, d, ps.log(p))
		return nil
	}
}

func (ps *procs) log(p *proc) string {
	b, _ := os.ReadFile(filepath.Join(ps.dir, p.name+".log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// killAll kills every process the test started that is still running.
func (ps *procs) killAll() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, p := range ps.all {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
}

// run runs veil to completion (bounded) and returns its stdout.
func (ps *procs) run(args ...string) []byte {
	ps.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	out, err := exec.CommandContext(ctx, ps.bin, args...).Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		ps.t.Fatalf("veil %v: %v\n%s", args, err, msg)
	}
	return out
}

// crashFed is a federation of three veil fed client processes and a
// coordinator process: its authority, initial model and addresses.
type crashFed struct {
	ps                                     *procs
	names                                  []string
	pkiDir, initPath, outPath, state, addr string
	initCk                                 *checkpoint.Checkpoint
}

// crashDeltas are the fixed updates of the clients of a crashFed.
var crashDeltas = []float64{0.01, 0.02, 0.06}

// newCrashFed makes the authority (the coordinator's and three clients'
// certificates) and the initial model in ps.dir.
func newCrashFed(ps *procs) *crashFed {
	ps.t.Helper()
	f := &crashFed{ps: ps, names: []string{"client-1", "client-2", "client-3"}, pkiDir: filepath.Join(ps.dir, "pki"),
		initPath: filepath.Join(ps.dir, "init.ckpt"), outPath: filepath.Join(ps.dir, "final.ckpt"), state: filepath.Join(ps.dir, "coordinator.db"),
		addr: freePort(ps.t)}
	ps.run("fed", "certs", "init", "--pki", f.pkiDir)
	ps.run("fed", "certs", "issue", "coordinator", "--role", "coordinator", "--pki", f.pkiDir)
	for _, n := range f.names {
		ps.run("fed", "certs", "issue", n, "--pki", f.pkiDir)
	}
	f.initCk = headCheckpoint(ps.t, f.initPath)
	return f
}

// coordArgs are the coordinator's arguments for rounds rounds of all three
// clients, then extra.
func (f *crashFed) coordArgs(rounds int, extra ...string) []string {
	return append([]string{"fed", "coordinator", "--state", f.state, "--pki", f.pkiDir, "--listen", f.addr, "--init", f.initPath, "--out", f.outPath,
		"--rounds", strconv.Itoa(rounds), "--min-available", "3", "--min-updates", "3", "--fraction", "1", "--deadline", patience.String(),
		"--local-steps", "5", "--clip", "1", "--delta", "1e-5", "--noise-multiplier", "1", "--max-update-norm", "100",
		"--server-lr", "1", "--linger", patience.String(), "--json"}, extra...)
}

// startClients starts the three clients with the fixed trainer, client i
// training for i × delay, with extra arguments.
func (f *crashFed) startClients(delay time.Duration, extra ...string) []*proc {
	clients := make([]*proc, len(f.names))
	for i, n := range f.names {
		clients[i] = f.ps.start(n, append([]string{"fed", "client", "--coordinator", f.addr, "--pki", f.pkiDir, "--name", n, "--budget-epsilon", "100",
			"--budget-delta", "1e-5", "--dir", filepath.Join(f.ps.dir, n), "--ledger-dir", filepath.Join(f.ps.dir, n+"-ledgers"), "--trainer", "fixed",
			"--fixed-delta", fmt.Sprint(crashDeltas[i]), "--train-delay", fmt.Sprint(time.Duration(i) * delay), "--retry-for", patience.String(), "--json"},
			extra...)...)
	}
	return clients
}

// killInOpenRound polls veil fed status --json until a round of the
// coordinator co (state file state) is open with at least one accepted
// update and fewer than of, then kills co with SIGKILL and returns the
// round.
func (ps *procs) killInOpenRound(co *proc, state string, of uint64) uint64 {
	ps.t.Helper()
	var killed uint64
	ps.killWhen(co, state, func(st statusJSON) bool {
		for _, r := range st.Rounds {
			if r.State == "open" && r.Updates >= 1 && r.Updates < of {
				ps.t.Logf("killing the coordinator in round %d with %d of %d updates accepted", r.Round, r.Updates, of)
				killed = r.Round
				return true
			}
		}
		return false
	})
	return killed
}

// killWhen polls veil fed status --json of the coordinator co (state file
// state) until kill says so, then kills co with SIGKILL.
func (ps *procs) killWhen(co *proc, state string, kill func(statusJSON) bool) {
	ps.t.Helper()
	for deadline := time.Now().Add(patience); ; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			ps.t.Fatalf("the coordinator's state was never as the kill waits for; coordinator log:\n%s", ps.log(co))
		}
		select {
		case <-co.done:
			ps.t.Fatalf("the coordinator exited before the kill: %v\n%s", co.err, ps.log(co))
		default:
		}
		if _, err := os.Stat(state); err != nil {
			continue
		}
		var st statusJSON
		if out, err := exec.Command(ps.bin, "fed", "status", "--state", state, "--json").Output(); err != nil || json.Unmarshal(out, &st) != nil {
			continue
		}
		if kill(st) {
			if err := syscall.Kill(co.cmd.Process.Pid, syscall.SIGKILL); err != nil {
				ps.t.Fatal(err)
			}
			return
		}
	}
}

type statusJSON struct {
	Round   uint64 `json:"round"`
	Clients []struct {
		ID      string  `json:"id"`
		Epsilon float64 `json:"epsilon"`
		Budget  float64 `json:"budget"`
		Updates uint64  `json:"updates"`
	} `json:"clients"`
	Rounds []struct {
		Round   uint64 `json:"round"`
		State   string `json:"state"`
		Updates uint64 `json:"updates"`
	} `json:"rounds"`
}

// patience bounds every wait of the tests that run real processes. The
// waits are safety nets, not part of what the tests check: under load (two
// busy loops, other work on the machine) these tests took 2 to 11 times
// their unloaded time, and nothing in them depends on a wait running out.
const patience = 3 * time.Minute

// veilBin is the binary TestMain builds for the tests that run real
// processes ("" with -short).
var veilBin string

func TestMain(m *testing.M) {
	flag.Parse()
	// The library tests create libraries with cheap Argon2id costs (and
	// the processes they start inherit this): allow them explicitly.
	os.Setenv("VEIL_TEST_SETTINGS", "1")
	if testing.Short() {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "veil-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	veilBin = filepath.Join(dir, "veil")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", veilBin,
		"-ldflags", "-X github.com/veil-privacy/veil/cmd/veil/cli.buildCommit="+testCommit, ".")
	cmd.Env = append(os.Environ(), "GOEXPERIMENT=simd", "GOFLAGS=-buildvcs=false")
	out, err := cmd.CombinedOutput()
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building veil: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func buildVeil(t *testing.T) string {
	t.Helper()
	if veilBin == "" {
		t.Skip("builds the binary and runs real processes (not with -short)")
	}
	return veilBin
}

// headCheckpoint writes a small embedding head's initial checkpoint and
// returns it.
func headCheckpoint(t *testing.T, path string) *checkpoint.Checkpoint {
	t.Helper()
	m, err := arch.New(arch.Config{Kind: "head", In: 16, Hidden: 8})
	if err != nil {
		t.Fatal(err)
	}
	m.Params().Init(3)
	st := train.State{}
	for i := 0; i < m.Params().Len(); i++ {
		st.M = append(st.M, make([]float32, len(m.Params().Values(i))))
	}
	// Freshly initialised, it has seen no data: public, as veil fed
	// init-model marks its models (a DP federation refuses other inits).
	ck := checkpoint.FromTrainer(checkpoint.Header{Model: m.Config(), Optimizer: "adam", Public: true}, m.Params(), st)
	if err := ck.Save(path); err != nil {
		t.Fatal(err)
	}
	return ck
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestCoordinatorSurvivesSIGKILL runs the built veil binary as a
// coordinator and three clients, kills the coordinator with SIGKILL while
// a round is open with at least one accepted update, restarts it on the
// same state file and port, and checks that the run finishes every round
// with each round and each update counted once, and that every ledger (the
// clients' on disk, the coordinator's) holds exactly the expected charges.
func TestCoordinatorSurvivesSIGKILL(t *testing.T) {
	bin := buildVeil(t)
	start := time.Now()
	dir := t.TempDir()
	ps := &procs{t: t, bin: bin, dir: dir}
	t.Cleanup(ps.killAll)
	f := newCrashFed(ps)
	names, initCk, state, outPath := f.names, f.initCk, f.state, f.outPath
	const rounds = 3
	// Plaintext rounds (TestMaskingCoordinatorSurvivesSIGKILL is the
	// masked variant).
	coordArgs := f.coordArgs(rounds, "--secagg", "off")
	co := ps.start("coordinator-1", coordArgs...)
	// Each client trains for a different time, so a round stays open with
	// some updates accepted and others still coming.
	clients := f.startClients(time.Second)
	// Kill it while a round is open with some but not all updates.
	killedIn := ps.killInOpenRound(co, state, 3)
	if err := ps.wait(co, patience); err == nil {
		t.Fatal("the killed coordinator exited 0")
	}
	// Stay down longer than any client trains, so that the clients still
	// training when the coordinator died fail to send their updates and
	// must send them again to the new process; then restart on the same
	// state file and port.
	time.Sleep(2500 * time.Millisecond)
	co2 := ps.start("coordinator-2", coordArgs...)
	for i, c := range clients {
		if err := ps.wait(c, patience); err != nil {
			t.Fatalf("%s: %v\n%s", names[i], err, ps.log(c))
		}
	}
	if err := ps.wait(co2, patience); err != nil {
		t.Fatalf("restarted coordinator: %v\n%s", err, ps.log(co2))
	}

	// The expected charge: three rounds of the fixed trainer's DP-SGD.
	dim := 0
	for _, v := range initCk.Values {
		dim += len(v)
	}
	ev, err := client.Event(&fedpb.DPParams{NoiseMultiplier: 1, Clip: 1, SamplingRate: 0.1, Steps: 5, Delta: 1e-5}, dim)
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := dp.NewLedger(dp.LedgerOptions{})
	_ = ref.SetBudget("x", dp.Budget{Epsilon: 100, Delta: 1e-5})
	var want dp.Spent
	for range rounds {
		if want, err = ref.Charge("x", ev); err != nil {
			t.Fatal(err)
		}
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

	var st statusJSON
	if err := json.Unmarshal(ps.run("fed", "status", "--state", state, "--json"), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Rounds) != rounds {
		t.Fatalf("%d rounds in the log, want %d: %+v", len(st.Rounds), rounds, st.Rounds)
	}
	for i, r := range st.Rounds {
		if r.Round != uint64(i+1) || r.State != "done" || r.Updates != 3 {
			t.Errorf("round %+v, want round %d done with 3 updates", r, i+1)
		}
	}
	if len(st.Clients) != 3 {
		t.Fatalf("clients %+v", st.Clients)
	}
	for _, c := range st.Clients {
		if c.Updates != rounds || !near(c.Epsilon, want.Epsilon) {
			t.Errorf("coordinator's ledger for %s: %d updates, ε %.12g; want %d and %.12g", c.ID, c.Updates, c.Epsilon, rounds, want.Epsilon)
		}
	}
	for i, n := range names {
		// Each client is a machine of its own, with its own ledger folder;
		// the fixed trainer names no people, so every member is charged.
		d, err := dp.OpenLedgerDir(filepath.Join(dir, n+"-ledgers"))
		if err != nil {
			t.Fatal(err)
		}
		l, err := d.Read(dp.DataSet{Name: "lfw", Unit: dp.UnitIdentity})
		if err != nil {
			t.Fatal(err)
		}
		s, err := l.Spent(nil)
		if err != nil {
			t.Fatal(err)
		}
		if !near(s.Epsilon, want.Epsilon) {
			t.Errorf("%s's ledger on disk: ε %.12g, want %.12g", n, s.Epsilon, want.Epsilon)
		}
		var rep struct {
			Outcome      string  `json:"outcome"`
			EpsilonSpent float64 `json:"epsilon_spent"`
		}
		if err := json.Unmarshal(clients[i].stdout.Bytes(), &rep); err != nil || rep.Outcome != "done" || !near(rep.EpsilonSpent, want.Epsilon) {
			t.Errorf("%s's report %q (%v)", n, clients[i].stdout.String(), err)
		}
	}
	// Every update folded once: FedAvg's uniform mean at η = 1 adds (0.01 +
	// 0.02 + 0.06)/3 = 0.03 per round (an update counted twice would
	// change it).
	h, err := trained.LoadHead(outPath, nil)
	if err != nil {
		t.Fatalf("the final model is not a head checkpoint: %v", err)
	}
	_ = h
	final, err := checkpoint.Load(outPath)
	if err != nil {
		t.Fatal(err)
	}
	for i := range initCk.Values {
		for j, v := range initCk.Values[i] {
			if got, want := float64(final.Values[i][j]), float64(v)+rounds*0.03; math.Abs(got-want) > 1e-5 {
				t.Fatalf("final %s[%d] = %g, want %g", initCk.Header.Params[i].Name, j, got, want)
			}
		}
	}
	if final.Header.Public || final.Header.Privacy.Epsilon != st.Clients[0].Epsilon {
		t.Errorf("final checkpoint's record: public %v, ε %g", final.Header.Public, final.Header.Privacy.Epsilon)
	}
	t.Logf("run with a SIGKILL in round %d finished in %s (after the build)", killedIn, time.Since(start).Round(time.Millisecond))
}

// TestCoordinatorStopsGracefullyOnSIGTERM: a coordinator told to stop
// in the middle of its run stops serving (health, metrics), exits with
// status 130 and says how to continue.
func TestCoordinatorStopsGracefullyOnSIGTERM(t *testing.T) {
	bin := buildVeil(t)
	dir := t.TempDir()
	ps := &procs{t: t, bin: bin, dir: dir}
	t.Cleanup(ps.killAll)
	pkiDir := filepath.Join(dir, "pki")
	ps.run("fed", "certs", "init", "--pki", pkiDir)
	ps.run("fed", "certs", "issue", "coordinator", "--role", "coordinator", "--pki", pkiDir)
	initPath := filepath.Join(dir, "init.ckpt")
	headCheckpoint(t, initPath)
	metrics := freePort(t)
	co := ps.start("coordinator", "fed", "coordinator", "--state", filepath.Join(dir, "c.db"), "--pki", pkiDir, "--listen", freePort(t),
		"--metrics-listen", metrics, "--init", initPath, "--rounds", "2")
	up := false
	for deadline := time.Now().Add(patience); !up && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get("http://" + metrics + "/healthz"); err == nil {
			resp.Body.Close()
			up = resp.StatusCode == http.StatusOK
		}
	}
	if !up {
		t.Fatalf("the coordinator never reported healthy:\n%s", ps.log(co))
	}
	resp, err := http.Get("http://" + metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(body, []byte("veil_fed_updates_refused_total{reason=\"budget\"} 0")) {
		t.Errorf("/metrics lacks the refusal counters:\n%.2000s", body)
	}
	if err := syscall.Kill(co.cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = ps.wait(co, patience)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("exit %v, want status 130", err)
	}
	if log := ps.log(co); !strings.Contains(log, "stopped after 0 of 2 rounds") || !strings.Contains(log, "coordinator stopped") {
		t.Errorf("log:\n%s", log)
	}
	if _, err := http.Get("http://" + metrics + "/healthz"); err == nil {
		t.Error("the metrics endpoint still answers")
	}
}
