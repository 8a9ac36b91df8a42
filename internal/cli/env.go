package cli

import (
	"errors"
	"fmt"
	"os"
	"regexp"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/rangecast/rangecast/internal/redact"
)

// envInUsage finds the variable a flag's help names: "(env RANGECAST_X)".
// The last one is the flag's own (a help text may mention others first).
var envInUsage = regexp.MustCompile(`\(env (RANGECAST_[A-Z0-9_]+)\)`)

// envName is the environment variable of f, or "".
func envName(f *pflag.Flag) string {
	m := envInUsage.FindAllStringSubmatch(f.Usage, -1)
	if len(m) == 0 {
		return ""
	}
	return m[len(m)-1][1]
}

// applyEnv sets every flag that was not given on the command line from the
// environment variable its help names, parsed exactly as the flag would
// parse it: a malformed value ("abc" for a number, "30" for a duration,
// "2%" for a share) is an error naming the variable, never a silent
// default. Defaults come from the code, not the environment, so --help
// never shows a value from it (an SMTP URL's password, say).
func applyEnv(fs *pflag.FlagSet) error {
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		name := envName(f)
		if f.Changed || name == "" {
			return
		}
		v, ok := os.LookupEnv(name)
		if !ok || v == "" {
			return
		}
		if err := f.Value.Set(v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q is not a valid --%s (%s): %v", name, redact.String(v), f.Name, f.Value.Type(), redact.Error(err)))
		}
	})
	return errors.Join(errs...)
}

// envHook is a PersistentPreRunE that applies the environment to the
// flags of the command being run.
func envHook(cmd *cobra.Command, _ []string) error { return applyEnv(cmd.Flags()) }
