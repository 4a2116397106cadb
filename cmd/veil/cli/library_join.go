package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/fed/client"
	"github.com/veil-privacy/veil/tagging"
	"github.com/veil-privacy/veil/tagging/fedjoin"
)

// libraryJoinHelp is veil library join's --help.
const libraryJoinHelp = `Take part in a federation with this library: the library becomes a client of
the coordinator at --coordinator (mutual TLS, certificates from --pki DIR
with --name, as veil fed client), and helps train the shared model ψ (a head
on the face descriptor, which the coordinator starts from veil fed init-model
--model psi) on your own decisions: the faces you named and the suggestions
you accepted, decrypted in memory only. No name and no person id leaves:
each person is a keyed hash, a class the coordinator cannot read.

Privacy: the unit is one person of the library (all their faces). Each
round's training is DP-SGD under your policy, exactly as veil fed client's
(--budget-epsilon, --budget-delta, --min-noise-multiplier, --max-clip,
--max-sampling-rate, --require-secagg, --secagg-min-honest): a round outside
it is refused with the setting's name and your ledger is left as it was.
The ledger lives inside the encrypted library and is charged before your
faces are touched; a round past the budget is refused (exit status 4; a
policy refusal exits 5). Secure aggregation (masking) is used whenever the
coordinator runs it. A library with fewer than --min-people named people
sends nothing and says so.

After the federation's last round the library imports the resulting model
and adopts it only if it measures at least as good on your own names (veil
library model use); it prints the decision and its reason, and veil library
model list keeps it. None of your names, rejections or accepted suggestions
change. The coordinator and certificates are remembered (sealed in the
library): a later join needs no --coordinator; veil library leave forgets
them, veil library status shows them and the ledger.`

// joinFlags are veil library join's flags: the library, the federation
// client's identity and policy flags (clientFlags), and its own.
type joinFlags struct {
	lf        libraryFlags
	c         clientFlags
	minPeople int
	seed      uint64
}

func newLibraryJoinCmd(e *env) *cobra.Command {
	f := &joinFlags{}
	cmd := &cobra.Command{
		Use:   "join",
		Short: "Train the shared model with a federation on your own decisions, then adopt it or not",
		Long:  libraryJoinHelp,
		Example: `  veil fed certs issue alice-library --pki pki --role client
  veil library join --library lib --coordinator coord.example.org:7443 --pki pki --name alice-library --budget-epsilon 4
  veil library status --library lib`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withLibrary(e, &f.lf, func(l *tagging.Library) error { return runLibraryJoin(cmd.Context(), e, f, l) })
		},
	}
	f.lf.register(cmd)
	fl := cmd.Flags()
	c := &f.c
	c.registerIdentity(fl, "this library's", "the coordinator's host:port (default: the one this library joined before)")
	fl.Float64Var(&c.budgetEps, "budget-epsilon", 0, "total privacy budget ε per person of this library, over every round (required)")
	fl.Float64Var(&c.budgetDelta, "budget-delta", 1e-5, "δ of the budget; a round asking for a larger δ is refused")
	fl.Float64Var(&c.minNoise, "min-noise-multiplier", client.DefaultMinNoiseMultiplier, "least DP-SGD noise multiplier σ this library runs; a round asking for less is refused")
	fl.Float64Var(&c.maxClip, "max-clip", client.DefaultMaxClip, "largest DP-SGD clipping norm accepted")
	fl.Float64Var(&c.maxRate, "max-sampling-rate", client.DefaultMaxSamplingRate, "largest share q of this library's people sampled per step, in (0, 1]")
	fl.BoolVar(&c.requireSecAgg, "require-secagg", false, "refuse rounds without secure aggregation (where the coordinator would see this library's update)")
	fl.IntVar(&c.minHonest, "secagg-min-honest", 2, "T: the least honest surviving clients assumed in a secure round; a threshold below it is refused")
	fl.DurationVar(&c.retryFor, "retry-for", 2*time.Minute, "keep retrying an unreachable coordinator this long in all")
	fl.IntVar(&f.minPeople, "min-people", fedjoin.DefaultMinPeople, "the fewest people with named faces this library trains with (fewer: nothing is sent)")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the data order (not of the privacy noise)")
	fl.StringVar(&c.logLevel, "log-level", "warn", "log level: debug, info, warn or error")
	fl.BoolVarP(&c.head.quiet, "quiet", "q", false, "no progress output")
	fl.BoolVar(&c.json, "json", false, "print the report as JSON")
	return cmd
}

// fill takes the coordinator and certificates from the library's record
// when the flags do not give them.
func (f *joinFlags) fill(ctx context.Context, l *tagging.Library) error {
	c := &f.c
	c.unit, c.dir, c.logFormat = client.DefaultUnit, l.Dir(), "text"
	if c.addr != "" {
		return nil
	}
	m, err := fedjoin.ReadMembership(ctx, l)
	if err != nil {
		return err
	}
	if m == nil {
		return errors.New("--coordinator is required: this library has joined no federation")
	}
	c.addr, c.serverName = m.Coordinator, m.ServerName
	if c.pkiDir == "" && c.cert == "" {
		c.pkiDir = m.PKI
	}
	if c.name == "" {
		c.name = m.Client
	}
	return nil
}

func runLibraryJoin(ctx context.Context, e *env, f *joinFlags, l *tagging.Library) error {
	if err := f.fill(ctx, l); err != nil {
		return err
	}
	c := &f.c
	policy, err := c.policy()
	if err != nil {
		return err
	}
	log, err := newLogger(e, c.logLevel, c.logFormat)
	if err != nil {
		return err
	}
	id, serverName, err := dialIdentity(c.addr, c.serverName, c.pkiDir, c.name, c.cert, c.key, c.ca)
	if err != nil {
		return err
	}
	eng, err := e.engine()
	if err != nil {
		return err
	}
	progress := func(msg string) {
		if !c.head.quiet {
			fmt.Fprintf(e.stderr, "veil library join: %s\n", msg)
		}
	}
	sctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := fedjoin.Join(sctx, fedjoin.Options{Library: l, Addr: c.addr, ServerName: serverName, Identity: id, PKI: c.pkiDir,
		Policy: policy, MinPeople: f.minPeople, Trainer: fedjoin.TrainerOptions{Seed: f.seed}, ReconnectFor: c.retryFor,
		Engine: eng, Logger: log, Progress: progress})
	if rep == nil {
		return err
	}
	return f.report(e, rep, err)
}

// report prints the join's report and returns its exit status.
func (f *joinFlags) report(e *env, rep *fedjoin.Report, runErr error) error {
	if f.c.json {
		if err := writeJSON(e.stdout, rep); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(e.stdout, "library %s: %s, %d people, spent ε = %s of %g per person (δ = %g)\n", rep.Client, rep.Outcome, rep.People,
			dp.FormatEpsilon(rep.EpsilonSpent), rep.BudgetEpsilon, rep.Delta)
		if d := rep.Decision; d != nil {
			verdict := "not adopted"
			if d.Adopted {
				verdict = "adopted"
			}
			fmt.Fprintf(e.stdout, "the federation's model (version %d): %s: %s\n", rep.Imported, verdict, d.Reason)
		}
	}
	switch rep.Outcome {
	case "refused":
		var pe *client.PolicyError
		if errors.As(runErr, &pe) {
			runErr = fmt.Errorf("%w (%s)", runErr, policyFlag[pe.Setting])
		}
		return &exitError{code: exitPolicy, err: runErr}
	case "budget_exhausted":
		return &exitError{code: exitBudget, err: runErr}
	}
	return runErr
}

func newLibraryLeaveCmd(e *env) *cobra.Command {
	var lf libraryFlags
	cmd := &cobra.Command{
		Use:   "leave",
		Short: "Forget the federation this library joined (its ledger stays)",
		Long: `Forget the coordinator and certificates this library joined with (veil library
join). The library's privacy ledger stays: what was spent on your people stays
spent, and a later join is charged on top of it. Models imported from the
federation stay too (veil library model list; rollback returns to the one
in use before).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withLibrary(e, &lf, func(l *tagging.Library) error {
				had, err := fedjoin.Leave(cmd.Context(), l)
				if err != nil {
					return err
				}
				if !had {
					fmt.Fprintln(e.stdout, "this library has joined no federation")
					return nil
				}
				fmt.Fprintln(e.stdout, "left the federation; the library's privacy ledger is kept")
				return nil
			})
		},
	}
	lf.register(cmd)
	return cmd
}

// printFederation adds the federation lines to veil library status.
func printFederation(e *env, st *fedjoin.Status) {
	w := e.stdout
	if m := st.Member; m != nil {
		fmt.Fprintf(w, "federation  %s as %s (joined %s)\n", m.Coordinator, m.Client, m.JoinedAt.Format("2006-01-02 15:04"))
		if r := m.Last; r != nil {
			fmt.Fprintf(w, "  last run: %s, %d people", r.Outcome, r.People)
			if r.Decision != nil {
				fmt.Fprintf(w, "; model version %d adopted: %v (%s)", r.Imported, r.Decision.Adopted, r.Decision.Reason)
			}
			fmt.Fprintln(w)
		}
	}
	if l := st.Ledger; l != nil {
		fmt.Fprintf(w, "privacy ledger  ε = %s of %g per person (δ = %g), %d charges\n", dp.FormatEpsilon(l.Spent), l.Budget.Epsilon, l.Budget.Delta, l.Charges)
	}
}

// registerIdentity adds the flags of the coordinator's address and of a
// federation client's certificate (veil fed client, veil library join);
// whose is "this client's" or "this library's".
func (f *clientFlags) registerIdentity(fl *pflag.FlagSet, whose, addrHelp string) {
	fl.StringVar(&f.addr, "coordinator", "", addrHelp)
	fl.StringVar(&f.serverName, "server-name", "", "name the coordinator's certificate must carry (default: the host of --coordinator)")
	fl.StringVar(&f.pkiDir, "pki", "", "folder holding NAME.crt, NAME.key and ca.crt")
	fl.StringVar(&f.name, "name", "", whose+" certificate name in --pki (its id)")
	fl.StringVar(&f.cert, "cert", "", whose+" certificate (instead of --pki)")
	fl.StringVar(&f.key, "key", "", whose+" private key (instead of --pki)")
	fl.StringVar(&f.ca, "ca", "", "the authority's certificate (instead of --pki)")
}
