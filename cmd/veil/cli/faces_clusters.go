package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/tagging"
	"github.com/veil-privacy/veil/tagging/cluster"
)

// facesClustersHelp is veil faces clusters's --help.
const facesClustersHelp = `Clusters groups the library's unnamed faces by likeness and prints the groups,
largest first, so that you can name a whole group with one veil faces name.
Every unnamed face is in exactly one cluster (a face like no other is a cluster
of its own). The list shows clusters of two faces or more and counts the single
faces in one line; --min-size N shows clusters of at least N faces (--min-size 1
every one). --json lists every cluster unless --min-size is given.

The clusters are kept in the library and updated incrementally: faces already
grouped keep their cluster, faces named or removed since leave theirs, and new
faces join the cluster they are closest to or form new ones. --rebuild groups
every unnamed face afresh (new ids). Clustering never names anybody.

The algorithm and its distance were chosen by measurement on LFW (veil bench
tagging --tune): see tagging/thresholds.go.`

func newFacesClustersCmd(e *env) *cobra.Command {
	var lf libraryFlags
	var algorithm string
	var distance float64
	var rebuild, asJSON bool
	var minSize int
	cmd := &cobra.Command{
		Use:   "clusters",
		Short: "Group the unnamed faces of a library so a whole group can be named at once",
		Long:  facesClustersHelp,
		Example: `  veil faces clusters --library lib --json
  veil faces clusters --library lib --min-size 3`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o, err := tagging.NewClusterOptions(cluster.Algorithm(algorithm))
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("distance") {
				o.Distance = distance
			}
			if err := o.Validate(); err != nil {
				return err
			}
			if cmd.Flags().Changed("min-size") && minSize < 1 {
				return fmt.Errorf("--min-size must be at least 1")
			}
			return withLibrary(e, &lf, func(l *tagging.Library) error {
				groups, err := l.UpdateClusters(cmd.Context(), o, rebuild)
				if err != nil {
					return err
				}
				return printClusters(e, groups, minSize, asJSON)
			})
		},
	}
	lf.register(cmd)
	cmd.Flags().StringVar(&algorithm, "algorithm", string(tagging.DefaultClusterAlgorithm), fmt.Sprintf("clustering algorithm, one of %v", cluster.Algorithms))
	cmd.Flags().Float64Var(&distance, "distance", 0, "joining distance (default: the one measured for the algorithm)")
	cmd.Flags().BoolVar(&rebuild, "rebuild", false, "group every unnamed face afresh instead of updating the clusters")
	cmd.Flags().IntVar(&minSize, "min-size", 0, "show only clusters of at least this many faces (default: 2 in the list, which counts the single faces; 1 with --json)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// printClusters lists the clusters of at least minSize faces (0: not
// given, 2 in the list, which counts the single faces, and 1 in JSON).
func printClusters(e *env, groups []tagging.ClusterGroup, minSize int, asJSON bool) error {
	if minSize == 0 { // not given
		minSize = 2
		if asJSON {
			minSize = 1
		}
	}
	shown := []tagging.ClusterGroup{}
	singles := 0
	for _, g := range groups {
		if len(g.Faces) >= minSize {
			shown = append(shown, g)
		} else if len(g.Faces) == 1 {
			singles++
		}
	}
	if asJSON {
		return writeJSON(e.stdout, map[string]any{"clusters": shown})
	}
	fmt.Fprintf(e.stdout, "%s of unnamed faces (%d shown, at least %s each)\n", plural(len(groups), "cluster"), len(shown), plural(minSize, "face"))
	for _, g := range shown {
		fmt.Fprintf(e.stdout, "cluster %d: %s %v\n", g.ID, plural(len(g.Faces), "face"), g.Faces)
	}
	if singles > 0 {
		fmt.Fprintf(e.stdout, "and %s: veil faces clusters --min-size 1 lists them\n", plural(singles, "single face"))
	}
	return nil
}
