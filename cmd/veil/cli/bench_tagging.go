package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/tagging"
	"github.com/veil-privacy/veil/tagging/tagbench"
)

const benchTaggingLong = `Measures tagging as a user would meet it. A library is made of LFW's
development identities with at least 5 photos, plus every person with a
single photo as a stranger (never named). The user names 1, then 3 random
photos of every non-stranger; veil then suggests a person for each other
face at the default thresholds (tagging/thresholds.go). Reported: precision
of the suggestions on named people's faces, coverage (share of those faces
that get a suggestion), the share of strangers' faces that get one (all
wrong), clustering quality (BCubed) of each algorithm, and the latency of
one suggestion query on one core for 1,000, 10,000 and 100,000 faces
(synthetic descriptors).

Figures are given for the development training identities (where the
thresholds were chosen) and the development test identities (never used to
choose anything). --tune reruns the choice on the training identities: a
grid of distance and margin maximising coverage subject to ≥98% precision and
<5% strangers suggested with 3 named photos (two-fold cross-validation over
identities shows how well the choice carries), and each clustering
algorithm's best-F1 distance.

--learned-metric adds the same figures after the library learns its metric,
on the development test identities: a throw-away library holds their faces,
the user names the photos of the plain figures' first --learned-trials
choices, reviews a quarter of the plain suggestions (confirming right ones,
rejecting wrong ones), and the library learns its LMNN metric as veil
library learn does; the faces neither named nor reviewed are then suggested
under plain descriptors and under the metric at its carried-over distance,
and every face is clustered in the learned space. Each trial is one LMNN fit
(minutes); --learned-max-people measures on fewer people.

Descriptors come through the descriptor cache veil verify and veil train
fill (same pipeline settings), so a warm cache computes nothing.`

func newBenchTaggingCmd(e *env) *cobra.Command {
	var f lfwFlags
	var o tagbench.Options
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "tagging",
		Short: "Suggestion precision, coverage and strangers, clustering quality and suggestion latency on LFW",
		Long:  benchTaggingLong,
		Example: `  nice veil bench tagging --tune --json
  nice veil bench tagging --learned-metric --index-photos 0 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Trials < 1 {
				return fmt.Errorf("--trials must be at least 1")
			}
			if o.LearnedTrials < 1 {
				return fmt.Errorf("--learned-trials must be at least 1")
			}
			if o.LearnedPeople < 0 {
				return fmt.Errorf("--learned-max-people must not be negative")
			}
			var err error
			if o.Source, err = f.source(e); err != nil {
				return err
			}
			if o.IndexPhotos > 0 {
				if o.Pipeline, err = e.pipeline(tagging.PipelineOptions(f.head.models)); err != nil {
					return err
				}
			}
			b, err := tagbench.New(o)
			if err != nil {
				return err
			}
			res, err := b.Run(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(e.stdout, res)
			}
			return printBenchTagging(e, res)
		},
	}
	f.register(cmd)
	fl := cmd.Flags()
	fl.BoolVar(&asJSON, "json", false, "print the report as JSON")
	fl.BoolVar(&o.Tune, "tune", false, "also choose the thresholds again on the development training identities")
	fl.IntVar(&o.Trials, "trials", 5, "random choices of the named photos averaged per figure")
	fl.IntVar(&o.IndexPhotos, "index-photos", 100, "index this many LFW photos (the first of each person) into a throw-away library to measure indexing throughput on every core (0: skip)")
	fl.BoolVar(&o.Learned, "learned-metric", false, "also measure suggestions and clustering after the library learns its metric, on the development test identities (slow: one LMNN fit per trial and number of named photos)")
	fl.IntVar(&o.LearnedTrials, "learned-trials", 1, "choices of the named photos averaged with --learned-metric (the first ones of --trials)")
	fl.IntVar(&o.LearnedPeople, "learned-max-people", 0, "with --learned-metric, only the first this many named people and the same share of strangers (0: all)")
	fl.Uint64Var(&o.Seed, "seed", 1, "seed of the named photos' choice, the clustering order and the synthetic descriptors")
	return cmd
}

func printBenchTagging(e *env, r *tagbench.Report) error {
	w := e.stdout
	if r.Tune != nil {
		t := r.Tune
		fmt.Fprintf(w, "tuned on peopleDevTrain.txt (3 named photos): distance %.2f margin %.2f → precision %.2f%%, coverage %.2f%%, strangers %.2f%% (goal met: %v)\n",
			t.Suggest.Distance, t.Suggest.Margin, 100*t.Suggest.Precision, 100*t.Suggest.Coverage, 100*t.Suggest.StrangersSuggested, t.Feasible)
		fmt.Fprintf(w, "  3-NN vote instead: distance %.2f → precision %.2f%%, coverage %.2f%%, strangers %.2f%% (goal met: %v)\n",
			t.KNNVote.Distance, 100*t.KNNVote.Precision, 100*t.KNNVote.Coverage, 100*t.KNNVote.StrangersSuggested, t.KNNFeasible)
		for i, c := range t.CrossValidation {
			fmt.Fprintf(w, "  fold %d (chosen on the other half): distance %.2f margin %.2f → precision %.2f%%, coverage %.2f%%, strangers %.2f%%\n",
				i+1, c.Distance, c.Margin, 100*c.Precision, 100*c.Coverage, 100*c.StrangersSuggested)
		}
		for _, c := range t.Clusters {
			fmt.Fprintf(w, "  %-16s best distance %.3f (min points %d): BCubed P %.3f R %.3f F1 %.3f, %d clusters\n", c.Algorithm, c.Distance, c.MinPoints, c.Precision, c.Recall, c.F1, c.Clusters)
		}
	}
	fmt.Fprintf(w, "suggestions at distance %.2f, margin %.2f (mean of %d choices of the named photos):\n", r.Defaults["suggest_distance"], r.Defaults["suggest_margin"], r.Trials)
	for _, s := range r.Suggest {
		fmt.Fprintf(w, "  %-20s %d named: precision %.2f%%, coverage %.2f%% (right %.2f%%), strangers suggested %.2f%% (%d known, %d strangers' faces)\n",
			s.Split, s.Named, 100*s.Precision, 100*s.Coverage, 100*s.CorrectCoverage, 100*s.StrangersSuggested, s.Known, s.Strangers)
	}
	fmt.Fprintln(w, "clustering (BCubed), training identities first then test:")
	for _, c := range r.Clusters {
		fmt.Fprintf(w, "  %-16s distance %.3f: P %.3f R %.3f F1 %.3f, %d clusters, %.2f s\n", c.Algorithm, c.Distance, c.Precision, c.Recall, c.F1, c.Clusters, c.WallS)
	}
	in := r.Incremental
	fmt.Fprintf(w, "incremental (%s, last %.0f%% joined): F1 %.3f vs %.3f at once\n", in.Algorithm, 100*in.LaterShare, in.Incremental.F1, in.Batch.F1)
	for _, l := range r.Latency {
		fmt.Fprintf(w, "  %6d faces: %.3f ms CPU per query (%.3f of the 20 ms budget), best wall %.3f ms\n", l.Faces, l.CPUMsPerQuery, l.BudgetRatio, l.WallMsPerQuery)
	}
	for _, l := range r.LearnedMetric {
		fmt.Fprintf(w, "after learning the metric (%s, %d named, review confirmed %.0f and rejected %.0f, learned in %d of %d trials, %.0f s per fit):\n",
			l.Split, l.Named, l.Confirmed, l.Rejected, l.Learned, l.Trials, l.LearnS)
		for _, c := range []struct {
			name string
			s    tagbench.SuggestScore
		}{{"plain", l.Plain}, {"learned", l.LearnedScores}, {"before review (plain)", l.BeforeReview}} {
			fmt.Fprintf(w, "  %-22s distance %.3f margin %.3f: precision %.2f%%, coverage %.2f%%, strangers suggested %.2f%%\n",
				c.name, c.s.Distance, c.s.Margin, 100*c.s.Precision, 100*c.s.Coverage, 100*c.s.StrangersSuggested)
		}
		for _, c := range l.Clusters {
			fmt.Fprintf(w, "  %-16s BCubed F1 plain %.3f (P %.3f R %.3f), learned %.3f (P %.3f R %.3f) at distance %.3f\n",
				c.Algorithm, c.Plain.F1, c.Plain.Precision, c.Plain.Recall, c.Learned.F1, c.Learned.Precision, c.Learned.Recall, c.Learned.Distance)
		}
	}
	if r.Indexing != nil {
		fmt.Fprintf(w, "indexing: %.2f photos/s on %d workers (%d photos, %d faces)\n", r.Indexing.PhotosPerSecond, r.Indexing.Workers, r.Indexing.Photos, r.Indexing.Faces)
	}
	fmt.Fprintf(w, "wall time %.1f s\n", r.WallS)
	return nil
}
