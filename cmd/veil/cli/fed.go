package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/fed/fedpb"
	"github.com/veil-privacy/veil/fed/ops"
	"github.com/veil-privacy/veil/fed/pki"
	"github.com/veil-privacy/veil/nn/arch"
	"github.com/veil-privacy/veil/nn/checkpoint"
)

// fedCommands lists the constructors of the `veil fed` subcommands; add a
// line here when adding one (veil fed sim lives in its own file).
var fedCommands = []func(*env) *cobra.Command{
	newFedCertsCmd,
	newFedInitModelCmd,
	newFedCoordinatorCmd,
	newFedClientCmd,
	newFedStatusCmd,
	newFedSimCmd,
	newFedKeygenCmd,
}

func newFedCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fed",
		Short: "Federated training: certificates, the coordinator, clients and their status",
		Long: `Federated training of a face model: a coordinator holds the shared model and
runs rounds; clients train on their own data under DP-SGD and send back only
their updates, over gRPC with mutual TLS. Every client keeps its own privacy
ledger and refuses a round that would take it past its budget; the
coordinator keeps a ledger of every client and refuses updates that would.

A federation across machines:

  1. On the operator's machine, make a certificate authority and certificates
     (veil fed certs init, veil fed certs issue coordinator --role coordinator
     --host HOSTNAME, veil fed certs issue alice ...), and hand each client
     its NAME.crt, NAME.key and ca.crt (never ca.key).
  2. Make the initial model: veil fed init-model --out init.ckpt.
  3. Start veil fed coordinator --init init.ckpt --listen 0.0.0.0:7443 on the
     coordinator's machine with its certificate.
  4. On each client machine, veil fed client --coordinator HOSTNAME:7443
     with its certificate, budget and data folder.
  5. Watch with veil fed status, or the /metrics endpoint.`,
	}
	for _, c := range fedCommands {
		cmd.AddCommand(c(e))
	}
	return cmd
}

// ---- veil fed certs ----

func newFedCertsCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "The federation's certificate authority: init, issue, revoke",
		Long: `The federation's small certificate authority, kept in a folder (--pki, 0700):
ca.crt and ca.key, one NAME.crt/NAME.key pair per issued certificate, and
revoked.crl, the revocation list the authority signs. A client's identity is
its certificate's name. Keys are ECDSA P-256; connections are TLS 1.3 with
certificates checked on both sides.

Keep ca.key on the operator's machine only; give a client its NAME.crt,
NAME.key and ca.crt, and the coordinator its own pair, ca.crt and
revoked.crl (a revocation takes effect on the coordinator once the new
revoked.crl is in its folder). The coordinator refuses every certificate
while its revoked.crl is missing or older (by the list's number, which grows
with every list signed) than the newest it has accepted.

Roles: a client's certificate (the default) takes part in rounds and sees
its own record in veil fed status; the coordinator's serves; an operator's
(--role operator) sees every client's record and the metrics over TLS, and
takes part in no round.`,
	}
	cmd.AddCommand(newFedCertsInitCmd(e), newFedCertsIssueCmd(e), newFedCertsRevokeCmd(e), newFedCertsCRLCmd(e))
	return cmd
}

// certInfo is a certificate in JSON output.
type certInfo struct {
	Name     string    `json:"name"`
	Role     string    `json:"role,omitempty"`
	Cert     string    `json:"cert"`
	Key      string    `json:"key,omitempty"`
	Serial   string    `json:"serial"`
	NotAfter time.Time `json:"not_after"`
	Hosts    []string  `json:"hosts,omitempty"`
}

func newFedCertsInitCmd(e *env) *cobra.Command {
	var dir, name string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Create a new certificate authority in the --pki folder",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ca, err := pki.Init(dir, name)
			if err != nil {
				return err
			}
			c := ca.Cert()
			info := certInfo{Name: c.Subject.CommonName, Role: "authority", Cert: filepath.Join(dir, "ca.crt"),
				Key: filepath.Join(dir, "ca.key"), Serial: c.SerialNumber.String(), NotAfter: c.NotAfter}
			if asJSON {
				return writeJSON(e.stdout, info)
			}
			fmt.Fprintf(e.stdout, "authority %q in %s (valid until %s); keep ca.key here, hand out ca.crt\n",
				info.Name, dir, c.NotAfter.Format(time.DateOnly))
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "pki", "pki", "folder of the authority (created; must not hold one already)")
	cmd.Flags().StringVar(&name, "name", "veil-federation", "the authority's name")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// certsIssueHelp is veil fed certs issue's --help.
const certsIssueHelp = `Issue a certificate and key, NAME.crt and NAME.key in the --pki folder.

A client's NAME is its identity in the federation: its budget, ledger and
updates are recorded under it. The coordinator's certificate (--role
coordinator) must name every host name or IP address clients dial (--host,
repeatable); localhost, 127.0.0.1 and ::1 are always included. The
operator's certificate (--role operator) lets veil fed status --coordinator
list every client (a client's shows its own record only) and reads the
metrics served with --metrics-tls; it takes part in no round. An existing
name is never overwritten: revoke it and issue another name.`

func newFedCertsIssueCmd(e *env) *cobra.Command {
	var dir, role string
	var hosts []string
	var validity time.Duration
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "issue NAME",
		Short: "Issue a certificate for a client (its id) or for the coordinator",
		Long:  certsIssueHelp,
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var r pki.Role
			switch role {
			case "client":
				r = pki.Client
			case "coordinator", "server":
				r = pki.Server
			case "operator":
				r = pki.Operator
			default:
				return fmt.Errorf("--role %q: want client, coordinator or operator", role)
			}
			if err := needAuthority(dir); err != nil {
				return err
			}
			ca, err := pki.Load(dir)
			if err != nil {
				return err
			}
			c, err := ca.Issue(pki.IssueOptions{Name: args[0], Role: r, Hosts: hosts, Validity: validity})
			if err != nil {
				return err
			}
			info := certInfo{Name: args[0], Role: role, Cert: filepath.Join(dir, args[0]+".crt"), Key: filepath.Join(dir, args[0]+".key"),
				Serial: c.SerialNumber.String(), NotAfter: c.NotAfter}
			info.Hosts = append(info.Hosts, c.DNSNames...)
			for _, ip := range c.IPAddresses {
				info.Hosts = append(info.Hosts, ip.String())
			}
			if asJSON {
				return writeJSON(e.stdout, info)
			}
			fmt.Fprintf(e.stdout, "issued %s certificate %q: %s and %s (valid until %s)\n", role, info.Name, info.Cert, info.Key,
				c.NotAfter.Format(time.DateOnly))
			if len(info.Hosts) > 0 {
				fmt.Fprintf(e.stdout, "valid for hosts: %s\n", strings.Join(info.Hosts, ", "))
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&dir, "pki", "pki", "folder of the authority")
	fl.StringVar(&role, "role", "client", "client, coordinator or operator (sees every client's status and the metrics; no part in rounds)")
	fl.StringArrayVar(&hosts, "host", nil, "a host name or IP address the coordinator is reached at (repeatable; --role coordinator only)")
	fl.DurationVar(&validity, "validity", 365*24*time.Hour, "how long the certificate is valid")
	fl.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newFedCertsRevokeCmd(e *env) *cobra.Command {
	var dir string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "revoke NAME",
		Short: "Revoke a certificate (adds it to the signed revocation list)",
		Long: `Add the certificate NAME.crt of the --pki folder to the authority's signed
revocation list (revoked.crl). A coordinator reading this folder refuses the
certificate from its next call on, also on connections already open; copy
revoked.crl to a coordinator running elsewhere. Revoking twice is harmless.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := needAuthority(dir); err != nil {
				return err
			}
			if _, err := os.Stat(filepath.Join(dir, args[0]+".crt")); errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("no certificate named %q in %s (%s.crt is missing)", args[0], dir, args[0])
			}
			ca, err := pki.Load(dir)
			if err != nil {
				return err
			}
			if err := ca.Revoke(args[0]); err != nil {
				return err
			}
			c, err := pki.ReadCert(filepath.Join(dir, args[0]+".crt"))
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(e.stdout, struct {
					Name    string `json:"name"`
					Serial  string `json:"serial"`
					Revoked bool   `json:"revoked"`
					CRL     string `json:"crl"`
				}{args[0], c.SerialNumber.String(), true, filepath.Join(dir, "revoked.crl")})
			}
			fmt.Fprintf(e.stdout, "revoked %q (serial %s); the list is %s\n", args[0], c.SerialNumber, filepath.Join(dir, "revoked.crl"))
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "pki", "pki", "folder of the authority")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newFedCertsCRLCmd(e *env) *cobra.Command {
	var dir string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "crl",
		Short: "Sign the revocation list again, with the next number",
		Long: `Sign the authority's revocation list (revoked.crl) again with the next
number, keeping its entries; in an authority folder made before veil fed
certs init wrote one, this writes an empty list. A coordinator refuses every
certificate without a list, and refuses a list numbered below the newest it
has accepted; copy the new revoked.crl to it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := needAuthority(dir); err != nil {
				return err
			}
			ca, err := pki.Load(dir)
			if err != nil {
				return err
			}
			if err := ca.SignCRL(); err != nil {
				return err
			}
			path := filepath.Join(dir, "revoked.crl")
			if asJSON {
				return writeJSON(e.stdout, struct {
					CRL string `json:"crl"`
				}{path})
			}
			fmt.Fprintf(e.stdout, "signed the revocation list %s\n", path)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "pki", "pki", "folder of the authority")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// ---- veil fed status ----

// fedStatus is veil fed status's JSON output.
type fedStatus struct {
	Round        uint64            `json:"round"`
	ModelVersion string            `json:"model_version"`
	Clients      []fedClientStatus `json:"clients"`
	Rounds       []fedRoundStatus  `json:"rounds"`
	// LastEvaluation is the coordinator's latest score of its model
	// (--eval-data), absent if it has none.
	LastEvaluation *fedEvaluation `json:"last_evaluation,omitempty"`
	// Privacy says what the federation's ε means: the assumption and the
	// ε of a person in k clients' data (with --state, once a DP round is
	// done; the network status does not carry the clients' ledgers).
	Privacy *checkpoint.Federation `json:"privacy,omitempty"`
}

type fedClientStatus struct {
	ID      string  `json:"id"`
	Epsilon float64 `json:"epsilon"`
	Budget  float64 `json:"budget"`
	Updates uint64  `json:"updates"`
}

type fedRoundStatus struct {
	Round   uint64 `json:"round"`
	State   string `json:"state"`
	Updates uint64 `json:"updates"`
	Model   string `json:"model_version,omitempty"`
	// Withdrawn lists the selected clients that withdrew from the round
	// (declined it, or were revoked) with their reasons.
	Withdrawn []fedWithdrawal `json:"withdrawn,omitempty"`
}

type fedWithdrawal struct {
	Client string `json:"client"`
	Reason string `json:"reason"`
}

func statusFromPB(s *fedpb.StatusResponse) fedStatus {
	out := fedStatus{Round: s.GetRound(), ModelVersion: s.GetModelVersion(), Clients: []fedClientStatus{}, Rounds: []fedRoundStatus{},
		LastEvaluation: evaluationFromPB(s.GetLastEvaluation())}
	for _, c := range s.GetClients() {
		out.Clients = append(out.Clients, fedClientStatus{ID: c.GetId(), Epsilon: c.GetEpsilon(), Budget: c.GetBudget(), Updates: c.GetUpdates()})
	}
	for _, r := range s.GetRounds() {
		rs := fedRoundStatus{Round: r.GetRound(), State: r.GetState(), Updates: r.GetUpdates(), Model: r.GetModelVersion()}
		for _, w := range r.GetWithdrawals() {
			rs.Withdrawn = append(rs.Withdrawn, fedWithdrawal{Client: w.GetClient(), Reason: w.GetReason()})
		}
		out.Rounds = append(out.Rounds, rs)
	}
	return out
}

// fedStatusHelp is veil fed status's --help.
const fedStatusHelp = `Print the coordinator's state: the latest round, the current model version,
every enrolled client with its budget, the ε its ledger records (at the
client's δ, in its privacy unit) and its accepted updates, and the log of
rounds (open, done or failed, with their accepted updates and the clients
that withdrew: declined the round, with the policy setting or budget that
made them, or were revoked), and the last
evaluation of the model when the coordinator runs with --eval-data.

With --state it also says what the federation's ε means: each client's ε
holds for a person whose data that client alone holds; a person in k
clients' data is exposed to all k, and the ε for k = 1 ... all clients is
listed (their mechanisms composed by Rényi DP, worst case over which k).

It reads the coordinator's state file (--state), also while the coordinator
runs; or, from another machine, asks the running coordinator (--coordinator
HOST:PORT with a federation certificate: --pki DIR --name NAME, or --cert,
--key and --ca). The coordinator lists every client to the operator's
certificate (veil fed certs issue operator --role operator; --name defaults
to operator) and, to a client's certificate, that client's record only.`

func newFedStatusCmd(e *env) *cobra.Command {
	var state, addr, serverName, pkiDir, name, cert, key, ca string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "The federation's rounds, clients, the ε each has spent and the last evaluation",
		Long:  fedStatusHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var st *fedpb.StatusResponse
			var err error
			switch {
			case state != "" && addr != "":
				return errors.New("give --state or --coordinator, not both")
			case state != "":
				st, err = ops.ReadStatus(cmd.Context(), state)
			case addr != "":
				st, err = remoteFedStatus(cmd.Context(), addr, serverName, pkiDir, name, cert, key, ca)
			default:
				return errors.New("--state (the coordinator's state file) or --coordinator is required")
			}
			if err != nil {
				return err
			}
			out := statusFromPB(st)
			if state != "" {
				if f, _, err := ops.ReadFederationPrivacy(cmd.Context(), state); err != nil {
					return err
				} else if f.DPRounds > 0 || f.Clients > 0 {
					out.Privacy = f
				}
			}
			if asJSON {
				return writeJSON(e.stdout, out)
			}
			printFedStatus(e, out)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&state, "state", "", "the coordinator's state file")
	fl.StringVar(&addr, "coordinator", "", "ask the running coordinator at host:port instead")
	fl.StringVar(&serverName, "server-name", "", "name the coordinator's certificate must carry (default: the host of --coordinator)")
	fl.StringVar(&pkiDir, "pki", "", "with --coordinator: folder holding NAME.crt, NAME.key and ca.crt")
	fl.StringVar(&name, "name", "operator", "with --coordinator: the certificate's name in --pki (the operator's sees every client)")
	fl.StringVar(&cert, "cert", "", "with --coordinator: a federation certificate (instead of --pki)")
	fl.StringVar(&key, "key", "", "with --coordinator: its private key")
	fl.StringVar(&ca, "ca", "", "with --coordinator: the authority's certificate")
	fl.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// remoteFedStatus asks a running coordinator for its status.
func remoteFedStatus(ctx context.Context, addr, serverName, pkiDir, name, cert, key, ca string) (*fedpb.StatusResponse, error) {
	id, serverName, err := dialIdentity(addr, serverName, pkiDir, name, cert, key, ca)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(pki.ClientTLS(id, serverName))))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := fedpb.NewCoordinatorClient(conn).Status(ctx, &fedpb.StatusRequest{ProtocolVersion: fedpb.ProtocolVersion})
	if err != nil {
		return nil, fmt.Errorf("asking for the status: %w", client.Explain(addr, id.Leaf.Subject.CommonName, err))
	}
	return st, nil
}

// dialIdentity loads the federation certificate of --pki/--name or
// --cert/--key/--ca that dials the coordinator at addr, and returns it with
// the name the coordinator's certificate must carry (serverName, default
// the host of addr).
func dialIdentity(addr, serverName, pkiDir, name, cert, key, ca string) (*pki.Identity, string, error) {
	certP, keyP, caP, _, err := ops.IdentityFiles(pkiDir, name, cert, key, ca, "")
	if err != nil {
		return nil, "", err
	}
	id, err := ops.LoadIdentity(certP, keyP, caP)
	if err != nil {
		return nil, "", err
	}
	if serverName == "" {
		if serverName, err = coordinatorHost(addr); err != nil {
			return nil, "", err
		}
	}
	return id, serverName, nil
}

// coordinatorHost is the host of a --coordinator address.
func coordinatorHost(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" || port == "" {
		return "", fmt.Errorf("--coordinator %q: want HOST:PORT, e.g. coordinator.example.org:7443", addr)
	}
	return host, nil
}

func printFedStatus(e *env, s fedStatus) {
	model := s.ModelVersion
	if len(model) > 12 {
		model = model[:12]
	}
	fmt.Fprintf(e.stdout, "round %d, model %s\n", s.Round, model)
	fmt.Fprintf(e.stdout, "%-24s %12s %12s %8s\n", "client", "ε spent", "ε budget", "updates")
	for _, c := range s.Clients {
		fmt.Fprintf(e.stdout, "%-24s %12s %12g %8d\n", c.ID, dp.FormatEpsilon(c.Epsilon), c.Budget, c.Updates)
	}
	fmt.Fprintf(e.stdout, "%-8s %-8s %8s  %s\n", "round", "state", "updates", "withdrew (reason)")
	for _, r := range s.Rounds {
		var w []string
		for _, x := range r.Withdrawn {
			w = append(w, fmt.Sprintf("%s (%s)", x.Client, x.Reason))
		}
		fmt.Fprintf(e.stdout, "%-8d %-8s %8d  %s\n", r.Round, r.State, r.Updates, strings.Join(w, ", "))
	}
	if ev := s.LastEvaluation; ev != nil {
		fmt.Fprintf(e.stdout, "last evaluation: accuracy %.4f on the %s after %s (model %s, %s)\n",
			ev.Accuracy, ev.Pairs, plural(ev.Round, "round"), shortVersion(ev.ModelVersion), ev.Time)
	}
	printFederationPrivacy(e.stdout, s.Privacy)
}

// registerFedHead adds the flags of the face networks veil fed client and
// veil fed sim describe images with (veil train's head flags), worded for
// these commands, which always train the distillation head: its input
// defaults to the public age/gender features.
func registerFedHead(cmd *cobra.Command, h *headFlags) {
	h.register(cmd)
	fl := cmd.Flags()
	_ = fl.Set("features", arch.HeadAgeGender)
	fl.Lookup("features").DefValue = arch.HeadAgeGender // so --help shows this command's default
	fl.VisitAll(func(f *pflag.Flag) {
		f.Usage = strings.Replace(f.Usage, "--model head's input:", "the head's input:", 1)
		f.Usage = strings.Replace(f.Usage, "--model head, --loss distill: ", "distillation targets: ", 1)
	})
}
