package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/local/localtest"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/nn/arch"
	"github.com/veil-privacy/veil/nn/checkpoint"
	"github.com/veil-privacy/veil/nn/train"
	"github.com/veil-privacy/veil/nn/trained"
	"github.com/veil-privacy/veil/training"
)

func mustVeil(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errs := runVeil(t, "", args...)
	if code != 0 {
		t.Fatalf("veil %v: exit %d: %s", args, code, errs)
	}
	return out
}

func TestFedCerts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	var ca certInfo
	if err := json.Unmarshal([]byte(mustVeil(t, "fed", "certs", "init", "--pki", dir, "--name", "test-ca", "--json")), &ca); err != nil {
		t.Fatal(err)
	}
	if ca.Name != "test-ca" || ca.Cert != filepath.Join(dir, "ca.crt") {
		t.Fatalf("authority %+v", ca)
	}
	if code, _, errs := runVeil(t, "", "fed", "certs", "init", "--pki", dir); code == 0 || errs == "" {
		t.Fatal("a second authority in the same folder was made")
	}
	var co certInfo
	if err := json.Unmarshal([]byte(mustVeil(t, "fed", "certs", "issue", "coordinator", "--role", "coordinator", "--host", "fed.example.org",
		"--host", "10.1.2.3", "--pki", dir, "--json")), &co); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(co.Hosts, " "), "fed.example.org") || !strings.Contains(strings.Join(co.Hosts, " "), "10.1.2.3") {
		t.Fatalf("coordinator hosts %v", co.Hosts)
	}
	mustVeil(t, "fed", "certs", "issue", "alice", "--pki", dir)
	for _, bad := range [][]string{
		{"fed", "certs", "issue", "alice", "--pki", dir},                            // exists
		{"fed", "certs", "issue", "bob", "--pki", dir, "--host", "x.org"},           // hosts on a client
		{"fed", "certs", "issue", "../evil", "--pki", dir},                          // not a name
		{"fed", "certs", "issue", "carol", "--pki", dir, "--role", "superuser"},     // role
		{"fed", "certs", "revoke", "nobody", "--pki", dir},                          // unknown
		{"fed", "certs", "issue", "dave", "--pki", filepath.Join(t.TempDir(), "x")}, // no authority
	} {
		if code, _, errs := runVeil(t, "", bad...); code == 0 || errs == "" {
			t.Errorf("veil %v succeeded", bad)
		}
	}
	var rev struct {
		Name    string `json:"name"`
		Revoked bool   `json:"revoked"`
		CRL     string `json:"crl"`
	}
	if err := json.Unmarshal([]byte(mustVeil(t, "fed", "certs", "revoke", "alice", "--pki", dir, "--json")), &rev); err != nil {
		t.Fatal(err)
	}
	if !rev.Revoked || rev.Name != "alice" {
		t.Fatalf("revoke: %+v", rev)
	}
	if _, err := os.Stat(rev.CRL); err != nil {
		t.Fatal(err)
	}
	// The operator's certificate, and the list signed again (an old
	// folder without one gets an empty list).
	var op certInfo
	if err := json.Unmarshal([]byte(mustVeil(t, "fed", "certs", "issue", "ops", "--role", "operator", "--pki", dir, "--json")), &op); err != nil {
		t.Fatal(err)
	}
	if c, err := pki.ReadCert(op.Cert); err != nil || pki.RoleOf(c) != pki.Operator {
		t.Fatalf("--role operator issued %+v (%v), not an operator's certificate", op, err)
	}
	if err := os.Remove(rev.CRL); err != nil {
		t.Fatal(err)
	}
	mustVeil(t, "fed", "certs", "crl", "--pki", dir)
	caCert, err := pki.ReadCert(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if revoked, err := pki.Revoked(dir, caCert); err != nil || len(revoked) != 0 {
		t.Fatalf("after veil fed certs crl in a folder without a list: %v, %v (want an empty list)", revoked, err)
	}
}

func TestFedHelp(t *testing.T) {
	for _, c := range [][]string{{"fed"}, {"fed", "certs"}, {"fed", "certs", "init"}, {"fed", "certs", "issue"}, {"fed", "certs", "revoke"},
		{"fed", "coordinator"}, {"fed", "client"}, {"fed", "status"}} {
		out := mustVeil(t, append(c, "--help")...)
		if len(out) < 100 {
			t.Errorf("veil %v --help: %q", c, out)
		}
	}
	out := mustVeil(t, "fed", "coordinator", "--help")
	if !strings.Contains(out, "0.0.0.0:7443") {
		t.Error("the coordinator's help does not say how to listen on all interfaces")
	}
	if strings.Contains(mustVeil(t, "fed", "client", "--help"), "--trainer") {
		t.Error("the test-only trainer flag is shown")
	}
}

func TestCoordinatorConfigFileAndFlags(t *testing.T) {
	path := filepath.Join(t.TempDir(), "coordinator.json")
	if err := os.WriteFile(path, []byte(`{"rounds": 7, "deadline": "3m", "lr": 0.5, "state": "file.db"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd, f := coordinatorCmd(&env{})
	if err := cmd.ParseFlags([]string{"--config", path, "--rounds", "3", "--state", "flag.db"}); err != nil {
		t.Fatal(err)
	}
	if err := applyConfigFile(cmd.Flags(), f.config, &f.cfg); err != nil {
		t.Fatal(err)
	}
	c := f.cfg
	if c.Rounds != 3 || c.State != "flag.db" || time.Duration(c.Deadline) != 3*time.Minute || c.LR != 0.5 || c.Batch != 32 {
		t.Fatalf("flags over file over defaults: %+v", c)
	}
	if err := os.WriteFile(path, []byte(`{"rounds": 7, "round": 8}`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errs := runVeil(t, "", "fed", "coordinator", "--config", path)
	if code == 0 || !strings.Contains(errs, `unknown key "round"`) {
		t.Fatalf("unknown key: exit %d, %q", code, errs)
	}
}

func TestFedStatusNeedsAStateFile(t *testing.T) {
	code, _, errs := runVeil(t, "", "fed", "status", "--state", filepath.Join(t.TempDir(), "none.db"), "--json")
	if code == 0 || !strings.Contains(errs, "state file") {
		t.Fatalf("exit %d, %q", code, errs)
	}
}

// smallHead writes a small embedding head's checkpoint.
func smallHead(t *testing.T, path string) *checkpoint.Checkpoint {
	t.Helper()
	m, err := arch.New(arch.Config{Kind: "head", In: 8, Hidden: 4})
	if err != nil {
		t.Fatal(err)
	}
	m.Params().Init(5)
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

// TestFedClientStopsAtItsBudget runs the coordinator command in-process
// and a client whose budget covers one round and not two: the client
// trains once, then exits with status 4 and says why, and its ledger, the
// coordinator's and veil fed status agree on one round's charge.
func TestFedClientStopsAtItsBudget(t *testing.T) {
	isolateLedgers(t)
	dir := t.TempDir()
	pkiDir := filepath.Join(dir, "pki")
	mustVeil(t, "fed", "certs", "init", "--pki", pkiDir)
	mustVeil(t, "fed", "certs", "issue", "coordinator", "--role", "coordinator", "--pki", pkiDir)
	mustVeil(t, "fed", "certs", "issue", "client-1", "--pki", pkiDir)
	mustVeil(t, "fed", "certs", "issue", "operator", "--role", "operator", "--pki", pkiDir)
	ck := smallHead(t, filepath.Join(dir, "init.ckpt"))
	dim := 0
	for _, v := range ck.Values {
		dim += len(v)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	state := filepath.Join(dir, "state.db")
	var cout, cerr bytes.Buffer
	ce := &env{stdout: &cout, stderr: &cerr}
	cmd, f := coordinatorCmd(ce)
	if err := cmd.ParseFlags([]string{"--state", state, "--pki", pkiDir, "--listen", addr, "--init", filepath.Join(dir, "init.ckpt"),
		"--rounds", "3", "--min-available", "1", "--min-updates", "1", "--deadline", "2m", "--local-steps", "5", "--noise-multiplier", "1",
		"--log-level", "error", "--secagg", "off"}); err != nil {
		t.Fatal(err)
	}
	// The deadlines here (the round's too) are safety nets, not part of
	// what is tested: on a loaded machine (slow fsyncs, starved
	// processes) the federation tests here took up to 16 times their
	// unloaded time.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	coordDone := make(chan error, 1)
	go func() { coordDone <- runFedCoordinator(ctx, ce, f) }()

	// One round of the fixed trainer costs one; the budget lies between
	// one and two rounds (RDP composes sublinearly).
	ev, err := client.Event(&fedpb.DPParams{NoiseMultiplier: 1, Clip: 1, SamplingRate: 0.1, Steps: 5, Delta: 1e-5}, dim)
	if err != nil {
		t.Fatal(err)
	}
	l, _ := dp.NewLedger(dp.LedgerOptions{})
	_ = l.SetBudget("x", dp.Budget{Epsilon: 1e9, Delta: 1e-5})
	one, _ := l.Charge("x", ev)
	two, _ := l.Charge("x", ev)
	budget := (one.Epsilon + two.Epsilon) / 2
	code, out, errs := runVeil(t, "", "fed", "client", "--coordinator", addr, "--pki", pkiDir, "--name", "client-1",
		"--budget-epsilon", strconv.FormatFloat(budget, 'g', -1, 64), "--dir", filepath.Join(dir, "client-1"), "--trainer", "fixed",
		"--retry-for", "2m", "--json")
	if code != exitBudget || !strings.Contains(errs, "past its budget") {
		t.Fatalf("client: exit %d, stderr %q", code, errs)
	}
	if !strings.Contains(errs, "round 1: update accepted") {
		t.Errorf("no progress on stderr: %q", errs)
	}
	var rep clientReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, b) }
	if rep.Outcome != "budget_exhausted" || !near(rep.EpsilonSpent, one.Epsilon) || rep.Client != "client-1" {
		t.Fatalf("report %+v, want budget_exhausted at ε %g", rep, one.Epsilon)
	}
	var st fedStatus
	if err := json.Unmarshal([]byte(mustVeil(t, "fed", "status", "--state", state, "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Clients) != 1 || st.Clients[0].Updates != 1 || !near(st.Clients[0].Epsilon, one.Epsilon) || st.Clients[0].Budget != budget {
		t.Fatalf("status clients %+v", st.Clients)
	}
	if len(st.Rounds) < 1 || st.Rounds[0].State != "done" || st.Rounds[0].Updates != 1 || len(st.Rounds[0].Withdrawn) != 0 {
		t.Fatalf("status rounds %+v", st.Rounds)
	}
	// Round 2 lists the client that declined it, with its reason.
	wantW := []fedWithdrawal{{Client: "client-1", Reason: "budget"}}
	if len(st.Rounds) < 2 || st.Rounds[1].Round != 2 || !reflect.DeepEqual(st.Rounds[1].Withdrawn, wantW) {
		t.Fatalf("status rounds %+v, want round 2 to list client-1's withdrawal for its budget", st.Rounds)
	}
	if text := mustVeil(t, "fed", "status", "--state", state); !regexp.MustCompile(`(?m)^2 +\w+ +0  client-1 \(budget\)$`).MatchString(text) {
		t.Fatalf("the status does not list round 2's withdrawal:\n%s", text)
	}
	// The running coordinator answers the same over the network.
	var remote fedStatus
	if err := json.Unmarshal([]byte(mustVeil(t, "fed", "status", "--coordinator", addr, "--pki", pkiDir, "--name", "client-1", "--json")), &remote); err != nil {
		t.Fatal(err)
	}
	// (Round 2 may have closed since: compare its withdrawals only.)
	sameRounds := func(r []fedRoundStatus) bool {
		return len(r) >= 2 && reflect.DeepEqual(r[0], st.Rounds[0]) && r[1].Round == 2 && reflect.DeepEqual(r[1].Withdrawn, wantW)
	}
	if len(remote.Clients) != 1 || remote.Clients[0] != st.Clients[0] || !sameRounds(remote.Rounds) {
		t.Fatalf("remote status %+v, local %+v", remote, st)
	}
	// And to the operator's certificate, the default --name.
	var operator fedStatus
	if err := json.Unmarshal([]byte(mustVeil(t, "fed", "status", "--coordinator", addr, "--pki", pkiDir, "--json")), &operator); err != nil {
		t.Fatal(err)
	}
	if len(operator.Clients) != 1 || operator.Clients[0] != st.Clients[0] || !sameRounds(operator.Rounds) {
		t.Fatalf("the operator's remote status %+v, local %+v", operator, st)
	}
	// The coordinator waits for clients that no longer come; it stops
	// when told.
	cancel()
	select {
	case err := <-coordDone:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("coordinator: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the coordinator did not stop")
	}
}

// TestFedClientTrainsOnItsPartition runs the coordinator command with an
// initial checkpoint of the client's network and veil fed client with the
// local trainer on its part of a small LFW-style folder (stand-in
// describers instead of the face networks): two rounds of DP-SGD with σ
// calibrated by the client to its budget, the two ledgers agreeing, and a
// final checkpoint that loads as an embedding head.
func TestFedClientTrainsOnItsPartition(t *testing.T) {
	isolateLedgers(t)
	dir := t.TempDir()
	lfw := filepath.Join(dir, "lfw")
	_, o := localtest.Data(t, lfw, 6)
	data, err := training.LoadData(&o)
	if err != nil {
		t.Fatal(err)
	}
	s, err := training.NewSession(o.Model, o.Optim, nil, 0, data)
	if err != nil {
		t.Fatal(err)
	}
	initPath, outPath := filepath.Join(dir, "init.ckpt"), filepath.Join(dir, "final.ckpt")
	if err := s.Checkpoint(0, "adam", 1, true).Save(initPath); err != nil {
		t.Fatal(err)
	}
	pkiDir := filepath.Join(dir, "pki")
	mustVeil(t, "fed", "certs", "init", "--pki", pkiDir)
	mustVeil(t, "fed", "certs", "issue", "coordinator", "--role", "coordinator", "--pki", pkiDir)
	mustVeil(t, "fed", "certs", "issue", "alice", "--pki", pkiDir)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	state := filepath.Join(dir, "state.db")
	var cout, cerr bytes.Buffer
	ce := &env{stdout: &cout, stderr: &cerr}
	ccmd, cf := coordinatorCmd(ce)
	if err := ccmd.ParseFlags([]string{"--state", state, "--pki", pkiDir, "--listen", addr, "--init", initPath, "--out", outPath,
		"--rounds", "2", "--min-available", "1", "--min-updates", "1", "--deadline", "5m", "--local-epochs", "1", "--batch", "2",
		"--lr", "0.01", "--log-level", "error", "--linger", "5s", "--json", "--eval-data", lfw,
		"--centre-images", filepath.Join(lfw, "centre"), "--centre-count", "2", "--secagg", "off"}); err != nil {
		t.Fatal(err)
	}
	cf.describers = &o.Describers
	// Safety nets only (the round's deadline above too): on a loaded
	// machine this test took up to 59 s, against 4 s unloaded, and its
	// former 55 s context nearly ran out.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	coordDone := make(chan error, 1)
	go func() { coordDone <- runFedCoordinator(ctx, ce, cf) }()

	var out, errs bytes.Buffer
	ke := &env{stdout: &out, stderr: &errs}
	kcmd, kf := clientCmd(ke)
	if err := kcmd.ParseFlags([]string{"--coordinator", addr, "--pki", pkiDir, "--name", "alice", "--budget-epsilon", "8",
		"--dir", filepath.Join(dir, "alice"), "--data", lfw, "--partition", "1/2", "--centre-images", filepath.Join(lfw, "centre"),
		"--centre-count", "2", "--micro-batch", "4", "--retry-for", "2m", "--json"}); err != nil {
		t.Fatal(err)
	}
	kf.describers = &o.Describers
	if err := runFedClient(ctx, ke, kf); err != nil {
		t.Fatalf("client: %v\n%s", err, errs.String())
	}
	select {
	case err := <-coordDone:
		if err != nil {
			t.Fatalf("coordinator: %v\n%s", err, cerr.String())
		}
	case <-ctx.Done():
		t.Fatal("the coordinator did not finish")
	}
	var rep clientReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Outcome != "done" || !(rep.EpsilonSpent > 0) || rep.EpsilonSpent > 8 {
		t.Fatalf("client report %+v", rep)
	}
	var sum coordinatorSummary
	if err := json.Unmarshal(cout.Bytes(), &sum); err != nil {
		t.Fatal(err)
	}
	if sum.Done != 2 || len(sum.Clients) != 1 || sum.Clients[0].Updates != 2 || math.Abs(sum.Clients[0].Epsilon-rep.EpsilonSpent) > 1e-9 {
		t.Fatalf("coordinator summary %+v, client spent %g", sum, rep.EpsilonSpent)
	}
	h, err := trained.LoadHead(outPath, nil)
	if err != nil {
		t.Fatalf("the final model: %v", err)
	}
	if h.Input() != trained.InputAgeGender {
		t.Fatalf("final head reads %s", h.Input())
	}
	final, err := checkpoint.Load(outPath)
	if err != nil {
		t.Fatal(err)
	}
	if final.Header.Public || final.Header.Privacy.Epsilon != rep.EpsilonSpent || final.Header.Privacy.Unit != train.UnitIdentity {
		t.Fatalf("final checkpoint's record: %+v, public %v", final.Header.Privacy, final.Header.Public)
	}
	initCk, err := checkpoint.Load(initPath)
	if err != nil {
		t.Fatal(err)
	}
	var moved float64
	for i := range initCk.Values {
		for j, v := range initCk.Values[i] {
			moved = max(moved, math.Abs(float64(final.Values[i][j]-v)))
		}
	}
	if moved == 0 {
		t.Fatal("two rounds of training left the model as it was")
	}
	// The final model was scored, and veil fed status shows it.
	ev := sum.Evaluation
	if ev == nil || ev.Round != 2 || ev.ModelVersion != sum.ModelVersion || !(ev.Accuracy >= 0 && ev.Accuracy <= 1) {
		t.Fatalf("last evaluation %+v of model %s", ev, sum.ModelVersion)
	}
	var st fedStatus
	if err := json.Unmarshal([]byte(mustVeil(t, "fed", "status", "--state", state, "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if st.LastEvaluation == nil || *st.LastEvaluation != *ev {
		t.Fatalf("status evaluation %+v, want %+v", st.LastEvaluation, ev)
	}
	t.Logf("client spent ε = %.4g of 8; largest weight change %.3g; accuracy %.3f", rep.EpsilonSpent, moved, ev.Accuracy)
}
