package cli

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/rangecast/rangecast/internal/testenv"
)

// TestHelpNotMangled renders --help of every command of the three binaries
// (coordinator, pageworker, rangecast and each of its subcommands) and checks
// that each flag is shown as "--name [type]   usage" with its usage intact:
// pflag takes a backquoted word in a usage as the value's name, so
// "for `governor reset-rate-limit`" printed as
// "--smtp-server-name governor reset-rate-limit   … for governor reset-rate-limit".
func TestHelpNotMangled(t *testing.T) {
	t.Parallel()
	for _, mk := range []func() *cobra.Command{Coordinator, PageWorker, Rangecast} {
		for _, path := range commandPaths(mk()) {
			t.Run(strings.Join(path, "_"), func(t *testing.T) {
				t.Parallel()
				root := mk()
				var out bytes.Buffer
				root.SetOut(&out)
				root.SetErr(&out)
				root.SetArgs(append(path[1:], "--help"))
				c, err := root.ExecuteC()
				if err != nil {
					t.Fatalf("%s --help: %v", strings.Join(path, " "), err)
				}
				help := out.String()
				n := 0
				check := func(f *pflag.Flag) {
					if f.Hidden {
						return
					}
					n++
					for _, p := range testenv.UsageProblems(f.Usage, help) {
						t.Errorf("--%s: %s", f.Name, p)
					}
					// The value name, when shown, is one word (pflag's type name).
					line := regexp.MustCompile(`(?m)^\s+(-\w, )?--` + regexp.QuoteMeta(f.Name) + `( \S+)?\s{3}`)
					if !line.MatchString(help) {
						t.Errorf("--%s: no line \"--%s [type]   usage\" in the help:\n%s", f.Name, f.Name, help)
					}
				}
				c.LocalFlags().VisitAll(check)
				c.InheritedFlags().VisitAll(check)
				if n == 0 && c.HasAvailableFlags() {
					t.Errorf("%s: flags but none checked", c.CommandPath())
				}
			})
		}
	}
}

// commandPaths lists every available command under root, root included, as
// the words that name it.
func commandPaths(root *cobra.Command) [][]string {
	var paths [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		path = append(append([]string(nil), path...), c.Name())
		paths = append(paths, path)
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() {
				walk(sub, path)
			}
		}
	}
	walk(root, nil)
	return paths
}
