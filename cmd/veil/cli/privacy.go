package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/dp"
	"github.com/veil-privacy/veil/dp/dplc"
	"github.com/veil-privacy/veil/dp/pate"
)

func newPrivacyCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "privacy",
		Short: "Privacy accounting and mechanisms: ε of a DP-SGD schedule, noise calibration, DPLC, noisy votes",
		Long: `Differential-privacy tools. ε is reported in nats for the add/remove-one
adjacency, and every report names its privacy unit (--unit): identity (one
person with all their faces, the default for face data) or example (one
image). The RDP accountant computes ε as Opacus and TF Privacy do (Mironov et
al. 2019 bounds, Balle et al. 2020 conversion) over orders 1.01…1.09,
1.1…10.9, 11…63 and 64…4096 (so any ε above 0.000536 at δ = 1e-5 is
reachable); the PLD accountant composes the privacy loss distribution by
FFT and is tighter. epsilon and noise account, by default, the mechanism
veil train and veil fed run, the discrete Gaussian (--mechanism).`,
	}
	cmd.AddCommand(newPrivacyEpsilonCmd(e), newPrivacyNoiseCmd(e), newPrivacyDPLCCmd(e), newPrivacyPATECmd(e), newPrivacyLedgerCmd(e))
	return cmd
}

// privacyUnitHelp documents --unit.
const privacyUnitHelp = "privacy unit the ε protects: identity (one person and all their faces; records must then be sampled and clipped per person) or example (one image)"

// checkUnit validates --unit.
func checkUnit(u string) error {
	switch u {
	case "identity", "example":
		return nil
	}
	return fmt.Errorf("--unit must be identity or example, got %q", u)
}

// floatFlag is a float64 flag with no default value: help shows no
// "(default NaN)", and cobra's required-flag check sees whether it was set.
type floatFlag struct {
	v   float64
	set bool
}

func (f *floatFlag) String() string {
	if !f.set {
		return ""
	}
	return strconv.FormatFloat(f.v, 'g', -1, 64)
}

func (f *floatFlag) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("%q is not a number", s)
	}
	f.v, f.set = v, true
	return nil
}

func (f *floatFlag) Type() string { return "float" }

// checkScheduleFlags validates the flags of a DP-SGD schedule, naming the
// flag at fault.
func checkScheduleFlags(q float64, steps int) error {
	if math.IsNaN(q) || q <= 0 || q > 1 {
		return fmt.Errorf("--sampling-rate must be in (0, 1] (the probability that a record takes part in a step), got %g", q)
	}
	if steps < 1 {
		return fmt.Errorf("--steps must be at least 1, got %d", steps)
	}
	return nil
}

// checkPositiveFlag validates a flag that must be a positive finite number.
func checkPositiveFlag(name string, v float64) error {
	if !(v > 0) || math.IsInf(v, 0) {
		return fmt.Errorf("--%s must be a positive number, got %g", name, v)
	}
	return nil
}

// privacyEpsilonReport is the --json output of veil privacy epsilon.
type privacyEpsilonReport struct {
	Epsilon     float64  `json:"epsilon"`
	PrivacyUnit string   `json:"privacy_unit"`
	Order       *float64 `json:"order,omitempty"`
	Accountant  string   `json:"accountant"`
	// Mechanism is what was accounted: discrete (the trainer's) or gaussian.
	Mechanism       string  `json:"mechanism"`
	SamplingRate    float64 `json:"sampling_rate"`
	NoiseMultiplier float64 `json:"noise_multiplier"`
	// Dimension and Clip, with the discrete mechanism, describe DP-SGD's
	// grid; EffectiveNoiseMultiplier is the multiplier charged after the
	// rounding to it.
	Dimension                int     `json:"dimension,omitempty"`
	Clip                     float64 `json:"clip,omitempty"`
	EffectiveNoiseMultiplier float64 `json:"effective_noise_multiplier,omitempty"`
	Steps                    int     `json:"steps"`
	Delta                    float64 `json:"delta"`
}

// mechanismHelp documents --mechanism, --dimension and --clip.
const (
	mechanismHelp = "mechanism accounted: discrete (the Poisson-subsampled discrete Gaussian that veil train, veil fed and their ledgers run and charge) or gaussian (the continuous Gaussian of the papers and of Opacus)"
	dimensionHelp = "with --mechanism discrete: the number of noised coordinates per step (veil train reports it as trainable_parameters); the grid DP-SGD rounds to depends on it, and the ε is then exactly what the trainer charges"
	clipHelp      = "with --dimension: the clip norm C of the run (the grid is relative to it)"
)

// privacySchedule is the mechanism a privacy epsilon or noise command
// accounts, from its flags.
type privacySchedule struct {
	mechanism string
	dimension int
	clip      float64
}

func (p *privacySchedule) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&p.mechanism, "mechanism", "discrete", mechanismHelp)
	fl.IntVar(&p.dimension, "dimension", 0, dimensionHelp)
	fl.Float64Var(&p.clip, "clip", 1, clipHelp)
}

// check validates the flags.
func (p *privacySchedule) check(cmd *cobra.Command) error {
	if err := checkFlags(oneOf("mechanism", p.mechanism, "discrete", "gaussian")); err != nil {
		return err
	}
	dimSet, clipSet := cmd.Flags().Changed("dimension"), cmd.Flags().Changed("clip")
	if p.mechanism == "gaussian" && (dimSet || clipSet) {
		return errors.New("--dimension and --clip describe DP-SGD's grid, which only --mechanism discrete has")
	}
	if clipSet && !dimSet {
		return errors.New("--clip needs --dimension (the grid depends on both)")
	}
	if dimSet && p.dimension < 1 {
		return fmt.Errorf("--dimension must be at least 1 (the number of noised coordinates), got %d", p.dimension)
	}
	return checkPositiveFlag("clip", p.clip)
}

// checkWith checks the flags of a schedule's command: the sampling rate
// q and steps, the positive value of the flag name, δ, the unit, then the
// mechanism's.
func (p *privacySchedule) checkWith(cmd *cobra.Command, q float64, steps int, name string, v, delta float64, unit string) error {
	if err := checkScheduleFlags(q, steps); err != nil {
		return err
	}
	if err := checkPositiveFlag(name, v); err != nil {
		return err
	}
	if err := checkDeltaFlag(delta); err != nil {
		return err
	}
	if err := checkUnit(unit); err != nil {
		return err
	}
	return p.check(cmd)
}

// schedule is the mechanism the flags describe.
func (p *privacySchedule) schedule() dp.Schedule {
	return dp.Schedule{Mechanism: p.mechanism, Dimension: p.dimension, Clip: p.clip}
}

// describe names the mechanism for the text output.
func (p *privacySchedule) describe() string {
	switch {
	case p.mechanism == "gaussian":
		return "continuous Gaussian"
	case p.dimension > 0:
		return fmt.Sprintf("discrete Gaussian on DP-SGD's grid, d = %d, C = %g", p.dimension, p.clip)
	}
	return "discrete Gaussian, before DP-SGD's rounding: give --dimension for the trainer's exact charge"
}

// privacyEpsilonHelp is veil privacy epsilon's --help.
const privacyEpsilonHelp = `Print the ε for which --steps steps of the Poisson-subsampled Gaussian
mechanism with sampling rate --sampling-rate and noise multiplier
--noise-multiplier (noise standard deviation over the clipping norm) are
(ε, --delta)-differentially private.

--mechanism discrete (the default) accounts the mechanism veil train and
veil fed run and charge to their ledgers: the discrete Gaussian (exact
integer noise). Its Rényi DP equals the continuous Gaussian's at integer
orders and is bounded by the chord between them at fractional ones, so at
large ε it is a little above the continuous figure. With --dimension (the
run's number of noised coordinates, trainable_parameters in veil train's
report) and --clip, the rounding to DP-SGD's grid is accounted too, and the
ε is exactly what the trainer and its ledger charge. --mechanism gaussian
accounts the continuous Gaussian, as the papers and Opacus do.

--accountant rdp (default) reports the minimising Rényi order as well;
--accountant pld uses the privacy loss distribution (tighter; its grid is
--pld-interval wide; continuous Gaussian only).

The ε is per --unit: with identity (the default), each sampled record must
hold all of one person's faces and be clipped as one; with example, a person
with k images is protected only at about k times the ε.`

func newPrivacyEpsilonCmd(e *env) *cobra.Command {
	var q, sigma floatFlag
	var delta, pldInterval float64
	var steps int
	var accountant, unit string
	var sched privacySchedule
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "epsilon",
		Short: "ε spent by a DP-SGD schedule (Poisson-subsampled discrete or continuous Gaussian)",
		Long:  privacyEpsilonHelp,
		Example: `  veil privacy epsilon --sampling-rate 0.1268 --noise-multiplier 1.3242 --steps 160 --dimension 557824 --clip 1
  veil privacy epsilon --sampling-rate 0.004267 --noise-multiplier 1.1 --steps 14062 --mechanism gaussian
  veil privacy epsilon --sampling-rate 0.01 --noise-multiplier 1 --steps 1000 --mechanism gaussian --accountant pld --json`,
		Args: needArgs(0, 0, ""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := sched.checkWith(cmd, q.v, steps, "noise-multiplier", sigma.v, delta, unit); err != nil {
				return err
			}
			if err := checkFlags(oneOf("accountant", accountant, "rdp", "pld"), positive("pld-interval", pldInterval)); err != nil {
				return err
			}
			rep := privacyEpsilonReport{PrivacyUnit: unit, Accountant: accountant, Mechanism: sched.mechanism, SamplingRate: q.v,
				NoiseMultiplier: sigma.v, Dimension: sched.dimension, Steps: steps, Delta: delta}
			if sched.dimension > 0 {
				rep.Clip = sched.clip
			}
			if err := rep.account(sched.schedule(), pldInterval); err != nil {
				return err
			}
			if asJSON {
				return writeJSON(e.stdout, rep)
			}
			if rep.Order != nil {
				_, err := fmt.Fprintf(e.stdout, "ε = %s per %s at δ = %g (RDP, order %g; %s)\n", dp.FormatEpsilon(rep.Epsilon), unit, delta, *rep.Order, sched.describe())
				return err
			}
			_, err := fmt.Fprintf(e.stdout, "ε = %s per %s at δ = %g (PLD; %s)\n", dp.FormatEpsilon(rep.Epsilon), unit, delta, sched.describe())
			return err
		},
	}
	fl := cmd.Flags()
	fl.Var(&q, "sampling-rate", "Poisson sampling rate q in (0, 1] (required)")
	fl.Var(&sigma, "noise-multiplier", "noise multiplier σ > 0: noise standard deviation over the clip norm (required)")
	fl.IntVar(&steps, "steps", 0, "number of steps (required)")
	fl.Float64Var(&delta, "delta", 1e-5, "δ in (0, 1)")
	fl.StringVar(&accountant, "accountant", "rdp", "accountant: rdp or pld (pld: --mechanism gaussian only)")
	fl.Float64Var(&pldInterval, "pld-interval", 1e-4, "width of the privacy-loss grid of the PLD accountant (coarser is faster and looser)")
	fl.StringVar(&unit, "unit", "identity", privacyUnitHelp)
	sched.register(cmd)
	fl.BoolVar(&asJSON, "json", false, "print JSON")
	markRequired(cmd, "sampling-rate", "noise-multiplier", "steps")
	return cmd
}

// markRequired marks flags the command cannot run without.
func markRequired(cmd *cobra.Command, names ...string) {
	for _, n := range names {
		_ = cmd.MarkFlagRequired(n) // fails only for an undefined flag name
	}
}

func checkDeltaFlag(d float64) error {
	if math.IsNaN(d) || d <= 0 || d >= 1 {
		return fmt.Errorf("--delta must be strictly between 0 and 1 (the probability that the ε guarantee fails; 1e-5 or below is usual), got %g", d)
	}
	return nil
}

// privacyNoiseReport is the --json output of veil privacy noise.
type privacyNoiseReport struct {
	NoiseMultiplier float64 `json:"noise_multiplier"`
	Epsilon         float64 `json:"epsilon"`
	PrivacyUnit     string  `json:"privacy_unit"`
	Order           float64 `json:"order"`
	Mechanism       string  `json:"mechanism"`
	Dimension       int     `json:"dimension,omitempty"`
	Clip            float64 `json:"clip,omitempty"`
	TargetEpsilon   float64 `json:"target_epsilon"`
	SamplingRate    float64 `json:"sampling_rate"`
	Steps           int     `json:"steps"`
	Delta           float64 `json:"delta"`
}

// account fills in the ε of the schedule r describes, by r.Accountant:
// RDP (with the order) of s's mechanism, or the PLD of the continuous
// Gaussian on a grid pldInterval wide.
func (r *privacyEpsilonReport) account(s dp.Schedule, pldInterval float64) error {
	switch r.Accountant {
	case "rdp":
		eps, order, mu, err := s.Epsilon(r.SamplingRate, r.NoiseMultiplier, r.Steps, r.Delta)
		if err != nil {
			return err
		}
		r.Epsilon, r.Order, r.EffectiveNoiseMultiplier = eps, &order, mu
	case "pld":
		if s.Mechanism != dp.MechanismGaussian {
			return errors.New("--accountant pld accounts the continuous Gaussian only: add --mechanism gaussian, or use --accountant rdp for the discrete Gaussian the trainer runs")
		}
		ev, err := dp.SubsampledGaussianEvent(r.SamplingRate, r.NoiseMultiplier, r.Steps)
		if err != nil {
			return err
		}
		eps, err := dp.PLDEpsilon([]dp.Event{ev}, r.Delta, dp.PLDOptions{Interval: pldInterval})
		switch {
		case errors.Is(err, dp.ErrPLDTooLarge):
			return fmt.Errorf("%w; try --pld-interval %g, or --accountant rdp", err, 10*pldInterval)
		case errors.Is(err, dp.ErrPLDTailMass):
			return fmt.Errorf("%w; --accountant rdp has no such limit", err)
		case err != nil:
			return err
		}
		r.Epsilon = eps
	default:
		return fmt.Errorf("--accountant must be rdp or pld, got %q", r.Accountant)
	}
	return nil
}

// privacyNoiseHelp is veil privacy noise's --help.
const privacyNoiseHelp = `Print the smallest noise multiplier σ (relative precision 1e-4, rounded up)
for which --steps steps at sampling rate --sampling-rate are
(--epsilon, --delta)-DP by the RDP accountant, and the ε it actually gives,
per --unit (see veil privacy epsilon --help).

--mechanism discrete (the default) calibrates the discrete Gaussian that
veil train runs; with --dimension and --clip (the run's noised coordinates
and clip norm) the σ is exactly the one veil train --target-epsilon picks.
--mechanism gaussian calibrates the continuous Gaussian.

A target no amount of noise can reach (0.000536 or below at δ = 1e-5) is
refused with the reason.`

func newPrivacyNoiseCmd(e *env) *cobra.Command {
	var q, eps floatFlag
	var delta float64
	var steps int
	var unit string
	var sched privacySchedule
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "noise",
		Short: "Smallest noise multiplier for which a DP-SGD schedule meets a target ε (RDP)",
		Long:  privacyNoiseHelp,
		Example: `  veil privacy noise --epsilon 8 --sampling-rate 0.1268 --steps 160 --dimension 557824 --clip 1
  veil privacy noise --epsilon 0.1 --sampling-rate 0.01 --steps 1000 --delta 1e-6 --mechanism gaussian --json`,
		Args: needArgs(0, 0, ""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := sched.checkWith(cmd, q.v, steps, "epsilon", eps.v, delta, unit); err != nil {
				return err
			}
			sigma, err := sched.schedule().NoiseMultiplier(q.v, steps, eps.v, delta)
			if err != nil {
				return err
			}
			got, order, _, err := sched.schedule().Epsilon(q.v, sigma, steps, delta)
			if err != nil {
				return err
			}
			rep := privacyNoiseReport{NoiseMultiplier: sigma, Epsilon: got, PrivacyUnit: unit, Order: order, Mechanism: sched.mechanism,
				Dimension: sched.dimension, TargetEpsilon: eps.v, SamplingRate: q.v, Steps: steps, Delta: delta}
			if sched.dimension > 0 {
				rep.Clip = sched.clip
			}
			if asJSON {
				return writeJSON(e.stdout, rep)
			}
			_, err = fmt.Fprintf(e.stdout, "noise multiplier σ = %.5g (ε = %s per %s at δ = %g, order %g; %s)\n", sigma, dp.FormatEpsilon(got), unit, delta, order, sched.describe())
			return err
		},
	}
	fl := cmd.Flags()
	fl.Var(&q, "sampling-rate", "Poisson sampling rate q in (0, 1] (required)")
	fl.IntVar(&steps, "steps", 0, "number of steps (required)")
	fl.Var(&eps, "epsilon", "target ε > 0 (required)")
	fl.Float64Var(&delta, "delta", 1e-5, "δ in (0, 1)")
	fl.StringVar(&unit, "unit", "identity", privacyUnitHelp)
	sched.register(cmd)
	fl.BoolVar(&asJSON, "json", false, "print JSON")
	markRequired(cmd, "sampling-rate", "steps", "epsilon")
	return cmd
}

// openInput opens a named file, or standard input for "-".
func openInput(e *env, name string) (io.ReadCloser, error) {
	if name == "-" {
		return io.NopCloser(e.stdin), nil
	}
	f, err := os.Open(name)
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return nil, fmt.Errorf("cannot open %s: %w", name, pe.Err) // the path once
	}
	if err != nil {
		return nil, err
	}
	if st, err := f.Stat(); err == nil && st.IsDir() {
		f.Close()
		return nil, fmt.Errorf("%s is a folder; give a file", name)
	}
	return f, nil
}

// privacyDPLCCluster is one released cluster in veil privacy dplc's output.
type privacyDPLCCluster struct {
	Center []float32 `json:"center"`
	// Mass is the norm of the noisy cap sum (released).
	Mass float64 `json:"mass"`
	// Diagnostics, computed from private data, only with --diagnostics.
	Size   int     `json:"size,omitempty"`
	Cosine float64 `json:"cosine_to_exact,omitempty"`
}

// privacyDPLCLedger is the budget state after a veil privacy dplc run.
type privacyDPLCLedger struct {
	File          string  `json:"file"`
	Dataset       string  `json:"dataset"`
	SpentEpsilon  float64 `json:"spent_epsilon"`
	BudgetEpsilon float64 `json:"budget_epsilon"`
	BudgetDelta   float64 `json:"budget_delta"`
}

// privacyDPLCReport is the --json output of veil privacy dplc.
type privacyDPLCReport struct {
	PrivacyUnit string               `json:"privacy_unit"`
	Dimension   int                  `json:"dimension"`
	Clusters    []privacyDPLCCluster `json:"clusters"`
	Epsilon     float64              `json:"epsilon"`
	Delta       float64              `json:"delta"`
	// AccountantEps is the RDP accountant's ε for this run at Delta.
	AccountantEps float64           `json:"accountant_epsilon"`
	SeedNoise     float64           `json:"seed_noise"`
	CentreNoise   float64           `json:"centre_noise"`
	Occupancy     float64           `json:"occupancy_ratio"`
	Ledger        privacyDPLCLedger `json:"ledger"`
	// Centres (the number of input rows) is private: only with --diagnostics.
	Centres int `json:"centres,omitempty"`
}

// dplcHelp is veil privacy dplc's --help.
const dplcHelp = `Release exactly --clusters noisy, normalised centres of spherical caps of
angular radius --margin over a client's class centres, after PrivacyFace's
Algorithm 1 but differentially private end to end: the whole run is
(--epsilon, --delta)-DP for one class centre, that is one identity, added or
removed (the privacy unit). The caps are seeded from a noisy histogram of a
public random partition of the sphere, and each centre is the normalised
noisy sum of its cap, with noise set by the budget alone (see the dp/dplc
package documentation for the proof). Nothing else about the data is
released: not the number of centres in the file, nor the cluster sizes.

Every run is charged to the privacy ledger of the data set --dataset
(required: the name every command uses for these people, e.g. lfw) in the
ledger folder (--ledger-dir; default $VEIL_LEDGERS, else
~/.local/share/veil/ledgers), which veil train and veil fed client charge
too; a run that would take any member past the budget is refused before
anything is computed or printed. --members FILE names the people whose
centres CENTRES.json holds (one name per line, one per centre; the ledger
keeps keyed fingerprints, not names): only they are charged. Without it the
run is charged to every member of the data set, present and future. Set
the budget with --budget-epsilon and --budget-delta on the data set's first
charge; once anything is charged it can only be lowered (a raise or another
δ needs veil privacy ledger reset).

Input file (use - for standard input): a JSON
array with one array of numbers per class centre, all of the same
dimension, e.g.
  [[0.12, -0.05, ...], [0.03, 0.22, ...], ...]
Centres are normalised before clustering; zero or non-finite rows are refused.

Each released centre comes with its mass, the norm of its noisy sum
(released too); the square of the mass is about the square of the exact
sum's norm plus centre_noise²·dimension, so a consumer can tell centres
that are mostly noise. --diagnostics adds the number of input centres, each
cluster's size and cosine to the exact mean: computed from the private
centres without noise, they must not be shared.`

// dplcFlags are veil privacy dplc's flags.
type dplcFlags struct {
	p                                           dplc.Params
	ledgerFile, dataset, membersFile, ledgerDir string
	budget                                      dp.Budget
	diagnostics, json                           bool
}

func newPrivacyDPLCCmd(e *env) *cobra.Command {
	f := &dplcFlags{}
	cmd := &cobra.Command{
		Use:   "dplc CENTRES.json --dataset NAME",
		Short: "Differentially private local clustering of class centres (PrivacyFace, private end to end)",
		Long:  dplcHelp,
		Example: `  veil privacy dplc centres.json --dataset lfw --members people.txt --budget-epsilon 4 --budget-delta 1e-5
  veil privacy dplc centres.json --dataset lfw --clusters 4 --epsilon 1 --json`,
		Args: needArgs(1, 1, "file of class centres (or - for standard input)"),
		RunE: func(cmd *cobra.Command, args []string) error { return runPrivacyDPLC(e, cmd, f, args[0]) },
	}
	fl := cmd.Flags()
	fl.Float64Var(&f.p.Margin, "margin", 1.3, "cluster margin ρ in radians, in (0, π)")
	fl.IntVar(&f.p.Clusters, "clusters", 1, "number of centres released, exactly (at most 2^seed-bits)")
	fl.IntVar(&f.p.SeedBits, "seed-bits", dplc.DefaultSeedBits, "hyperplanes of the public partition that seeds the caps (2^bits cells)")
	fl.Float64Var(&f.p.Epsilon, "epsilon", 1, "ε of the whole run, per identity")
	fl.Float64Var(&f.p.Delta, "delta", 1e-5, "δ of the whole run")
	fl.StringVar(&f.ledgerFile, "ledger", "", "gone: use --dataset and --ledger-dir")
	_ = fl.MarkHidden("ledger")
	fl.StringVar(&f.dataset, "dataset", "", "the data set the centres come from, whose privacy ledger is charged (required; e.g. lfw)")
	fl.StringVar(&f.membersFile, "members", "", "file naming the people of the centres, one per line (default: charge every member of the data set)")
	addLedgerDirFlag(fl, &f.ledgerDir)
	fl.Float64Var(&f.budget.Epsilon, "budget-epsilon", 0, "set the data set's total ε budget (needed on its first charge; afterwards it can only be lowered)")
	fl.Float64Var(&f.budget.Delta, "budget-delta", 0, "set the δ at which the data set's budget is counted (with --budget-epsilon)")
	fl.BoolVar(&f.diagnostics, "diagnostics", false, "also print private diagnostics (number of centres, sizes, cosine to the exact mean)")
	fl.BoolVar(&f.json, "json", false, "print JSON")
	return cmd
}

func runPrivacyDPLC(e *env, cmd *cobra.Command, f *dplcFlags, name string) error {
	p := f.p
	err := checkFlags(
		positive("epsilon", p.Epsilon),
		openUnit("delta", p.Delta),
		intIn("seed-bits", p.SeedBits, 1, dplc.MaxSeedBits),
		intIn("clusters", p.Clusters, 1, 1<<max(p.SeedBits, 0)),
		flagCheck{"margin", p.Margin > 0 && p.Margin < math.Pi, "an angle in radians strictly between 0 and π (3.14159…)", p.Margin},
	)
	if err != nil {
		return err
	}
	if err := p.Validate(); err != nil {
		return err
	}
	centres, err := readDPLCCentres(e, name)
	if err != nil {
		return err
	}
	occ, err := dplc.OccupancyRatio(len(centres[0]), p.Margin)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	charge, err := f.charge(cmd, len(centres))
	if err != nil {
		return err
	}
	// Release charges the ledger before computing anything: the charge is
	// on disk before a single noisy value exists.
	res, led, err := dplc.Release(centres, p, charge, nil)
	if err != nil {
		return err
	}
	rep := dplcReport(res, p, led, centres, occ, f.diagnostics)
	if f.json {
		return writeJSON(e.stdout, rep)
	}
	fmt.Fprintf(e.stdout, "released %d noisy cluster centres of dimension %d (privacy unit: one identity)\n", len(rep.Clusters), rep.Dimension)
	for i, c := range rep.Clusters {
		if f.diagnostics {
			fmt.Fprintf(e.stdout, "  cluster %d: mass %.1f, size %d, cosine to exact mean %.3f\n", i+1, c.Mass, c.Size, c.Cosine)
		} else {
			fmt.Fprintf(e.stdout, "  cluster %d: mass %.1f\n", i+1, c.Mass)
		}
	}
	_, err = fmt.Fprintf(e.stdout, "cost (ε, δ) = (%g, %g) (RDP accountant: ε = %s); the people of data set %q in this release have spent up to ε = %s of %g at δ = %g; cap occupancy ratio %.3g\n",
		rep.Epsilon, rep.Delta, dp.FormatEpsilon(rep.AccountantEps), rep.Ledger.Dataset, dp.FormatEpsilon(rep.Ledger.SpentEpsilon), rep.Ledger.BudgetEpsilon, rep.Ledger.BudgetDelta, occ)
	return err
}

// readDPLCCentres reads the class centres of the file name (- for
// standard input) and checks them, so that a refused input costs nothing.
func readDPLCCentres(e *env, name string) ([][]float32, error) {
	in, err := openInput(e, name)
	if err != nil {
		return nil, err
	}
	centres, err := dplc.ReadCentres(in)
	in.Close()
	if err == nil {
		err = dplc.CheckCentres(centres)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return centres, nil
}

// charge checks the ledger's flags and returns the ledger a release of n
// centres is charged to.
func (f *dplcFlags) charge(cmd *cobra.Command, n int) (dplc.Charge, error) {
	if f.ledgerFile != "" {
		return dplc.Charge{}, errors.New("--ledger FILE is gone: ledgers are now kept per data set in the ledger folder (--ledger-dir), shared with veil train and veil fed client; name the data set with --dataset (its old ledger file is not read)")
	}
	if f.dataset == "" {
		return dplc.Charge{}, errors.New("--dataset is required: every release is charged to the privacy ledger of the data set it comes from (e.g. --dataset lfw)")
	}
	if err := (dp.DataSet{Name: f.dataset, Unit: dp.UnitIdentity}).Validate(); err != nil {
		return dplc.Charge{}, fmt.Errorf("--dataset: %w", err)
	}
	c := dplc.Charge{DataSet: f.dataset, Budget: f.budget}
	var err error
	if f.membersFile != "" {
		if c.Members, err = readMembers(f.membersFile); err != nil {
			return dplc.Charge{}, err
		}
		if len(c.Members) != n {
			return dplc.Charge{}, fmt.Errorf("--members %s names %d people for %d centres: give one name per centre", f.membersFile, len(c.Members), n)
		}
	}
	if c.Ledgers, err = ledgerDir(f.ledgerDir); err != nil {
		return dplc.Charge{}, err
	}
	changed := cmd.Flags().Changed
	c.SetBudget = changed("budget-epsilon") || changed("budget-delta")
	if c.SetBudget && !(changed("budget-epsilon") && changed("budget-delta")) {
		return dplc.Charge{}, errors.New("give both --budget-epsilon and --budget-delta")
	}
	return c, nil
}

// dplcReport is veil privacy dplc's report of a release at p from
// centres; the private diagnostics only if asked.
func dplcReport(res dplc.Result, p dplc.Params, led dplc.Charged, centres [][]float32, occ float64, diagnostics bool) privacyDPLCReport {
	rep := privacyDPLCReport{PrivacyUnit: "identity", Dimension: len(centres[0]), Clusters: []privacyDPLCCluster{},
		Epsilon: p.Epsilon, Delta: p.Delta, AccountantEps: res.Epsilon, SeedNoise: res.SeedNoise, CentreNoise: res.CentreNoise,
		Occupancy: occ, Ledger: privacyDPLCLedger{File: led.File, Dataset: led.DataSet, SpentEpsilon: led.SpentEpsilon,
			BudgetEpsilon: led.Budget.Epsilon, BudgetDelta: led.Budget.Delta}}
	if diagnostics {
		rep.Centres = len(centres)
	}
	for _, c := range res.Clusters {
		pc := privacyDPLCCluster{Center: c.Center, Mass: c.Mass}
		if diagnostics {
			pc.Size, pc.Cosine = c.Size, c.CosineToExact()
		}
		rep.Clusters = append(rep.Clusters, pc)
	}
	return rep
}

// readMembers reads a file of member names, one per line (blank lines
// skipped), refusing duplicates.
func readMembers(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--members: %w", err)
	}
	var out []string
	seen := map[string]bool{}
	for i, line := range strings.Split(string(b), "\n") {
		n := strings.TrimSpace(line)
		if n == "" {
			continue
		}
		if seen[n] {
			return nil, fmt.Errorf("--members %s: line %d repeats a name", path, i+1)
		}
		seen[n] = true
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--members %s names nobody", path)
	}
	return out, nil
}

// privacyPATEReport is the --json output of veil privacy pate.
type privacyPATEReport struct {
	pate.Analysis
	PrivacyUnit string  `json:"privacy_unit"`
	Gamma       float64 `json:"gamma"`
	Labels      []int   `json:"labels,omitempty"`
}

// privacyPATEHelp is veil privacy pate's --help.
const privacyPATEHelp = `Analyse the noisy-vote aggregation arg max_j (n_j + Lap(1/γ)) over a file of
vote histograms, one per released label: the data-dependent moments bound
(LightFace Theorems 3–4), the data-independent one (Theorem 2) and the
paper's strong-composition figure, each as ε at --delta. --labels also
draws the noisy labels.

The data-dependent ε depends on the votes and is not itself private. The ε
values are per --unit: identity (the default) when each teacher's data holds
all the faces of its people, so one person changes one teacher's vote.

Input file (use - for standard input): a JSON array with one array of
non-negative vote counts per answer (at least 2 classes each), e.g.
  [[48, 1, 1], [20, 25, 5]]`

func newPrivacyPATECmd(e *env) *cobra.Command {
	var gamma, delta float64
	var unit string
	var labels, asJSON bool
	cmd := &cobra.Command{
		Use:   "pate HISTOGRAMS.json",
		Short: "Privacy of noisy-vote labels (PATE / LightFace Section 4)",
		Long:  privacyPATEHelp,
		Example: `  veil privacy pate votes.json
  veil privacy pate --gamma 0.05 --labels --json votes.json`,
		Args: needArgs(1, 1, "file of vote histograms (or - for standard input)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFlags(positive("gamma", gamma), openUnit("delta", delta)); err != nil {
				return err
			}
			in, err := openInput(e, args[0])
			if err != nil {
				return err
			}
			if err := checkUnit(unit); err != nil {
				in.Close()
				return err
			}
			hists, err := pate.ReadHistograms(in)
			in.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			a, err := pate.Analyze(hists, gamma, delta, nil)
			if err != nil {
				return err
			}
			rep := privacyPATEReport{Analysis: a, PrivacyUnit: unit, Gamma: gamma}
			if labels {
				if rep.Labels, err = pate.NoisyLabels(hists, gamma, nil); err != nil {
					return err
				}
			}
			if asJSON {
				return writeJSON(e.stdout, rep)
			}
			fmt.Fprintf(e.stdout, "%d answers, γ = %g, δ = %g, ε per %s\n", a.Answers, gamma, delta, unit)
			fmt.Fprintf(e.stdout, "  data-dependent ε     %s (moment %g)\n", dp.FormatEpsilon(a.Epsilon), a.Moment)
			fmt.Fprintf(e.stdout, "  data-independent ε   %s\n", dp.FormatEpsilon(a.DataIndependentEpsilon))
			fmt.Fprintf(e.stdout, "  strong composition ε %s\n", dp.FormatEpsilon(a.StrongCompositionEpsilon))
			if labels {
				fmt.Fprintf(e.stdout, "  labels %v\n", rep.Labels)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.Float64Var(&gamma, "gamma", 0.05, "γ: the noise is Lap(1/γ)")
	fl.Float64Var(&delta, "delta", 1e-5, "δ in (0, 1)")
	fl.BoolVar(&labels, "labels", false, "also draw and print the noisy labels")
	fl.StringVar(&unit, "unit", "identity", privacyUnitHelp)
	fl.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
