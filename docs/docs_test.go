// Package docs holds the operator documentation; these tests keep it
// self-contained (every relative link in README.md and docs/*.md names a
// file of the repository, and nothing points outside it) and the README's
// configuration table in step with the binaries' flags.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/rangecast/rangecast/internal/cli"
)

var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

func TestLinksStayInTheRepository(t *testing.T) {
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../README.md")
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := string(raw)
		if strings.Contains(text, "shared/") {
			t.Errorf("%s mentions shared/, which is outside the repository", f)
		}
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			abs, err := filepath.Abs(filepath.Join(filepath.Dir(f), target))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(abs, root+string(filepath.Separator)) {
				t.Errorf("%s: link %s leaves the repository", f, m[1])
				continue
			}
			if _, err := os.Stat(abs); err != nil {
				t.Errorf("%s: link %s: %v", f, m[1], err)
			}
		}
	}
}

// envUsage finds the variable a flag's help names: "… (env RANGECAST_X)".
var envUsage = regexp.MustCompile(`\(env (RANGECAST_[A-Z0-9_]+)`)

// TestConfigurationTable: every variable a flag of coordinator, pageworker
// or rangecast reads (the "(env …)" in its help) has a row in the README's
// configuration table.
func TestConfigurationTable(t *testing.T) {
	raw, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]bool{}
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "| `RANGECAST_") {
			continue
		}
		first := strings.Split(line, "|")[1]
		for _, m := range regexp.MustCompile("`(RANGECAST_[A-Z0-9_]+)`").FindAllStringSubmatch(first, -1) {
			rows[m[1]] = true
		}
	}
	if len(rows) == 0 {
		t.Fatal("README.md: no configuration table rows")
	}
	for _, mk := range []func() *cobra.Command{cli.Coordinator, cli.PageWorker, cli.Rangecast} {
		var walk func(c *cobra.Command)
		walk = func(c *cobra.Command) {
			c.LocalFlags().VisitAll(func(f *pflag.Flag) {
				for _, m := range envUsage.FindAllStringSubmatch(f.Usage, -1) {
					if !rows[m[1]] {
						t.Errorf("README.md: the configuration table has no row for %s (%s --%s)", m[1], c.CommandPath(), f.Name)
						rows[m[1]] = true // once
					}
				}
			})
			for _, sub := range c.Commands() {
				walk(sub)
			}
		}
		walk(mk())
	}
}
