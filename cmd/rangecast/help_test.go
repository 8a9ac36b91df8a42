package main

import (
	"os"
	"testing"

	"github.com/spf13/pflag"

	"github.com/rangecast/rangecast/internal/cli"
	"github.com/rangecast/rangecast/internal/testenv"
)

func TestMain(m *testing.M) {
	if testenv.CobraHelpChild() {
		main() // prints --help
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestHelp renders this binary's --help and checks every flag's usage is
// shown as written (a backquoted word in a usage is taken as the value's
// name and printed, unquoted, before it). internal/cli's
// TestHelpNotMangled does the same for every subcommand.
func TestHelp(t *testing.T) {
	help := testenv.RenderHelp(t)
	cli.Rangecast().Flags().VisitAll(func(f *pflag.Flag) {
		for _, p := range testenv.UsageProblems(f.Usage, help) {
			t.Errorf("--%s: %s", f.Name, p)
		}
	})
}
