package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/tagging"
	"github.com/veil-privacy/veil/tagging/match"
)

// suggestFlags are the suggestion thresholds, defaulting to the measured
// ones (tagging/thresholds.go).
type suggestFlags struct {
	distance, margin float64
}

func (s *suggestFlags) register(cmd *cobra.Command) {
	cmd.Flags().Float64Var(&s.distance, "distance", tagging.SuggestDistance, "suggest a person only if one of the person's named faces is at most this descriptor distance away (default measured on LFW: veil bench tagging --tune)")
	cmd.Flags().Float64Var(&s.margin, "margin", tagging.SuggestMargin, "abstain unless the next person's nearest face is farther by more than this")
}

func (s *suggestFlags) options() (match.SuggestOptions, error) {
	o := match.SuggestOptions{Distance: s.distance, Margin: s.margin}
	return o, o.Validate()
}

type jsonSuggestion struct {
	Face     int64   `json:"face"`
	Person   string  `json:"person"`
	Distance float64 `json:"distance"`
}

type jsonReviewGroup struct {
	Person   string  `json:"person"`
	Cluster  int     `json:"cluster"`
	Faces    []int64 `json:"faces"`
	Distance float64 `json:"distance"`
}

// suggestHelp is veil suggest's --help.
const suggestHelp = `Suggest proposes, for every unnamed face of the library, the person whose
nearest named face is closest, when that face is within --distance and no other
person is almost as close (--margin): otherwise it abstains. Faces of people you
never named (strangers) are most of a real library: the defaults were chosen on
LFW so that few of them get a suggestion (veil bench tagging measures it).

It never suggests a person you rejected for the face (veil faces reject), a
person already named in the same photo, or one person for two faces of a photo,
and leaves alone faces you unassigned by hand. Hidden people are not suggested.
Faces of photos marked missing (veil library status) get no suggestion until
their file is found again: you could not open the photo to check.
Naming or rejecting takes effect at the next run.

--review groups the suggestions into questions that settle many faces at once:
the faces of one cluster (veil faces clusters) suggested as the same person,
largest groups first. Accept with veil suggest accept FACE..., or name them with
veil faces name; reject a wrong one with veil faces reject.`

func newSuggestCmd(e *env) *cobra.Command {
	var lf libraryFlags
	var sf suggestFlags
	var asJSON, review, useMetric bool
	cmd := &cobra.Command{
		Use:   "suggest",
		Short: "Suggest who the unnamed faces of a library are",
		Long:  suggestHelp,
		Example: `  veil suggest --library lib --json
  veil suggest --library lib --review`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o, err := sf.options()
			if err != nil {
				return err
			}
			return withLibrary(e, &lf, func(l *tagging.Library) error {
				space, err := suggestionSpace(cmd, e, l, o, useMetric)
				if err != nil {
					return err
				}
				if review {
					return printReview(e, l, space, asJSON)
				}
				return printSuggestions(e, l, space, asJSON)
			})
		},
	}
	lf.register(cmd)
	sf.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&review, "review", false, "group the suggestions into questions, one per person and cluster, largest first")
	cmd.Flags().BoolVar(&useMetric, "use-metric", false, useMetricUsage)
	cmd.AddCommand(newSuggestAcceptCmd(e))
	return cmd
}

// printSuggestions prints the suggestions of space.
func printSuggestions(e *env, l *tagging.Library, space tagging.Space, asJSON bool) error {
	sugs, err := l.SuggestionsIn(space)
	if err != nil {
		return err
	}
	js := make([]jsonSuggestion, len(sugs))
	for i, s := range sugs {
		js[i] = jsonSuggestion{Face: s.Face, Person: s.Name, Distance: s.Distance}
	}
	if asJSON {
		return writeJSON(e.stdout, map[string]any{"suggestions": js})
	}
	if len(js) == 0 {
		fmt.Fprintln(e.stdout, "no suggestions")
	}
	for _, s := range js {
		fmt.Fprintf(e.stdout, "face %d: %s (distance %.3f)\n", s.Face, s.Person, s.Distance)
	}
	return nil
}

// printReview prints the review queue of the suggestions of space.
func printReview(e *env, l *tagging.Library, space tagging.Space, asJSON bool) error {
	q, err := l.ReviewIn(space)
	if err != nil {
		return err
	}
	jq := make([]jsonReviewGroup, len(q))
	for i, g := range q {
		jq[i] = jsonReviewGroup{Person: g.Name, Cluster: g.Cluster, Faces: g.Faces, Distance: g.Distance}
	}
	if asJSON {
		return writeJSON(e.stdout, map[string]any{"review": jq})
	}
	if len(jq) == 0 {
		fmt.Fprintln(e.stdout, "nothing to review")
	}
	for i, g := range jq {
		if len(g.Faces) == 1 {
			fmt.Fprintf(e.stdout, "%d. is this face %s? %v (distance %.3f)\n", i+1, g.Person, g.Faces, g.Distance)
		} else {
			fmt.Fprintf(e.stdout, "%d. are these %s %s? %v (farthest %.3f)\n", i+1, plural(len(g.Faces), "face"), g.Person, g.Faces, g.Distance)
		}
	}
	return nil
}

func newSuggestAcceptCmd(e *env) *cobra.Command {
	var lf libraryFlags
	var sf suggestFlags
	var asJSON, useMetric bool
	cmd := &cobra.Command{
		Use:   "accept FACE...",
		Short: "Accept the current suggestions of some faces",
		Long: `Accept assigns each listed face to the person veil suggest currently
proposes for it (with the same --distance and --margin). The assignment is
recorded as automatic: it never replaces anything you decided (a face you named,
unassigned or removed, or rejected that person for), and you can change it at
any time with veil faces name, reject or unassign. Faces without a current
suggestion are listed and left alone.

Exit status: 0 when done (even if some faces had no suggestion); 1 on an
unknown face id or bad input.`,
		Example: `  veil suggest accept --library lib 12 13 17 --json`,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ids, err := parseFaceIDs(args)
			if err != nil {
				return err
			}
			o, err := sf.options()
			if err != nil {
				return err
			}
			return withLibrary(e, &lf, func(l *tagging.Library) error {
				space, err := suggestionSpace(cmd, e, l, o, useMetric)
				if err != nil {
					return err
				}
				applied, none, err := l.AcceptSuggestionsIn(ids, space)
				if err != nil {
					return err
				}
				js := make([]jsonSuggestion, len(applied))
				for i, s := range applied {
					js[i] = jsonSuggestion{Face: s.Face, Person: s.Name, Distance: s.Distance}
				}
				if none == nil {
					none = []int64{}
				}
				if asJSON {
					return writeJSON(e.stdout, map[string]any{"accepted": js, "without_suggestion": none})
				}
				for _, s := range js {
					fmt.Fprintf(e.stdout, "face %d: %s\n", s.Face, s.Person)
				}
				return printWithoutSuggestion(e, l, none)
			})
		},
	}
	lf.register(cmd)
	sf.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&useMetric, "use-metric", false, useMetricUsage)
	return cmd
}

type jsonSearchMatch struct {
	Face     int64   `json:"face"`
	Photo    string  `json:"photo"`
	Person   *string `json:"person"`
	Distance float64 `json:"distance"`
}

type jsonSearchFace struct {
	// Number is the face's number in the photo, from 1, as veil detect
	// and veil compare number it.
	Number   int               `json:"number"`
	Box      tagging.Box       `json:"box"`
	Person   *string           `json:"person"`
	Distance float64           `json:"distance,omitempty"`
	Matches  []jsonSearchMatch `json:"matches"`
}

func newSearchCmd(e *env) *cobra.Command {
	var lf libraryFlags
	var sf suggestFlags
	var models string
	var asJSON bool
	var within float64
	var limit int
	cmd := &cobra.Command{
		Use:   "search PHOTO",
		Short: "Find the people and photos of a library that match the faces in a photo",
		Long: `Search finds the faces in PHOTO (which need not be in the library) with the
library's face pipeline and looks each one up in the library: the person it most
likely is, by the rule of veil suggest (one person per face of the photo), and
the library's faces within --within, nearest first, with their photos. The
photo is only read: nothing is added to the library.`,
		Example: `  veil search --library lib holiday.jpg --json`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o, err := sf.options()
			if err != nil {
				return err
			}
			if !(within > 0) {
				return fmt.Errorf("--within must be positive")
			}
			img, err := readSearchPhoto(args[0])
			if err != nil {
				return err
			}
			p, err := e.pipeline(tagging.PipelineOptions(models))
			if err != nil {
				return err
			}
			found, _, err := p.Run(img)
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			return withLibrary(e, &lf, func(l *tagging.Library) error {
				res, err := l.SearchPhoto(found, o, within, limit)
				if err != nil {
					return err
				}
				return printSearch(e, args[0], res, asJSON)
			})
		},
	}
	lf.register(cmd)
	sf.register(cmd)
	cmd.Flags().StringVar(&models, "models", "", "folder of face-api's weight files (default: $VEIL_MODELS, else models/ of the checkout)")
	cmd.Flags().Float64Var(&within, "within", tagging.SearchDistance, "list library faces at most this descriptor distance from a face of the photo")
	cmd.Flags().IntVar(&limit, "limit", 20, "at most this many matching faces per face of the photo (0: all)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// readSearchPhoto reads and decodes the photo veil search looks up,
// within the default size limits.
func readSearchPhoto(path string) (*imaging.RGB, error) {
	lim := imaging.DefaultLimits()
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Size() > lim.MaxBytes {
		return nil, fmt.Errorf("%s is %d bytes, over the %d limit", path, st.Size(), lim.MaxBytes)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	img, _, err := imaging.Decode(data, lim)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return img, nil
}

// printSearch prints what the faces of the photo at path match.
func printSearch(e *env, path string, res *tagging.PhotoSearch, asJSON bool) error {
	name := func(id int64, n string) *string {
		if id == 0 {
			return nil
		}
		return &n
	}
	out := make([]jsonSearchFace, len(res.Faces))
	for i, f := range res.Faces {
		out[i] = jsonSearchFace{Number: i + 1, Box: f.Box, Person: name(f.PersonID, f.Person), Distance: f.Distance, Matches: []jsonSearchMatch{}}
		for _, m := range f.Matches {
			out[i].Matches = append(out[i].Matches, jsonSearchMatch{Face: m.Face, Photo: m.Photo, Person: name(m.PersonID, m.Person), Distance: m.Distance})
		}
	}
	if asJSON {
		return writeJSON(e.stdout, map[string]any{"faces": out, "people": res.People, "photos": res.Photos})
	}
	fmt.Fprintf(e.stdout, "%d face(s) in %s\n", len(out), path)
	for _, f := range out {
		who := "nobody known"
		if f.Person != nil {
			who = fmt.Sprintf("%s (distance %.3f)", *f.Person, f.Distance)
		}
		fmt.Fprintf(e.stdout, "face %d at %.0f,%.0f %.0fx%.0f: %s; %d matching face(s) in the library\n", f.Number, f.Box.X, f.Box.Y, f.Box.Width, f.Box.Height, who, len(f.Matches))
		for _, m := range f.Matches {
			fmt.Fprintf(e.stdout, "  %.3f face %d in %s\n", m.Distance, m.Face, m.Photo)
		}
	}
	return nil
}

// printWithoutSuggestion says, of each face veil suggest accept left alone,
// why: it is named already, removed, or has no current suggestion.
func printWithoutSuggestion(e *env, l *tagging.Library, none []int64) error {
	if len(none) == 0 {
		return nil
	}
	fs, err := l.Faces(tagging.FaceFilter{IDs: none, Removed: true})
	if err != nil {
		return err
	}
	photos, err := l.Photos()
	if err != nil {
		return err
	}
	missing := map[int64]string{}
	for _, p := range photos {
		if p.Missing {
			missing[p.ID] = p.Path
		}
	}
	var left []int64
	for _, f := range fs {
		switch {
		case f.Removed:
			fmt.Fprintf(e.stdout, "face %d was removed as a false face (left alone)\n", f.ID)
		case f.PersonID != 0 && f.AssignedBy == tagging.ByUser:
			fmt.Fprintf(e.stdout, "face %d is already named %s (left alone)\n", f.ID, f.Person)
		case f.PersonID != 0:
			fmt.Fprintf(e.stdout, "face %d is already %s, by an earlier suggestion (left alone)\n", f.ID, f.Person)
		case missing[f.PhotoID] != "":
			fmt.Fprintf(e.stdout, "face %d is in a missing photo, %s: faces of missing photos are not suggested (left alone)\n", f.ID, missing[f.PhotoID])
		default:
			left = append(left, f.ID)
		}
	}
	if len(left) > 0 {
		fmt.Fprintf(e.stdout, "no current suggestion for %s (left alone): %v\n", plural(len(left), "face"), left)
	}
	return nil
}
