package cli

import "github.com/spf13/cobra"

// benchCommands lists the constructors of `veil bench` subcommands.
// Each lives in its own file; add a line here when adding one.
var benchCommands = []func(*env) *cobra.Command{
	newBenchFacesCmd, newBenchDetectCmd, newBenchPaillierCmd, newBenchDPHECmd, newBenchTrainCmd, newBenchFedCmd, newBenchUnlinkCmd, newBenchMetricCmd, newBenchTaggingCmd}

func newBenchCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure Veil's components: speed, detection recall, secure aggregation (use --json for machine-readable reports)",
	}
	for _, b := range benchCommands {
		cmd.AddCommand(b(e))
	}
	return cmd
}
