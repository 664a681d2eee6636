package main

import (
	"slices"
	"strings"

	"github.com/difctl/difctl/store"
	"github.com/spf13/cobra"
)

// Flags and arguments every command shares: the argument count, --store
// (checked before any command runs).

// exactArgs is cobra.ExactArgs with a message naming the arguments.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageErrorf("%s takes %s, got %d argument(s)", cmd.CommandPath(), names, len(args))
		}
		return nil
	}
}

// checkCommonFlags runs before every command (the root's
// PersistentPreRunE): a --store URL with a scheme difctl does not know is
// a usage error (exit 16), as any other bad flag value, not an operational
// one found when the store is opened.
func checkCommonFlags(cmd *cobra.Command) error {
	if f := cmd.Flags().Lookup("store"); f != nil && f.Changed {
		if err := checkStoreURL(f.Value.String()); err != nil {
			return err
		}
	}
	return nil
}

// checkStoreURL accepts what store.Open accepts: pebble:PATH, mem:, the
// schemes of the backends difctl links (etcd://...) or a plain path
// (store.Open's rule for telling a scheme from a path).
func checkStoreURL(url string) error {
	if url == "" {
		return usageErrorf("--store must not be empty")
	}
	scheme, _, ok := strings.Cut(url, ":")
	if !ok || strings.ContainsAny(scheme, `/\.`) || len(scheme) < 2 {
		return nil // a plain path
	}
	schemes := store.Schemes()
	if slices.Contains(schemes, scheme) {
		return nil
	}
	return usageErrorf("--store %q: unknown scheme %q (want one of %s)", store.RedactURL(url), scheme, strings.Join(schemes, ", "))
}

// storeFlag registers --store, the store URL of a command's image; of says
// what the store holds, if the command's help needs it (" of a
// store-backed image").
func storeFlag(cmd *cobra.Command, p *string, of string) {
	cmd.Flags().StringVar(p, "store", "", "store `URL`"+of+": pebble:PATH, mem: or etcd://HOST:PORT,.../PREFIX (default pebble:IMAGE.difdb)")
}
