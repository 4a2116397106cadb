package cli

import (
	"fmt"
	"io"
	"math"
	"os"

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
adjacency. The RDP accountant computes ε as Opacus and TF Privacy do (Mironov et al.
2019 bounds, Balle et al. 2020 conversion, orders 1.1…10.9 and 12…63); the PLD
accountant composes the privacy loss distribution by FFT and is tighter.`,
	}
	cmd.AddCommand(newPrivacyEpsilonCmd(e), newPrivacyNoiseCmd(e), newPrivacyDPLCCmd(e), newPrivacyPATECmd(e))
	return cmd
}

// privacyEpsilonReport is the --json output of veil privacy epsilon.
type privacyEpsilonReport struct {
	Epsilon         float64  `json:"epsilon"`
	Order           *float64 `json:"order,omitempty"`
	Accountant      string   `json:"accountant"`
	SamplingRate    float64  `json:"sampling_rate"`
	NoiseMultiplier float64  `json:"noise_multiplier"`
	Steps           int      `json:"steps"`
	Delta           float64  `json:"delta"`
}

func newPrivacyEpsilonCmd(e *env) *cobra.Command {
	var q, sigma, delta float64
	var steps int
	var accountant string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "epsilon",
		Short: "ε spent by a DP-SGD schedule (Poisson-subsampled Gaussian)",
		Long: `Print the ε for which --steps steps of the Poisson-subsampled Gaussian
mechanism with sampling rate --sampling-rate and noise multiplier
--noise-multiplier (noise standard deviation over the clipping norm) are
(ε, --delta)-differentially private.

--accountant rdp (default) reports the minimising Rényi order as well;
--accountant pld uses the privacy loss distribution (tighter).

Example: veil privacy epsilon --sampling-rate 0.004267 --noise-multiplier 1.1 --steps 14062 --delta 1e-5 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rep := privacyEpsilonReport{Accountant: accountant, SamplingRate: q, NoiseMultiplier: sigma, Steps: steps, Delta: delta}
			switch accountant {
			case "rdp":
				eps, order, err := dp.ScheduleEpsilon(q, sigma, steps, delta)
				if err != nil {
					return err
				}
				rep.Epsilon, rep.Order = eps, &order
			case "pld":
				ev, err := dp.SubsampledGaussianEvent(q, sigma, steps)
				if err != nil {
					return err
				}
				if err := checkDeltaFlag(delta); err != nil {
					return err
				}
				eps, err := dp.PLDEpsilon([]dp.Event{ev}, delta, dp.PLDOptions{})
				if err != nil {
					return err
				}
				rep.Epsilon = eps
			default:
				return fmt.Errorf("--accountant must be rdp or pld, got %q", accountant)
			}
			if asJSON {
				return writeJSON(e.stdout, rep)
			}
			if rep.Order != nil {
				_, err := fmt.Fprintf(e.stdout, "ε = %.4f at δ = %g (RDP, order %g)\n", rep.Epsilon, delta, *rep.Order)
				return err
			}
			_, err := fmt.Fprintf(e.stdout, "ε = %.4f at δ = %g (PLD)\n", rep.Epsilon, delta)
			return err
		},
	}
	fl := cmd.Flags()
	fl.Float64Var(&q, "sampling-rate", math.NaN(), "Poisson sampling rate q in (0, 1] (required)")
	fl.Float64Var(&sigma, "noise-multiplier", math.NaN(), "noise multiplier σ > 0 (required)")
	fl.IntVar(&steps, "steps", 0, "number of steps (required)")
	fl.Float64Var(&delta, "delta", 1e-5, "δ in (0, 1)")
	fl.StringVar(&accountant, "accountant", "rdp", "accountant: rdp or pld")
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
		return fmt.Errorf("--delta must be in (0, 1), got %g", d)
	}
	return nil
}

// privacyNoiseReport is the --json output of veil privacy noise.
type privacyNoiseReport struct {
	NoiseMultiplier float64 `json:"noise_multiplier"`
	Epsilon         float64 `json:"epsilon"`
	Order           float64 `json:"order"`
	TargetEpsilon   float64 `json:"target_epsilon"`
	SamplingRate    float64 `json:"sampling_rate"`
	Steps           int     `json:"steps"`
	Delta           float64 `json:"delta"`
}

func newPrivacyNoiseCmd(e *env) *cobra.Command {
	var q, eps, delta float64
	var steps int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "noise",
		Short: "Smallest noise multiplier for which a DP-SGD schedule meets a target ε (RDP)",
		Long: `Print the smallest noise multiplier σ (relative precision 1e-4, rounded up)
for which --steps steps at sampling rate --sampling-rate are
(--epsilon, --delta)-DP by the RDP accountant, and the ε it actually gives.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sigma, err := dp.NoiseMultiplier(q, steps, eps, delta)
			if err != nil {
				return err
			}
			got, order, err := dp.ScheduleEpsilon(q, sigma, steps, delta)
			if err != nil {
				return err
			}
			rep := privacyNoiseReport{NoiseMultiplier: sigma, Epsilon: got, Order: order, TargetEpsilon: eps, SamplingRate: q, Steps: steps, Delta: delta}
			if asJSON {
				return writeJSON(e.stdout, rep)
			}
			_, err = fmt.Fprintf(e.stdout, "noise multiplier σ = %.4f (ε = %.4f at δ = %g, order %g)\n", sigma, got, delta, order)
			return err
		},
	}
	fl := cmd.Flags()
	fl.Float64Var(&q, "sampling-rate", math.NaN(), "Poisson sampling rate q in (0, 1] (required)")
	fl.IntVar(&steps, "steps", 0, "number of steps (required)")
	fl.Float64Var(&eps, "epsilon", math.NaN(), "target ε > 0 (required)")
	fl.Float64Var(&delta, "delta", 1e-5, "δ in (0, 1)")
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
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", name, err)
	}
	return f, nil
}

// privacyDPLCCluster is one released cluster in veil privacy dplc's output.
type privacyDPLCCluster struct {
	Center []float32 `json:"center"`
	// Diagnostics, computed from private data, only with --diagnostics.
	Size   int     `json:"size,omitempty"`
	Sigma  float64 `json:"sigma,omitempty"`
	Cosine float64 `json:"cosine_to_exact,omitempty"`
}

// privacyDPLCReport is the --json output of veil privacy dplc.
type privacyDPLCReport struct {
	Centres       int                  `json:"centres"`
	Dimension     int                  `json:"dimension"`
	Clusters      []privacyDPLCCluster `json:"clusters"`
	Epsilon       float64              `json:"epsilon"`
	Delta         float64              `json:"delta"`
	Occupancy     float64              `json:"occupancy_ratio"`
	AccountantEps float64              `json:"accountant_epsilon"`
}

func newPrivacyDPLCCmd(e *env) *cobra.Command {
	var p dplc.Params
	var diagnostics, asJSON bool
	cmd := &cobra.Command{
		Use:   "dplc CENTRES.json",
		Short: "Differentially private local clustering of class centres (PrivacyFace Algorithm 1)",
		Long: `Cluster a client's class centres greedily into spherical caps of angular
radius --margin, and release the normalised mean of each cluster of at least
--min-size centres with the Gaussian noise of PrivacyFace's Theorem 2, for at
most --queries clusters. The cost is (queries·ε, queries·δ).

Input file (use - for standard input): a JSON array with one array of
numbers per class centre, all of the same dimension, e.g.
  [[0.12, -0.05, ...], [0.03, 0.22, ...], ...]
Centres are normalised before clustering; zero or non-finite rows are refused.

The output holds the noisy centres only; --diagnostics adds each cluster's
size, noise σ and cosine to the exact mean, which are computed from the
private centres and must not be shared.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, err := openInput(e, args[0])
			if err != nil {
				return err
			}
			centres, err := dplc.ReadCentres(in)
			in.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			res, err := dplc.Run(centres, p, nil)
			if err != nil {
				return err
			}
			occ, err := dplc.OccupancyRatio(len(centres[0]), p.Margin)
			if err != nil {
				return err
			}
			acct, err := dp.NewAccountant(nil)
			if err != nil {
				return err
			}
			if err := acct.Add(res.Events...); err != nil {
				return err
			}
			accEps, _, err := acct.Epsilon(res.Delta)
			if err != nil {
				return err
			}
			rep := privacyDPLCReport{Centres: len(centres), Dimension: len(centres[0]), Clusters: []privacyDPLCCluster{},
				Epsilon: res.Epsilon, Delta: res.Delta, Occupancy: occ, AccountantEps: accEps}
			for _, c := range res.Clusters {
				pc := privacyDPLCCluster{Center: c.Center}
				if diagnostics {
					pc.Size, pc.Sigma = c.Size, c.Sigma
					var s float64
					for i := range c.Center {
						s += float64(c.Center[i]) * float64(c.Exact[i])
					}
					pc.Cosine = s
				}
				rep.Clusters = append(rep.Clusters, pc)
			}
			if asJSON {
				return writeJSON(e.stdout, rep)
			}
			fmt.Fprintf(e.stdout, "%d centres of dimension %d: released %d noisy cluster centres\n", rep.Centres, rep.Dimension, len(rep.Clusters))
			for i, c := range rep.Clusters {
				if diagnostics {
					fmt.Fprintf(e.stdout, "  cluster %d: size %d, σ %.5f, cosine to exact mean %.3f\n", i+1, c.Size, c.Sigma, c.Cosine)
				}
			}
			_, err = fmt.Fprintf(e.stdout, "cost (ε, δ) = (%g, %g) by the paper (RDP accountant: ε = %.4f at δ = %g); cap occupancy ratio %.3g\n",
				rep.Epsilon, rep.Delta, accEps, rep.Delta, occ)
			return err
		},
	}
	fl := cmd.Flags()
	fl.Float64Var(&p.Margin, "margin", 1.3, "cluster margin ρ in radians, in (0, π)")
	fl.IntVar(&p.MinSize, "min-size", 512, "minimum cluster size T")
	fl.IntVar(&p.MaxQueries, "queries", 1, "maximum number of clusters Q")
	fl.Float64Var(&p.Epsilon, "epsilon", 1, "ε per query")
	fl.Float64Var(&p.Delta, "delta", 1e-5, "δ per query")
	fl.BoolVar(&diagnostics, "diagnostics", false, "also print private diagnostics (sizes, σ, cosine to the exact mean)")
	fl.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// privacyPATEReport is the --json output of veil privacy pate.
type privacyPATEReport struct {
	pate.Analysis
	Gamma  float64 `json:"gamma"`
	Labels []int   `json:"labels,omitempty"`
}

func newPrivacyPATECmd(e *env) *cobra.Command {
	var gamma, delta float64
	var labels, asJSON bool
	cmd := &cobra.Command{
		Use:   "pate HISTOGRAMS.json",
		Short: "Privacy of noisy-vote labels (PATE / LightFace Section 4)",
		Long: `Analyse the noisy-vote aggregation arg max_j (n_j + Lap(1/γ)) over a file of
vote histograms, one per released label: the data-dependent moments bound
(LightFace Theorems 3–4), the data-independent one (Theorem 2) and the
paper's strong-composition figure, each as ε at --delta. --labels also
draws the noisy labels.

The data-dependent ε depends on the votes and is not itself private.

Input file (use - for standard input): a JSON array with one array of
non-negative vote counts per answer (at least 2 classes each), e.g.
  [[48, 1, 1], [20, 25, 5]]`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, err := openInput(e, args[0])
			if err != nil {
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
			rep := privacyPATEReport{Analysis: a, Gamma: gamma}
			if labels {
				src, err := dp.NewSource()
				if err != nil {
					return err
				}
				for _, h := range hists {
					l, err := pate.NoisyArgmax(h, gamma, src)
					if err != nil {
						return err
					}
					rep.Labels = append(rep.Labels, l)
				}
			}
			if asJSON {
				return writeJSON(e.stdout, rep)
			}
			fmt.Fprintf(e.stdout, "%d answers, γ = %g, δ = %g\n", a.Answers, gamma, delta)
			fmt.Fprintf(e.stdout, "  data-dependent ε     %.4f (moment %g)\n", a.Epsilon, a.Moment)
			fmt.Fprintf(e.stdout, "  data-independent ε   %.4f\n", a.DataIndependentEpsilon)
			fmt.Fprintf(e.stdout, "  strong composition ε %.4f\n", a.StrongCompositionEpsilon)
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
	fl.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
