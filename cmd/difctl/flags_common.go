package main

import "github.com/spf13/cobra"

// exactArgs is cobra.ExactArgs with a message naming the arguments.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageErrorf("%s takes %s, got %d argument(s)", cmd.CommandPath(), names, len(args))
		}
		return nil
	}
}
