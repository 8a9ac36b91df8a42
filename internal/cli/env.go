package cli

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"unicode/utf8"

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
// flags of the command being run, and refuses arguments that are not text.
func envHook(cmd *cobra.Command, args []string) error {
	if err := applyEnv(cmd.Flags()); err != nil {
		return err
	}
	return textArgs(cmd, args)
}

// textArgs refuses an argument or flag value that is not valid UTF-8 (a
// terminal or file in Latin-1, a stray byte), naming it. Sent as it is, it
// failed in gRPC's encoding with "Internal: grpc: error while marshaling:
// string field contains invalid UTF-8", which names nothing.
func textArgs(cmd *cobra.Command, args []string) error {
	var errs []error
	for i, a := range args {
		if !utf8.ValidString(a) {
			errs = append(errs, fmt.Errorf("argument %d (%q) is not valid UTF-8 text; give it in UTF-8", i+1, a))
		}
	}
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if v := f.Value.String(); !utf8.ValidString(v) {
			errs = append(errs, fmt.Errorf("--%s (%q) is not valid UTF-8 text; give it in UTF-8", f.Name, v))
		}
	})
	return errors.Join(errs...)
}
