package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/veil-privacy/veil/fed/client/clienttest"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/wire"
)

// files returns every file under dir with its bytes.
func files(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		out[path] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sameFiles fails unless every file of before is in after with the same
// bytes, and after has no other.
func sameFiles(t *testing.T, before, after map[string]string) {
	t.Helper()
	if len(before) != len(after) {
		t.Errorf("the client's folder had %d files, has %d", len(before), len(after))
	}
	for path, b := range before {
		if a, ok := after[path]; !ok || a != b {
			t.Errorf("%s changed", filepath.Base(path))
		}
	}
}

// clientReportJSON is veil fed client --json's report.
type clientReportJSON struct {
	Outcome      string  `json:"outcome"`
	EpsilonSpent float64 `json:"epsilon_spent"`
	Refusal      string  `json:"refusal"`
}

// TestFedCoordinatorCannotWeakenAClientsPolicy runs the two attacks of a
// coordinator on a client's privacy policy with real veil processes: a
// client with a per-identity budget first takes part in an honest
// federation (its ledger holds one round's charge), then joins a
// coordinator started with --dp=false, and one started with
// --privacy-unit example. Each time the client refuses (the reason names
// the setting), every file in its folder and its ledger folder is unchanged byte
// for byte, and the coordinator accepts no update. Before the fix the
// first coordinator got an update trained without DP and the second one
// trained per example and charged to the per-identity budget.
func TestFedCoordinatorCannotWeakenAClientsPolicy(t *testing.T) {
	bin := buildVeil(t)
	dir := t.TempDir()
	ps := &procs{t: t, bin: bin, dir: dir}
	t.Cleanup(ps.killAll)
	pkiDir := filepath.Join(dir, "pki")
	ps.run("fed", "certs", "init", "--pki", pkiDir)
	ps.run("fed", "certs", "issue", "coordinator", "--role", "coordinator", "--pki", pkiDir)
	ps.run("fed", "certs", "issue", "alice", "--pki", pkiDir)
	initPath := filepath.Join(dir, "init.ckpt")
	headCheckpoint(t, initPath)
	clientDir, ledgers := filepath.Join(dir, "alice"), filepath.Join(dir, "alice-ledgers")
	coordinator := func(name string, extra ...string) (*proc, string, string) {
		state, addr := filepath.Join(dir, name+".db"), freePort(t)
		args := append([]string{"fed", "coordinator", "--state", state, "--pki", pkiDir, "--listen", addr, "--init", initPath,
			"--rounds", "1", "--min-available", "1", "--min-updates", "1", "--deadline", "5s", "--local-steps", "5",
			"--max-update-norm", "100", "--linger", "1s", "--secagg", "off"}, extra...) // one client: no masking
		return ps.start(name, args...), state, addr
	}
	alice := func(name, addr string) (*proc, error) {
		p := ps.start(name, "fed", "client", "--coordinator", addr, "--pki", pkiDir, "--name", "alice", "--budget-epsilon", "8",
			"--dir", clientDir, "--ledger-dir", ledgers, "--trainer", "fixed", "--retry-for", "20s", "--json")
		return p, ps.wait(p, patience)
	}

	// The honest federation: DP-SGD per identity, σ = 1.
	honest, _, addr := coordinator("honest", "--noise-multiplier", "1")
	p, err := alice("alice-honest", addr)
	if err != nil {
		t.Fatalf("alice in an honest federation: %v\n%s", err, ps.log(p))
	}
	var rep clientReportJSON
	if err := json.Unmarshal(p.stdout.Bytes(), &rep); err != nil || rep.Outcome != "done" || !(rep.EpsilonSpent > 0) {
		t.Fatalf("alice's report %q (%v)", p.stdout.String(), err)
	}
	if err := ps.wait(honest, patience); err != nil {
		t.Fatalf("the honest coordinator: %v\n%s", err, ps.log(honest))
	}

	for _, c := range []struct {
		name   string
		flags  []string
		want   []string
		status int
	}{
		// Alice refuses the round herself.
		{"dp-off", []string{"--dp=false"}, []string{"round 1 asks for training without differential privacy", "(--allow-no-dp)"}, 5},
		// The coordinator refuses to enrol (and would never select) her.
		{"per-example", []string{"--privacy-unit", "example", "--noise-multiplier", "1"},
			[]string{`rounds protect privacy unit "example"`, `client "alice" protects "identity"`}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			before, ledgersBefore := files(t, clientDir), files(t, ledgers)
			co, state, addr := coordinator(c.name, c.flags...)
			p, err := alice("alice-"+c.name, addr)
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != c.status {
				t.Errorf("alice: %v, want exit status %d\n%s", err, c.status, ps.log(p))
			}
			log := ps.log(p)
			for _, w := range c.want {
				if !strings.Contains(log, w) {
					t.Errorf("alice's stderr lacks %q:\n%s", w, log)
				}
			}
			if c.status == 5 {
				var rep clientReportJSON
				if err := json.Unmarshal(p.stdout.Bytes(), &rep); err != nil || rep.Outcome != "refused" || !strings.Contains(rep.Refusal, c.want[0]) {
					t.Errorf("alice's report %q (%v)", p.stdout.String(), err)
				}
			}
			sameFiles(t, before, files(t, clientDir))
			sameFiles(t, ledgersBefore, files(t, ledgers))
			// Stop the coordinator (it waits for clients) and read what
			// it stored.
			select {
			case <-co.done:
			default:
				if err := syscall.Kill(co.cmd.Process.Pid, syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				_ = ps.wait(co, patience)
			}
			var st statusJSON
			if err := json.Unmarshal(ps.run("fed", "status", "--state", state, "--json"), &st); err != nil {
				t.Fatal(err)
			}
			for _, cl := range st.Clients {
				if cl.Updates != 0 || cl.Epsilon != 0 {
					t.Errorf("the coordinator accepted %d updates of %s (ε %g)", cl.Updates, cl.ID, cl.Epsilon)
				}
			}
			for _, r := range st.Rounds {
				if r.Updates != 0 || r.State == "done" {
					t.Errorf("round %d: %s with %d updates", r.Round, r.State, r.Updates)
				}
			}
		})
	}
}

// TestFedClientRefusesAnAdversary runs veil fed client against a
// coordinator that offers it any round whatever it declared (package
// clienttest's adversary): a round per example, one with less noise than
// the client's floor and one with a larger clip. The client refuses each
// itself, names the setting and its flag, exits with status 5, sends
// nothing and leaves its folder and its ledger as they were.
func TestFedClientRefusesAnAdversary(t *testing.T) {
	bin := buildVeil(t)
	model := wire.Weights{{Name: "w", Shape: []int{4}, Values: []float32{1, 2, 3, 4}}}
	for _, c := range []struct {
		name string
		dp   *fedpb.DPParams
		want string
	}{
		{"per-example", &fedpb.DPParams{NoiseMultiplier: 1, Clip: 1, Delta: 1e-5, PrivacyUnit: "example"},
			`round 7 asks for privacy unit "example"; this client protects "identity" (--privacy-unit)`},
		{"less-noise", &fedpb.DPParams{NoiseMultiplier: 0.3, Clip: 1, Delta: 1e-5, PrivacyUnit: "identity"},
			"round 7 asks for noise multiplier σ = 0.3; this client runs σ ≥ 1 (--min-noise-multiplier)"},
		{"larger-clip", &fedpb.DPParams{NoiseMultiplier: 1, Clip: 10, Delta: 1e-5, PrivacyUnit: "identity"},
			"round 7 asks for clip C = 10; this client accepts C in (0, 1] (--max-clip)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			adv := clienttest.Start(t, &fedpb.RoundConfig{Round: 7, Rounds: 10, Strategy: "fedavg", LocalSteps: 5, LearningRate: 0.1, Batch: 8, Dp: c.dp},
				model, "alice")
			dir := t.TempDir()
			ps := &procs{t: t, bin: bin, dir: dir}
			t.Cleanup(ps.killAll)
			clientDir, ledgers := filepath.Join(dir, "alice"), filepath.Join(dir, "alice-ledgers")
			args := func(addr string) []string {
				return []string{"fed", "client", "--coordinator", addr, "--pki", adv.PKI, "--name", "alice", "--budget-epsilon", "8",
					"--dir", clientDir, "--ledger-dir", ledgers, "--trainer", "fixed", "--retry-for", "0s", "--json"}
			}
			// Alice's folder as a first start makes it, while her
			// coordinator is down (she gives up at once).
			first := ps.start("alice-first", args(freePort(t))...)
			if err := ps.wait(first, patience); err == nil {
				t.Fatal("alice reached a coordinator that is not there")
			}
			before, ledgersBefore := files(t, clientDir), files(t, ledgers)
			if len(ledgersBefore) == 0 {
				t.Fatal("alice keeps no ledger in her ledger folder")
			}
			p := ps.start("alice", args(adv.Addr)...)
			err := ps.wait(p, patience)
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 5 {
				t.Fatalf("alice: %v, want exit status 5\n%s", err, ps.log(p))
			}
			if log := ps.log(p); !strings.Contains(log, c.want) {
				t.Errorf("alice's stderr lacks %q:\n%s", c.want, log)
			}
			if n := len(adv.Updates()); n != 0 || adv.Downloads() != 0 {
				t.Errorf("alice sent %d updates, downloaded %d models", n, adv.Downloads())
			}
			if j := adv.Joins(); len(j) != 1 || j[0].GetPrivacyUnit() != "identity" || j[0].GetBudgetEpsilon() != 8 {
				t.Errorf("joins %v", j)
			}
			sameFiles(t, before, files(t, clientDir))
			sameFiles(t, ledgersBefore, files(t, ledgers))
			var rep clientReportJSON
			if err := json.Unmarshal(p.stdout.Bytes(), &rep); err != nil || rep.Outcome != "refused" || rep.EpsilonSpent != 0 {
				t.Errorf("alice's report %q (%v)", p.stdout.String(), err)
			}
		})
	}
}
