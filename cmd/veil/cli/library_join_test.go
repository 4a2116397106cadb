package cli

import (
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/veil-privacy/veil/fed/ops"
	"github.com/veil-privacy/veil/nn/checkpoint"
)

// TestLibraryJoinRefusesBeforeDialling: without --coordinator (and no
// federation joined before) join says so; with too few named people it
// says how many and that nothing was sent, and the coordinator's address
// receives no connection at all; leave and status speak of no federation.
func TestLibraryJoinRefusesBeforeDialling(t *testing.T) {
	dir := initTestLibrary(t)
	addLearnPeople(t, dir, 3, 4, 2)
	pkiDir := filepath.Join(t.TempDir(), "pki")
	for _, args := range [][]string{{"fed", "certs", "init", "--pki", pkiDir}, {"fed", "certs", "issue", "lib", "--pki", pkiDir}} {
		if code, _, errs := run(t, args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conns atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			c.Close()
		}
	}()
	mustFail(t, "--coordinator is required: this library has joined no federation", "library", "join", "--library", dir, "--budget-epsilon", "4")
	mustFail(t, "--budget-epsilon is required", "library", "join", "--library", dir, "--coordinator", ln.Addr().String(), "--pki", pkiDir, "--name", "lib")
	mustFail(t, "3 people with named faces; taking part needs at least 4", "library", "join", "--library", dir,
		"--coordinator", ln.Addr().String(), "--pki", pkiDir, "--name", "lib", "--budget-epsilon", "4")
	mustFail(t, "nothing was sent", "library", "join", "--library", dir,
		"--coordinator", ln.Addr().String(), "--pki", pkiDir, "--name", "lib", "--budget-epsilon", "4", "--min-people", "5")
	if n := conns.Load(); n != 0 {
		t.Errorf("the coordinator's address received %d connections", n)
	}
	code, out, errs := run(t, "library", "leave", "--library", dir)
	if code != 0 || !strings.Contains(out, "joined no federation") {
		t.Errorf("leave: exit %d: %s %s", code, out, errs)
	}
	code, out, errs = run(t, "library", "status", "--library", dir)
	if code != 0 || strings.Contains(out, "federation") || strings.Contains(out, "privacy ledger") {
		t.Errorf("status of a library in no federation: exit %d: %s %s", code, out, errs)
	}
}

// TestFedInitModelPsi: --model psi writes ψ at the identity (public, the
// ψ architecture, r's last layer zero), which the coordinator serves to
// libraries; an unknown --model is refused.
func TestFedInitModelPsi(t *testing.T) {
	out := filepath.Join(t.TempDir(), "psi.ckpt")
	var info struct {
		Params int `json:"params"`
	}
	if err := json.Unmarshal([]byte(mustVeil(t, "fed", "init-model", "--model", "psi", "--out", out, "--json")), &info); err != nil {
		t.Fatal(err)
	}
	ck, err := checkpoint.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	w, err := ops.WeightsFromCheckpoint(ck)
	if err != nil {
		t.Fatal(err)
	}
	if info.Params != 128*128+128 || w.Len() != info.Params || ck.Header.Model.Kind != "psi" || !ck.Header.Public {
		t.Fatalf("report %+v, header %+v", info, ck.Header)
	}
	for _, x := range w {
		for _, v := range x.Values {
			if v != 0 {
				t.Fatalf("%s is not zero: ψ would not start at the identity", x.Name)
			}
		}
	}
	mustFail(t, `--model "mlp": want head or psi`, "fed", "init-model", "--model", "mlp", "--out", filepath.Join(t.TempDir(), "x.ckpt"))
}
