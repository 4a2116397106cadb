package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/veil-privacy/veil/dp"
)

// ledgerDirHelp documents --ledger-dir, shared by every command that
// charges or reads a privacy ledger.
const ledgerDirHelp = "privacy ledger folder: one ledger per data set and unit, shared by every command that spends on the same people (default $" + dp.EnvLedgers + ", else ~/.local/share/veil/ledgers)"

// addLedgerDirFlag registers --ledger-dir.
func addLedgerDirFlag(fl *pflag.FlagSet, p *string) { fl.StringVar(p, "ledger-dir", "", ledgerDirHelp) }

// ledgerDir returns --ledger-dir, or the default folder.
func ledgerDir(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	return dp.DefaultLedgerDir()
}

func newPrivacyLedgerCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ledger",
		Short: "Show or reset the privacy ledgers of data sets",
		Long: `A privacy ledger belongs to a data set (a name such as lfw) and a privacy
unit (identity or example), not to a command's output: veil train --dp,
veil privacy dplc and veil fed client all charge the ledger of the data set
they read, in the ledger folder (--ledger-dir; default $` + dp.EnvLedgers + `, else
~/.local/share/veil/ledgers). Each charge records the members it used
(people, or images for the example unit) as keyed fingerprints, never
names; a member's ε composes every charge that used them, and a charge is
refused if it would take any member past the budget.

Once anything is charged, the budget can only be lowered: a larger ε or
another δ needs an explicit reset (veil privacy ledger reset --reason),
which is recorded in the ledger's history with its time and reason.`,
	}
	cmd.AddCommand(newPrivacyLedgerShowCmd(e), newPrivacyLedgerResetCmd(e))
	return cmd
}

// ledgerReport is one ledger in veil privacy ledger's output.
type ledgerReport struct {
	DataSet string    `json:"data_set"`
	Unit    string    `json:"unit"`
	File    string    `json:"file"`
	Budget  dp.Budget `json:"budget"`
	// WorstEpsilon is the largest ε of any member, at the budget's δ.
	WorstEpsilon float64 `json:"worst_epsilon"`
	// Members counts the members named by a charge.
	Members int               `json:"members"`
	Groups  []dp.GroupSpent   `json:"groups"`
	History []dp.HistoryEntry `json:"history"`
}

func reportLedger(d *dp.LedgerDir, l *dp.DataLedger) (ledgerReport, error) {
	b, _ := l.Budget()
	s, err := l.Spent(nil)
	if err != nil {
		return ledgerReport{}, err
	}
	g, err := l.Groups()
	if err != nil {
		return ledgerReport{}, err
	}
	set := l.DataSet()
	return ledgerReport{DataSet: set.Name, Unit: set.Unit, File: d.Path(set), Budget: b, WorstEpsilon: s.Epsilon,
		Members: s.Members, Groups: g, History: l.History()}, nil
}

// printLedger writes r for people.
func (e *env) printLedger(r ledgerReport, history bool) {
	w := e.stdout
	fmt.Fprintf(w, "data set %s, per %s (%s)\n", r.DataSet, r.Unit, r.File)
	fmt.Fprintf(w, "  budget ε = %g at δ = %g; worst member has spent ε = %s (%d members named by charges)\n",
		r.Budget.Epsilon, r.Budget.Delta, dp.FormatEpsilon(r.WorstEpsilon), r.Members)
	for _, g := range r.Groups {
		who := fmt.Sprintf("%d members", g.Members)
		switch {
		case g.Members < 0 && len(r.Groups) == 1:
			who = "every member"
		case g.Members < 0:
			who = "every other member"
		}
		fmt.Fprintf(w, "  %-20s ε = %s (%d mechanisms)\n", who, dp.FormatEpsilon(g.Epsilon), g.Events)
	}
	if !history {
		return
	}
	fmt.Fprintln(w, "  history:")
	for _, h := range r.History {
		fmt.Fprintf(w, "    %s  %-6s", h.Time.Format(time.RFC3339), h.Kind)
		switch h.Kind {
		case dp.HistoryCharge:
			who := fmt.Sprintf("%d members", h.Members)
			if h.Members < 0 {
				who = "every member"
			}
			fmt.Fprintf(w, "  %q on %s: ε = %s alone, worst member then ε = %s", h.Note, who, dp.FormatEpsilon(h.ChargeEpsilon), dp.FormatEpsilon(h.Worst))
		case dp.HistoryBudget:
			fmt.Fprintf(w, "  budget ε = %g at δ = %g", h.Budget.Epsilon, h.Budget.Delta)
		case dp.HistoryReset:
			fmt.Fprintf(w, "  %q: budget ε = %g at δ = %g (worst member had spent ε = %s)", h.Note, h.Budget.Epsilon, h.Budget.Delta, dp.FormatEpsilon(h.Worst))
		}
		fmt.Fprintln(w)
	}
}

// readLedgers reports the ledgers of the folder p, those of the data set
// name and of unit only when they are not empty.
func readLedgers(p, name, unit string) ([]ledgerReport, error) {
	d, err := dp.OpenLedgerDir(p)
	if err != nil {
		return nil, err
	}
	sets, err := d.List()
	if err != nil {
		return nil, err
	}
	out := []ledgerReport{}
	for _, s := range sets {
		if name != "" && s.Name != name || unit != "" && s.Unit != unit {
			continue
		}
		l, err := d.Read(s)
		if err != nil {
			return nil, err
		}
		r, err := reportLedger(d, l)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func newPrivacyLedgerShowCmd(e *env) *cobra.Command {
	var dir, unit string
	var asJSON, history bool
	cmd := &cobra.Command{
		Use:   "show [DATASET]",
		Short: "Show what each data set's members have spent, the worst member, and the history",
		Long: `Show the ledgers in the ledger folder (or DATASET's): the budget, the worst
member's ε, the groups of members with the same charges and their ε, and
(--history, always with --json) every budget change, charge and reset with
its time. Members appear as counts: the ledger keeps keyed fingerprints,
never names.`,
		Example: `  veil privacy ledger show
  veil privacy ledger show lfw --unit identity --history
  veil privacy ledger show --json`,
		Args: needArgs(0, 1, "data set name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if unit != "" {
				if err := checkUnit(unit); err != nil {
					return err
				}
			}
			p, err := ledgerDir(dir)
			if err != nil {
				return err
			}
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			ledgers, err := readLedgers(p, name, unit)
			if err != nil {
				return err
			}
			out := struct {
				LedgerDir string         `json:"ledger_dir"`
				Ledgers   []ledgerReport `json:"ledgers"`
			}{LedgerDir: p, Ledgers: ledgers}
			if len(args) == 1 && len(out.Ledgers) == 0 {
				return fmt.Errorf("no ledger for data set %q in %s", args[0], p)
			}
			if asJSON {
				return writeJSON(e.stdout, out)
			}
			if len(out.Ledgers) == 0 {
				fmt.Fprintf(e.stdout, "no ledgers in %s\n", p)
			}
			for _, r := range out.Ledgers {
				e.printLedger(r, history)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	addLedgerDirFlag(fl, &dir)
	fl.StringVar(&unit, "unit", "", "only the ledgers of this privacy unit: identity or example")
	fl.BoolVar(&history, "history", false, "also list every budget change, charge and reset")
	fl.BoolVar(&asJSON, "json", false, "print JSON (history included)")
	return cmd
}

// ledgerResetHelp is veil privacy ledger reset's --help.
const ledgerResetHelp = `Reset the ledger of DATASET (in --unit): forget its charges, so that every
member starts again at ε = 0, or with --keep-charges keep them and only
change the budget. --budget-epsilon and --budget-delta set the new budget
(any ε, any δ; default: the current one). This is the only way to raise a
budget or change its δ once anything is charged: it is the owner's
decision, and the ledger's history keeps it for good, with the time, the
--reason and the worst ε the reset forgave. The releases already made
are not undone by a reset: their privacy loss is real; the reset only
stops counting it.`

// resetLedger resets the ledger of set in the folder p, which must
// exist, and reports it.
func resetLedger(p string, set dp.DataSet, o dp.ResetOptions) (ledgerReport, error) {
	d, err := dp.OpenLedgerDir(p)
	if err != nil {
		return ledgerReport{}, err
	}
	if _, err := d.Read(set); err != nil {
		return ledgerReport{}, err
	}
	l, err := d.Update(set, func(l *dp.DataLedger) error { return l.Reset(o) })
	if err != nil {
		return ledgerReport{}, err
	}
	return reportLedger(d, l)
}

func newPrivacyLedgerResetCmd(e *env) *cobra.Command {
	var dir, unit, reason string
	var budget dp.Budget
	var keep, asJSON bool
	cmd := &cobra.Command{
		Use:   "reset DATASET --reason TEXT",
		Short: "The owner's explicit reset of a data set's ledger (recorded in its history)",
		Long:  ledgerResetHelp,
		Example: `  veil privacy ledger reset lfw --reason "new consent, budget raised" --budget-epsilon 8 --keep-charges
  veil privacy ledger reset lfw --unit example --reason "data set replaced" --json`,
		Args: needArgs(1, 1, "data set name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkUnit(unit); err != nil {
				return err
			}
			if reason == "" {
				return errors.New("--reason is required: every reset is recorded in the ledger's history with its reason")
			}
			var nb *dp.Budget
			if cmd.Flags().Changed("budget-epsilon") || cmd.Flags().Changed("budget-delta") {
				if !(cmd.Flags().Changed("budget-epsilon") && cmd.Flags().Changed("budget-delta")) {
					return errors.New("give both --budget-epsilon and --budget-delta")
				}
				if err := checkFlags(positive("budget-epsilon", budget.Epsilon), openUnit("budget-delta", budget.Delta)); err != nil {
					return err
				}
				nb = &budget
			}
			p, err := ledgerDir(dir)
			if err != nil {
				return err
			}
			r, err := resetLedger(p, dp.DataSet{Name: args[0], Unit: unit}, dp.ResetOptions{Reason: reason, Budget: nb, KeepCharges: keep})
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(e.stdout, r)
			}
			e.printLedger(r, false)
			return nil
		},
	}
	fl := cmd.Flags()
	addLedgerDirFlag(fl, &dir)
	fl.StringVar(&unit, "unit", "identity", "privacy unit of the ledger: identity or example")
	fl.StringVar(&reason, "reason", "", "why the ledger is reset (required; kept in its history)")
	fl.Float64Var(&budget.Epsilon, "budget-epsilon", 0, "the new ε budget (with --budget-delta; default: the current budget)")
	fl.Float64Var(&budget.Delta, "budget-delta", 0, "the new δ (with --budget-epsilon)")
	fl.BoolVar(&keep, "keep-charges", false, "keep every charge and change only the budget (it must cover the worst member)")
	fl.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
