package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/nn/checkpoint"
	"github.com/veil-privacy/veil/nn/train"
)

// headWithRecord writes smallHead's weights with the given record (as
// veil train would write after training on Data).
func headWithRecord(t *testing.T, path string, h checkpoint.Header) *checkpoint.Checkpoint {
	t.Helper()
	ck := smallHead(t, path)
	model, params := ck.Header.Model, ck.Header.Params
	ck.Header = h
	ck.Header.Model, ck.Header.Params, ck.Header.Optimizer = model, params, "adam"
	ck.State.Privacy, ck.State.Step = h.Privacy, h.Step
	if err := ck.Save(path); err != nil {
		t.Fatal(err)
	}
	return ck
}

// federation is one run of veil fed coordinator (in-process, real gRPC
// over TLS on loopback) with clients of the fixed trainer (veil fed
// client, in-process).
type federation struct {
	dir, pki, state, out string
	coordErr             error
	summary              string // the coordinator's stdout
	stderr               string
	clients              []string // the clients' stderr
}

// runFed runs the coordinator with args (besides state, PKI and address)
// for one round of n clients; the coordinator's error is returned in the
// result, not fatal.
func runFed(t *testing.T, n int, initPath string, args ...string) *federation {
	t.Helper()
	dir := t.TempDir()
	f := &federation{dir: dir, pki: filepath.Join(dir, "pki"), state: filepath.Join(dir, "state.db"), out: filepath.Join(dir, "out.ckpt")}
	mustVeil(t, "fed", "certs", "init", "--pki", f.pki)
	mustVeil(t, "fed", "certs", "issue", "coordinator", "--role", "coordinator", "--pki", f.pki)
	for i := range n {
		mustVeil(t, "fed", "certs", "issue", fmt.Sprintf("client-%d", i+1), "--pki", f.pki)
	}
	f.run(t, n, initPath, args...)
	return f
}

// run runs the coordinator again on f's state and certificates (a
// restart), writing f.out anew.
func (f *federation) run(t *testing.T, n int, initPath string, args ...string) {
	t.Helper()
	dir := f.dir
	os.Remove(f.out)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var cout, cerr bytes.Buffer
	ce := &env{stdout: &cout, stderr: &cerr}
	cmd, cf := coordinatorCmd(ce)
	flags := append([]string{"--state", f.state, "--pki", f.pki, "--listen", addr, "--init", initPath, "--out", f.out,
		"--rounds", "1", "--min-available", fmt.Sprint(n), "--min-updates", fmt.Sprint(n), "--deadline", "2m", "--local-steps", "5",
		"--noise-multiplier", "1", "--linger", "2s", "--log-level", "error", "--json",
		// Rounds of one or two clients cannot be masked (masking, the
		// default under --dp, needs three): these tests are about the
		// model's privacy record, so they ask for plaintext rounds.
		"--secagg", "off"}, args...)
	if err := cmd.ParseFlags(flags); err != nil {
		t.Fatal(err)
	}
	// Safety nets only: a loaded machine is slow.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	coordDone := make(chan error, 1)
	go func() { coordDone <- runFedCoordinator(ctx, ce, cf) }()
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	var wg sync.WaitGroup
	f.clients = make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("client-%d", i+1)
			var out, errs bytes.Buffer
			ke := &env{stdout: &out, stderr: &errs}
			kcmd, kf := clientCmd(ke)
			if err := kcmd.ParseFlags([]string{"--coordinator", addr, "--pki", f.pki, "--name", name, "--budget-epsilon", "50",
				"--dir", filepath.Join(dir, name), "--trainer", "fixed", "--retry-for", "2m", "--json",
				"--allow-no-dp"}); err != nil { // the clients join the --dp=false runs below too
				f.clients[i] = err.Error()
				return
			}
			_ = runFedClient(cctx, ke, kf)
			f.clients[i] = errs.String()
		}()
	}
	select {
	case f.coordErr = <-coordDone:
	case <-ctx.Done():
		t.Fatal("the coordinator did not finish")
	}
	ccancel() // clients still waiting for a coordinator that refused to start
	wg.Wait()
	f.summary, f.stderr = cout.String(), cerr.String()
}

// oneRoundEpsilon is the ε (δ 1e-5) of k rounds of the fixed trainer's
// mechanism on a model of dim values, by one ledger charged k times.
func oneRoundEpsilon(t *testing.T, dim, k int) float64 {
	t.Helper()
	ev, err := client.Event(&fedpb.DPParams{NoiseMultiplier: 1, Clip: 1, SamplingRate: 0.1, Steps: 5, Delta: 1e-5}, dim)
	if err != nil {
		t.Fatal(err)
	}
	l, _ := dp.NewLedger(dp.LedgerOptions{})
	_ = l.SetBudget("x", dp.Budget{Epsilon: 1e9, Delta: 1e-5})
	var s dp.Spent
	for range k {
		if s, err = l.Charge("x", ev); err != nil {
			t.Fatal(err)
		}
	}
	return s.Epsilon
}

// The attack of the audit: a checkpoint trained without DP on private
// data, given as the initial model of a DP federation with --out. Before,
// the coordinator ran and wrote a model whose record read as private (the
// federation's ε, no non-private steps). Now it refuses to start, says
// why, and writes nothing: no model, no state.
func TestFedCoordinatorRefusesNonPrivateInit(t *testing.T) {
	dir := t.TempDir()
	nonDP := filepath.Join(dir, "nonDP.ckpt")
	headWithRecord(t, nonDP, checkpoint.Header{Data: "lfw", Step: 400, Privacy: train.Privacy{NonPrivateSteps: 400}})
	f := runFed(t, 1, nonDP, "--dp")
	if f.coordErr == nil {
		ck, err := checkpoint.Load(f.out)
		if err != nil {
			t.Fatalf("the coordinator ran from a non-DP init under --dp and wrote no model: %v", err)
		}
		if ck.Header.Privacy.Bounded() {
			t.Fatalf("laundered: the model of a DP federation from a non-DP init reads as private: %+v", ck.Header.Privacy)
		}
		t.Fatalf("the coordinator ran from a non-DP init under --dp (its model is marked non-private: %+v)", ck.Header.Privacy)
	}
	msg := f.coordErr.Error()
	if !strings.Contains(msg, "--init") || !strings.Contains(msg, "400 optimiser steps without DP-SGD") || !strings.Contains(msg, "init-model") {
		t.Errorf("refusal %q does not say why and what to do", msg)
	}
	for _, p := range []string{f.out, f.state} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s was written by a refused run", filepath.Base(p))
		}
	}
	// The same through the command line, with its exit status.
	code, _, errs := runVeil(t, "", "fed", "coordinator", "--dp", "--init", nonDP, "--out", filepath.Join(dir, "out.ckpt"),
		"--state", filepath.Join(dir, "s.db"), "--pki", f.pki, "--listen", "127.0.0.1:0")
	if code == 0 || !strings.Contains(errs, "without DP-SGD") {
		t.Errorf("veil fed coordinator: exit %d, %q", code, errs)
	}
	// A checkpoint with no record at all is refused too; without DP the
	// same init is accepted (and its model marked non-private: below).
	none := filepath.Join(dir, "none.ckpt")
	headWithRecord(t, none, checkpoint.Header{Data: "lfw"})
	code, _, errs = runVeil(t, "", "fed", "coordinator", "--init", none, "--state", filepath.Join(dir, "s.db"), "--pki", f.pki, "--listen", "127.0.0.1:0")
	if code == 0 || !strings.Contains(errs, "not marked public") {
		t.Errorf("no record: exit %d, %q", code, errs)
	}
}

// Without DP the federation may start from a non-DP checkpoint; its
// steps survive into the model's record, which never reads as private.
func TestFedNonPrivateInitMarkerSurvives(t *testing.T) {
	nonDP := filepath.Join(t.TempDir(), "nonDP.ckpt")
	headWithRecord(t, nonDP, checkpoint.Header{Data: "lfw", Step: 400, Privacy: train.Privacy{NonPrivateSteps: 400}})
	f := runFed(t, 1, nonDP, "--dp=false")
	if f.coordErr != nil {
		t.Fatalf("coordinator: %v\n%s\n%v", f.coordErr, f.stderr, f.clients)
	}
	ck, err := checkpoint.Load(f.out)
	if err != nil {
		t.Fatal(err)
	}
	p := ck.Header.Privacy
	if p.Bounded() || p.NonPrivateSteps != 401 || ck.Header.Federation == nil || ck.Header.Federation.PlainRounds != 1 || ck.Header.Federation.Init == nil ||
		ck.Header.Federation.Init.Privacy.NonPrivateSteps != 400 || !strings.Contains(ck.Header.Federation.Init.Note, "no privacy guarantee") {
		t.Fatalf("record %+v, federation %+v", p, ck.Header.Federation)
	}
}

// A DP init trained on another data set: the model's record adds its ε
// to the federation's (per person, at the sum of the δ), keeps the init's
// record and says whom each ε protects; the coordinator's --json and veil
// fed status state the one-client assumption and the ε of a person in k
// clients' data, which matches one ledger charged every round of those k
// clients (not k times ε).
func TestFedDPInitComposedAndKClients(t *testing.T) {
	dpInit := filepath.Join(t.TempDir(), "dp.ckpt")
	ck := headWithRecord(t, dpInit, checkpoint.Header{Data: "lfw", Step: 300,
		Privacy: train.Privacy{Unit: train.UnitIdentity, NoiseMultiplier: 1.1, Clip: 1, SamplingRate: 0.01, Steps: 300, Delta: 1e-6, Epsilon: 1.25}})
	dim := 0
	for _, v := range ck.Values {
		dim += len(v)
	}
	f := runFed(t, 2, dpInit, "--dp")
	if f.coordErr != nil {
		t.Fatalf("coordinator: %v\n%s\n%v", f.coordErr, f.stderr, f.clients)
	}
	one, two := oneRoundEpsilon(t, dim, 1), oneRoundEpsilon(t, dim, 2)
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

	out, err := checkpoint.Load(f.out)
	if err != nil {
		t.Fatal(err)
	}
	p, fed := out.Header.Privacy, out.Header.Federation
	if !near(p.Epsilon, one+1.25) || !near(p.Delta, 1e-5+1e-6) || p.Unit != train.UnitIdentity || !p.Bounded() {
		t.Fatalf("record %+v: want ε = %g + 1.25 at δ = 1.1e-5 per identity", p, one)
	}
	if fed == nil || fed.Init == nil || fed.Init.Privacy.Epsilon != 1.25 || fed.Init.Data != "lfw" ||
		!strings.Contains(fed.Init.Note, "different data set") {
		t.Fatalf("federation record %+v", fed)
	}
	if len(fed.KClients) != 2 || !near(fed.KClients[0].Epsilon, one) || !near(fed.KClients[1].Epsilon, two) ||
		!near(fed.KClients[1].WithInit, two+1.25) || !(two < 2*one) {
		t.Fatalf("k-clients %+v, want ε₁ = %g, ε₂ = %g", fed.KClients, one, two)
	}
	var sum coordinatorSummary
	if err := json.Unmarshal([]byte(f.summary), &sum); err != nil {
		t.Fatal(err)
	}
	if sum.Privacy == nil || !strings.Contains(sum.Privacy.Assumption, "one client alone") || len(sum.Privacy.KClients) != 2 ||
		!near(sum.Privacy.KClients[1].Epsilon, two) || sum.Privacy.Init == nil {
		t.Fatalf("coordinator summary's privacy %+v", sum.Privacy)
	}
	var st fedStatus
	if err := json.Unmarshal([]byte(mustVeil(t, "fed", "status", "--state", f.state, "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Privacy == nil || !strings.Contains(st.Privacy.Assumption, "k clients") || len(st.Privacy.KClients) != 2 ||
		!near(st.Privacy.KClients[1].Epsilon, two) || !near(st.Privacy.EpsilonOneClient, one) {
		t.Fatalf("status privacy %+v", st.Privacy)
	}
	human := mustVeil(t, "fed", "status", "--state", f.state)
	t.Logf("veil fed status:\n%s\nthe model's record: %+v\ninit: %s", human, p, fed.Init.Note)
	if !strings.Contains(human, "one client alone") || !strings.Contains(human, "in 2 clients' data: ε = ") {
		t.Errorf("status text does not state the assumption and the k-clients figure:\n%s", human)
	}
	// The init is the state's: running again with another checkpoint as
	// --init is refused (the record would describe other weights).
	other := filepath.Join(t.TempDir(), "other.ckpt")
	headWithRecord(t, other, checkpoint.Header{Public: true})
	c2, _ := checkpoint.Load(other)
	c2.Values[0][0] += 1
	if err := c2.Save(other); err != nil {
		t.Fatal(err)
	}
	code, _, errs := runVeil(t, "", "fed", "coordinator", "--init", other, "--out", filepath.Join(t.TempDir(), "o.ckpt"),
		"--state", f.state, "--pki", f.pki, "--listen", "127.0.0.1:0")
	if code == 0 || !strings.Contains(errs, "started from") {
		t.Errorf("another --init on an existing state: exit %d, %q", code, errs)
	}
}

// A federation run without DP, then restarted with --dp (and a public
// --init, the one the state started from) to write its model: the rounds
// the state records without DP keep the model marked non-private, whatever
// the last run's flags say.
func TestFedRestartWithDPKeepsPlainRounds(t *testing.T) {
	init := filepath.Join(t.TempDir(), "init.ckpt")
	smallHead(t, init)
	f := runFed(t, 1, init, "--dp=false")
	if f.coordErr != nil {
		t.Fatalf("coordinator: %v\n%s\n%v", f.coordErr, f.stderr, f.clients)
	}
	f.run(t, 1, init, "--dp", "--rounds", "2")
	if f.coordErr != nil {
		t.Fatalf("restarted coordinator: %v\n%s\n%v", f.coordErr, f.stderr, f.clients)
	}
	ck, err := checkpoint.Load(f.out)
	if err != nil {
		t.Fatal(err)
	}
	p, fed := ck.Header.Privacy, ck.Header.Federation
	if p.Bounded() || p.NonPrivateSteps != 1 || fed == nil || fed.PlainRounds != 1 || fed.DPRounds != 1 ||
		!strings.Contains(fed.Assumption, "without DP-SGD") || !(p.Epsilon > 0) {
		t.Fatalf("record %+v, federation %+v: want one plain round counted and the model marked non-private", p, fed)
	}
}
