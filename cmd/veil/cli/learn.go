package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/metric"
	"github.com/veil-privacy/veil/tagging"
	"github.com/veil-privacy/veil/tagging/match"
)

// jsonLearn is `veil library learn --json`.
type jsonLearn struct {
	Learned   *tagging.LearnReport `json:"learned,omitempty"`
	Metric    *tagging.MetricInfo  `json:"metric,omitempty"`
	UseMetric bool                 `json:"use_metric"`
	Names     int                  `json:"names"`
	// Accepted counts the faces named by accepted suggestions, which are
	// not learned from (see the command's help).
	Accepted int  `json:"accepted_suggestions"`
	Due      bool `json:"retrain_due"`
}

// libraryLearnHelp is veil library learn's --help.
const libraryLearnHelp = `Learn fits the library's own distance between faces (LMNN, as in Irene) to your
decisions: faces you named are pulled towards the other faces of their person,
and faces you rejected ("not this person") pushed away from them.

Faces named by accepting suggestions (veil suggest accept) are counted apart
and not learned from: a suggestion is the program's own guess, made in the
current metric, so learning from it would teach the metric its own mistakes,
and accepting many at once is not looking at each face. Name a face with veil
faces name (veil faces show shows it) to make it count. The first metric starts from a secret
random rotation drawn from the library's key, so the library's faceprints are
in coordinates only your key unlocks; later ones start from the previous
metric. Each metric is stored encrypted, as a new version (the last 3 are
kept), with the suggestion distance carried over to its space.

Learning changes none of your decisions: names, rejections, removals and
automatic assignments stay as they are.

Suggestions use the learned metric only when the library is set to
(--use-metric on), or for one run with veil suggest --use-metric. It is off by
default: on LFW it did not improve suggestions enough (see veil bench metric).
With the metric on, veil suggest learns a new one first whenever the names have
grown by a quarter since the last one (and by at least 20; the first after 20
names).

--status only shows the metric, the setting and whether a new metric is due.`

func newLibraryLearnCmd(e *env) *cobra.Command {
	var lf libraryFlags
	var cold, status, asJSON bool
	var use string
	var iterations, workers int
	cmd := &cobra.Command{
		Use:   "learn",
		Short: "Learn the library's own face metric from your names and rejections",
		Long:  libraryLearnHelp,
		Example: `  veil library learn --library lib
  veil library learn --library lib --use-metric on
  veil library learn --library lib --status --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if iterations < 0 || workers < 0 {
				return errors.New("--iterations and --workers must not be negative")
			}
			if use != "" && use != "on" && use != "off" {
				return fmt.Errorf("--use-metric %q: want on or off", use)
			}
			return withLibrary(e, &lf, func(l *tagging.Library) error {
				var out jsonLearn
				if !status {
					ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
					defer stop()
					rep, err := l.LearnMetric(ctx, tagging.LearnOptions{Cold: cold,
						LMNN: metric.Options{Solver: metric.Solver{Iterations: iterations, Workers: workers}}})
					if errors.Is(err, tagging.ErrTooFewNames) {
						if n, cerr := acceptedSuggestions(l); cerr == nil && n > 0 {
							return fmt.Errorf("%w (%s named by accepted suggestions do not count: see --help)", err, plural(n, "face"))
						}
					}
					if err != nil {
						return err
					}
					out.Learned = rep
				}
				if use != "" {
					if err := l.SetUseMetric(use == "on"); err != nil {
						return err
					}
				}
				return printLearnStatus(e, l, &out, asJSON)
			})
		},
	}
	lf.register(cmd)
	fl := cmd.Flags()
	fl.BoolVar(&cold, "cold", false, "start from the secret rotation, not from the previous metric")
	fl.BoolVar(&status, "status", false, "only show the metric, the setting and whether a new metric is due")
	fl.StringVar(&use, "use-metric", "", "on or off: whether suggestions use the learned metric from now on (a library setting)")
	fl.IntVar(&iterations, "iterations", 0, "gradient steps at most (default 200)")
	fl.IntVar(&workers, "workers", 0, "worker goroutines (default: every core)")
	fl.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printLearnStatus(e *env, l *tagging.Library, out *jsonLearn, asJSON bool) error {
	var err error
	if out.UseMetric, err = l.UseMetric(); err != nil {
		return err
	}
	if out.Names, err = l.UserNames(); err != nil {
		return err
	}
	if out.Due, err = l.MetricDue(); err != nil {
		return err
	}
	if out.Accepted, err = acceptedSuggestions(l); err != nil {
		return err
	}
	_, info, err := l.LatestMetric()
	switch {
	case err == nil:
		out.Metric = &info
	case !errors.Is(err, tagging.ErrNoMetric):
		return err
	}
	if asJSON {
		return writeJSON(e.stdout, out)
	}
	w := e.stdout
	if r := out.Learned; r != nil {
		start := "the secret rotation"
		if r.WarmStart {
			start = "the previous metric"
		}
		fmt.Fprintf(w, "learned metric version %d from %s of %s and %s, starting from %s (%s, objective %.4g → %.4g, %.1f s)\n",
			r.Version, plural(r.Names, "name"), plural(r.People, "person", "people"), plural(r.Rejections, "rejection"), start,
			plural(r.Iterations, "step"), r.ObjectiveBefore, r.ObjectiveAfter, r.Seconds)
	}
	if out.Metric != nil {
		fmt.Fprintf(w, "metric version %d: %s, learned %s, suggestion distance %.3f\n", out.Metric.Version, plural(out.Metric.Names, "name"),
			out.Metric.TrainedAt.Format("2006-01-02 15:04"), out.Metric.Distance)
	} else {
		fmt.Fprintln(w, "no metric learned yet")
	}
	state := "off (plain descriptors)"
	if out.UseMetric {
		state = "on"
	}
	fmt.Fprintf(w, "suggestions use the metric: %s; %s now; a new metric is due: %v\n", state, plural(out.Names, "name"), out.Due)
	if out.Accepted > 0 {
		fmt.Fprintf(w, "not learned from: %s named by accepted suggestions (name them with veil faces name to count them; see --help)\n", plural(out.Accepted, "face"))
	}
	return nil
}

// acceptedSuggestions counts the faces assigned to a person automatically
// (accepted suggestions), which learning leaves out.
func acceptedSuggestions(l *tagging.Library) (int, error) {
	fs, err := l.Faces(tagging.FaceFilter{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, f := range fs {
		if f.PersonID != 0 && f.AssignedBy == tagging.ByAuto {
			n++
		}
	}
	return n, nil
}

// useMetricUsage is the help of veil suggest's --use-metric.
const useMetricUsage = "suggest in the library's learned metric (veil library learn) for this run, even if the library is not set to; --distance and --margin, when given, are then in its space"

// suggestionSpace is the space veil suggest and veil suggest accept work
// in: the learned metric when --use-metric or the library's setting asks
// for it (learning a new one first if one is due), with its carried-over
// distance unless --distance or --margin were given; else plain
// descriptors with o.
func suggestionSpace(cmd *cobra.Command, e *env, l *tagging.Library, o match.SuggestOptions, force bool) (tagging.Space, error) {
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	s, rep, err := l.SpaceForSuggestions(ctx, force)
	if err != nil {
		return tagging.Space{}, err
	}
	if rep != nil {
		fmt.Fprintf(e.stderr, "learned metric version %d from %s (enough new names since the last one)\n", rep.Version, plural(rep.Names, "name"))
	}
	if s.Metric == nil {
		if force {
			fmt.Fprintln(e.stderr, "no learned metric yet (veil library learn): suggesting with plain descriptors")
		}
		s.Options = o
		return s, nil
	}
	if cmd.Flags().Changed("distance") {
		s.Options.Distance = o.Distance
	}
	if cmd.Flags().Changed("margin") {
		s.Options.Margin = o.Margin
	}
	return s, s.Options.Validate()
}
