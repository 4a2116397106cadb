package cli

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/pki"
)

// tlsCoordinator serves the coordinator's service (unimplemented: these
// tests fail before any call) with the certificate NAME of the authority
// in dir and its revocation list, and returns its address.
func tlsCoordinator(t *testing.T, dir, name string) string {
	t.Helper()
	id, err := pki.LoadIdentity(filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key"), filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(pki.ServerTLS(id, pki.NewRevocations(filepath.Join(dir, "revoked.crl"), id.CA)))))
	fedpb.RegisterCoordinatorServer(srv, fedpb.UnimplementedCoordinatorServer{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

// What a new user meets when the network or the certificates are wrong:
// one sentence saying what is wrong and what to do, no gRPC internals,
// and no retrying what retrying cannot fix.
func TestFedConnectionErrorsAreWordedForUsers(t *testing.T) {
	dir := t.TempDir()
	fedPKI, otherPKI := filepath.Join(dir, "pki"), filepath.Join(dir, "other")
	mustVeil(t, "fed", "certs", "init", "--pki", fedPKI)
	mustVeil(t, "fed", "certs", "issue", "coordinator", "--role", "coordinator", "--pki", fedPKI)
	mustVeil(t, "fed", "certs", "issue", "alice", "--pki", fedPKI)
	mustVeil(t, "fed", "certs", "issue", "mallory", "--pki", fedPKI)
	mustVeil(t, "fed", "certs", "revoke", "mallory", "--pki", fedPKI)
	mustVeil(t, "fed", "certs", "init", "--pki", otherPKI)
	mustVeil(t, "fed", "certs", "issue", "dave", "--pki", otherPKI)
	addr := tlsCoordinator(t, fedPKI, "coordinator")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	port := addr[strings.LastIndex(addr, ":"):]

	cases := []struct {
		name string
		args []string
		want string
	}{
		{"another authority", []string{"fed", "status", "--coordinator", addr, "--pki", otherPKI, "--name", "dave"},
			"certificate from another authority"},
		{"a name the certificate lacks", []string{"fed", "status", "--coordinator", "localhost" + port, "--server-name", "coord.example",
			"--pki", fedPKI, "--name", "alice"}, "not valid for the name coord.example (it is valid for localhost"},
		{"a revoked certificate", []string{"fed", "status", "--coordinator", addr, "--pki", fedPKI, "--name", "mallory"},
			`the certificate of "mallory"`},
		{"nobody listening", []string{"fed", "status", "--coordinator", closed, "--pki", fedPKI, "--name", "alice"},
			"cannot reach the coordinator at " + closed + ": connection refused"},
		{"a client of another authority", []string{"fed", "client", "--coordinator", addr, "--pki", otherPKI, "--name", "dave",
			"--budget-epsilon", "1", "--dir", filepath.Join(dir, "dave"), "--trainer", "fixed", "--retry-for", "1m"},
			"certificate from another authority"},
		{"a client with nobody listening", []string{"fed", "client", "--coordinator", closed, "--pki", fedPKI, "--name", "alice",
			"--budget-epsilon", "1", "--dir", filepath.Join(dir, "alice"), "--trainer", "fixed", "--retry-for", "1s", "--quiet"},
			"gave up after trying for 1s (--retry-for): cannot reach the coordinator"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, errs := runVeil(t, "", c.args...)
			if code == 0 || !strings.Contains(errs, c.want) {
				t.Fatalf("exit %d, %q: want %q", code, errs, c.want)
			}
			for _, internal := range []string{"rpc error", "desc =", "transport:", "x509:"} {
				if strings.Contains(errs, internal) {
					t.Errorf("the message %q shows gRPC's or TLS's internals (%q)", errs, internal)
				}
			}
			// A certificate problem is not retried for --retry-for: the
			// client (without --quiet) says nothing of retrying. This is
			// what the run did, not how long it took, so a loaded machine
			// cannot fail it.
			if strings.Contains(errs, "retrying in") {
				t.Errorf("retried what retrying cannot fix: %q", errs)
			}
		})
	}
	// The words checked above are the client's: unreachable, it does
	// retry, and says so.
	code, _, errs := runVeil(t, "", "fed", "client", "--coordinator", closed, "--pki", fedPKI, "--name", "alice",
		"--budget-epsilon", "1", "--dir", filepath.Join(dir, "alice"), "--trainer", "fixed", "--retry-for", "300ms")
	if code == 0 || !strings.Contains(errs, "retrying in") {
		t.Errorf("an unreachable coordinator: exit %d, %q; want it retried and said so", code, errs)
	}
}

// Missing files and a missing initial model are named, with the command
// that makes them.
func TestFedMissingFilesSayHowToMakeThem(t *testing.T) {
	dir := t.TempDir()
	fedPKI, empty := filepath.Join(dir, "pki"), filepath.Join(dir, "empty")
	mustVeil(t, "fed", "certs", "init", "--pki", fedPKI)
	mustVeil(t, "fed", "certs", "issue", "coordinator", "--role", "coordinator", "--pki", fedPKI)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"fed", "client", "--coordinator", "127.0.0.1:1", "--pki", empty, "--name", "alice", "--budget-epsilon", "1", "--dir", dir},
			"veil fed certs issue alice makes alice.crt and alice.key"},
		{[]string{"fed", "status", "--coordinator", "127.0.0.1:1", "--pki", fedPKI, "--name", "bob"}, "veil fed certs issue bob"},
		{[]string{"fed", "certs", "issue", "alice", "--pki", empty}, "no certificate authority in " + empty},
		{[]string{"fed", "certs", "revoke", "nobody", "--pki", fedPKI}, `no certificate named "nobody"`},
		{[]string{"fed", "coordinator", "--state", filepath.Join(dir, "new.db"), "--pki", fedPKI}, "veil fed init-model --out FILE"},
		{[]string{"fed", "client", "--coordinator", "127.0.0.1:1", "--pki", fedPKI, "--name", "coordinator", "--budget-epsilon", "-2",
			"--dir", dir}, "--budget-epsilon must be a positive number, got -2"},
	}
	for _, c := range cases {
		code, _, errs := runVeil(t, "", c.args...)
		if code == 0 || !strings.Contains(errs, c.want) {
			t.Errorf("veil %v: exit %d, %q: want %q", c.args, code, errs, c.want)
		}
	}
	notState := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notState, []byte("not a database, not a database, not a database"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"fed", "status", "--state", notState}, "is not a coordinator's state file"},
		{[]string{"fed", "status", "--coordinator", "localhost", "--pki", fedPKI, "--name", "coordinator"}, `--coordinator "localhost": want HOST:PORT`},
		{[]string{"fed", "client", "--coordinator", "localhost", "--pki", fedPKI, "--name", "coordinator", "--budget-epsilon", "1",
			"--dir", filepath.Join(dir, "c")}, `--coordinator "localhost": want HOST:PORT`},
	} {
		code, _, errs := runVeil(t, "", c.args...)
		if code == 0 || !strings.Contains(errs, c.want) {
			t.Errorf("veil %v: exit %d, %q: want %q", c.args, code, errs, c.want)
		}
	}
	// A coordinator whose revocation list is missing would refuse every
	// client: it says so before serving, and how to sign one.
	noCRL := filepath.Join(dir, "pki-nocrl")
	mustVeil(t, "fed", "certs", "init", "--pki", noCRL)
	mustVeil(t, "fed", "certs", "issue", "coordinator", "--role", "coordinator", "--pki", noCRL)
	if err := os.Remove(filepath.Join(noCRL, "revoked.crl")); err != nil {
		t.Fatal(err)
	}
	smallHead(t, filepath.Join(dir, "init.ckpt"))
	code, _, errs := runVeil(t, "", "fed", "coordinator", "--state", filepath.Join(dir, "nocrl.db"), "--init", filepath.Join(dir, "init.ckpt"),
		"--pki", noCRL, "--listen", "127.0.0.1:0")
	if code == 0 || !strings.Contains(errs, "is missing") || !strings.Contains(errs, "veil fed certs crl") {
		t.Errorf("a coordinator without its revocation list: exit %d, %q", code, errs)
	}
	// Data folders by default come from VEIL_DATA (or beside the
	// repository): a client whose default is empty says what to give.
	t.Setenv("VEIL_DATA", empty)
	code, _, errs = runVeil(t, "", "fed", "client", "--coordinator", "127.0.0.1:1", "--pki", fedPKI, "--name", "coordinator",
		"--budget-epsilon", "1", "--dir", filepath.Join(dir, "c"))
	if code == 0 || !strings.Contains(errs, "give --centre-images DIR") {
		t.Errorf("exit %d, %q: want --centre-images named", code, errs)
	}
	code, _, errs = runVeil(t, "", "fed", "client", "--coordinator", "127.0.0.1:1", "--pki", fedPKI, "--name", "coordinator",
		"--budget-epsilon", "1", "--dir", filepath.Join(dir, "c"), "--centre-images", dir)
	if code == 0 || !strings.Contains(errs, "give --data DIR") {
		t.Errorf("exit %d, %q: want --data named", code, errs)
	}
	// The client's --help shows the default it uses.
	_, out, _ := runVeil(t, "", "fed", "client", "--help")
	if !strings.Contains(out, `(default "agegender")`) {
		t.Errorf("veil fed client --help does not show --features' default agegender")
	}
}

// TestFedBadArgumentsAreExplained: a missing argument or state file says
// what to give, in the command's words.
func TestFedBadArgumentsAreExplained(t *testing.T) {
	none := filepath.Join(t.TempDir(), "none.db")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"fed", "certs", "issue"}, "veil fed certs issue takes NAME"},
		{[]string{"fed", "certs", "revoke", "a", "b"}, "veil fed certs revoke takes NAME"},
		{[]string{"fed", "status", "--state", none}, "no coordinator's state file at " + none + " (veil fed coordinator --state makes one"},
		{[]string{"fed", "coordinator", "--state", none, "--server-lr", "-1"}, "--server-lr must not be negative"},
		{[]string{"fed", "coordinator", "--state", none, "--metrics-listen", "0.0.0.0:9464"},
			`--metrics-listen "0.0.0.0:9464" is not a loopback address`},
		{[]string{"fed", "coordinator", "--state", none, "--eval-data", t.TempDir(), "--init", none},
			"no LFW development pairs there (pairsDevTest.txt)"},
		// Settings refused before the client reads its data.
		{[]string{"fed", "client", "--coordinator", "127.0.0.1:1", "--dir", t.TempDir(), "--budget-epsilon", "8", "--privacy-unit", "photo"},
			`--privacy-unit "photo": want identity`},
		{[]string{"fed", "client", "--coordinator", "127.0.0.1:1", "--dir", t.TempDir(), "--budget-epsilon", "8", "--budget-delta", "1"},
			"--budget-delta must be in (0, 1)"},
	} {
		code, _, stderr := run(t, c.args...)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("veil %v: exit %d, stderr %q, want %q", c.args, code, stderr, c.want)
		}
	}
}

// TestFedHelpShowsTheDefaults: what --help says the defaults are is what
// the commands do: the head's input is the age/gender features in veil
// fed client and sim, their describer flags do not refer to veil train's
// --model and --loss, and both commands state FedAvg's server learning
// rate under DP.
func TestFedHelpShowsTheDefaults(t *testing.T) {
	for _, c := range [][]string{{"fed", "client"}, {"fed", "sim"}} {
		code, out, _ := run(t, append(c, "--help")...)
		if code != 0 || !strings.Contains(out, `agegender (face-api's age/gender network's 2048 region features of LFW's fixed face box: public features never trained on identities) (default "agegender")`) {
			t.Errorf("veil %v --help does not show the agegender default", c)
		}
		_, flags, _ := strings.Cut(out, "Flags:")
		if strings.Contains(flags, "--model head") || strings.Contains(flags, "--loss distill") {
			t.Errorf("veil %v --help refers to veil train's --model/--loss", c)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"fed", "coordinator", "--help"}, "with --dp the square root of the updates in the round, rounded (3 for 8)"},
		{[]string{"fed", "sim", "--help"}, "FedAvg under DP √(updates per round) rounded, 3 for 8 clients, and 1 without DP; FedSGD 1"},
	} {
		if _, out, _ := run(t, c.args...); !strings.Contains(out, c.want) {
			t.Errorf("veil %v does not say %q", c.args, c.want)
		}
	}
	cmd, f := fedSimCmd(&env{})
	if err := cmd.ParseFlags(nil); err != nil {
		t.Fatal(err)
	}
	if f.head.features != "agegender" {
		t.Errorf("veil fed sim's head reads %q by default", f.head.features)
	}
}
