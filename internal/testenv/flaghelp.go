package testenv

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// helpChildEnv marks the re-executed test binary that renders -h.
const helpChildEnv = "RANGECAST_TEST_HELP_CHILD"

// HelpChild, called first in the TestMain of a main package whose flags are
// the standard library's, turns the re-executed test binary into the command
// itself run with -h: it returns true, and the caller then calls main(),
// whose flag.Parse prints the checked help and exits. In the test process
// it returns false.
func HelpChild() bool {
	if os.Getenv(helpChildEnv) != "1" {
		return false
	}
	os.Args = []string{os.Args[0], "-h"}
	stdUsageHook()
	return true
}

// CobraHelpChild is HelpChild for a main package whose command is cobra's:
// the caller calls main() (which prints --help and returns) and exits 0;
// RenderHelp in the test process reads what it printed.
func CobraHelpChild() bool {
	if os.Getenv(helpChildEnv) != "1" {
		return false
	}
	os.Args = []string{os.Args[0], "--help"}
	return true
}

// RenderHelp re-executes the test binary as its command with --help (see
// CobraHelpChild) and returns what it printed.
func RenderHelp(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helpChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("--help: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "Usage:") {
		t.Fatalf("--help printed no usage (TestMain must call testenv.CobraHelpChild):\n%s", out)
	}
	return string(out)
}

func stdUsageHook() {
	flag.Usage = func() {
		var help bytes.Buffer
		flag.CommandLine.SetOutput(&help)
		flag.PrintDefaults()
		flag.VisitAll(func(f *flag.Flag) {
			if strings.HasPrefix(f.Name, "test.") {
				return
			}
			for _, p := range UsageProblems(f.Usage, help.String()) {
				fmt.Printf("mangled -%s: %s\n", f.Name, p)
			}
		})
		fmt.Print("help rendered\n", help.String())
		os.Exit(0)
	}
}

// CheckStdHelp re-executes the test binary as its command with -h (see
// HelpChild) and fails t for every flag whose usage the help mangles.
func CheckStdHelp(t *testing.T) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helpChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("-h: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "help rendered\n") {
		t.Fatalf("-h did not render the help (TestMain must call testenv.HelpChild):\n%s", out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "mangled ") {
			t.Error(line)
		}
	}
}

// UsageProblems says how help, the rendered help of a command, mangles one
// flag's usage: a backquoted word in a usage is taken by both flag and
// pflag as the flag's value name and printed, unquoted, in front of the
// text; and every line of the usage must appear in the help as written.
func UsageProblems(usage, help string) []string {
	var p []string
	if strings.Contains(usage, "`") {
		p = append(p, "usage has a backquote, which the flag package reads as the value's name; quote with ' instead")
	}
	for _, line := range strings.Split(usage, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.Contains(help, line) {
			p = append(p, fmt.Sprintf("help does not show %q", line))
		}
	}
	return p
}
