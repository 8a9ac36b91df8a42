package cli

import (
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
)

// Flag values that refuse an out-of-range value where it is parsed, so a
// flag and its environment variable (applyEnv) are refused alike, naming
// both. The option structs they fill take a zero for "the default", which
// suits tests and library callers; from a flag, whose own default is
// shown in --help, a zero is a mistake and must not become that default
// silently. Their Type is the plain flag's, so --help reads the same.

// atLeastValue is an int flag of at least min, and at most max when max
// is above 0.
type atLeastValue struct {
	p        *int
	min, max int
}

func atLeast(p *int, def, min int) pflag.Value {
	*p = def
	return &atLeastValue{p: p, min: min}
}

// within is atLeast with a largest value too.
func within(p *int, def, min, max int) pflag.Value {
	*p = def
	return &atLeastValue{p: p, min: min, max: max}
}

func (v *atLeastValue) Set(s string) error {
	n, err := strconv.ParseInt(s, 0, strconv.IntSize)
	if err != nil {
		return err
	}
	if v.max > 0 && (n < int64(v.min) || n > int64(v.max)) {
		return fmt.Errorf("it must be between %d and %d", v.min, v.max)
	}
	if n < int64(v.min) {
		return fmt.Errorf("it must be at least %d", v.min)
	}
	*v.p = int(n)
	return nil
}

func (v *atLeastValue) String() string { return strconv.Itoa(*v.p) }
func (v *atLeastValue) Type() string   { return "int" }

// shareValue is a float flag that is a share: above 0, at most 1 (or, with
// off, also negative to turn something off, and then below 1, since a
// share of 1 or more could never be passed). NaN and infinities never are.
type shareValue struct {
	p *float64
	// of says what it is a share of, and example a value with its
	// percentage, for the error.
	of, example string
	off         bool
}

func share(p *float64, def float64, of, example string) pflag.Value {
	*p = def
	return &shareValue{p: p, of: of, example: example}
}

// alarmShare is a share that may also be negative, which turns the alarm
// off.
func alarmShare(p *float64, def float64, of, example string) pflag.Value {
	*p = def
	return &shareValue{p: p, of: of, example: example, off: true}
}

func (v *shareValue) Set(s string) error {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return err
	}
	ok := f > 0 && f <= 1
	if v.off {
		ok = f < 0 && !math.IsInf(f, 0) || f > 0 && f < 1
	}
	if ok {
		*v.p = f
		return nil
	}
	if v.off {
		return fmt.Errorf("give a share of %s above 0 and below 1 (%s), or -1 to turn it off", v.of, v.example)
	}
	return fmt.Errorf("give a share of %s above 0 and at most 1 (%s)", v.of, v.example)
}

func (v *shareValue) String() string { return strconv.FormatFloat(*v.p, 'g', -1, 64) }
func (v *shareValue) Type() string   { return "float64" }

// perSecondValue is a rate: a finite number above 0.
type perSecondValue struct{ p *float64 }

func perSecond(p *float64, def float64) pflag.Value {
	*p = def
	return perSecondValue{p}
}

func (v perSecondValue) Set(s string) error {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return err
	}
	if !(f > 0) || math.IsInf(f, 0) {
		return fmt.Errorf("give messages per second above 0")
	}
	*v.p = f
	return nil
}

func (v perSecondValue) String() string { return strconv.FormatFloat(*v.p, 'g', -1, 64) }
func (perSecondValue) Type() string     { return "float64" }

// levelValue is a log level: debug, info, warn or error.
type levelValue struct{ p *string }

func logLevel(p *string, def string) pflag.Value {
	*p = def
	return levelValue{p}
}

func (v levelValue) Set(s string) error {
	if _, err := parseLevel(s); err != nil {
		return err
	}
	*v.p = s
	return nil
}

func (v levelValue) String() string { return *v.p }
func (levelValue) Type() string     { return "string" }

// parseLevel is strict: slog's own parser also takes "info+2" and the like,
// which no one means.
func parseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("use debug, info, warn or error")
}

// commaListValue is a list flag: repeated, or comma-separated in one
// value. pflag's StringSlice reads a value as a CSV record, so a line
// break ended it and the lines after it were dropped without a word
// (--to $'a@x.org\nb@x.org' sent to a alone; a tester). This one refuses a
// line break, naming the flag.
type commaListValue struct {
	p   *[]string
	set bool
}

func commaList(p *[]string) pflag.Value { return &commaListValue{p: p} }

func (v *commaListValue) Set(s string) error {
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		return fmt.Errorf("%q has a line break at byte %d; separate values with commas or repeat the flag", s, i)
	}
	if !v.set {
		*v.p, v.set = nil, true // the first value given replaces the default
	}
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*v.p = append(*v.p, part)
		}
	}
	return nil
}

func (v *commaListValue) Type() string { return "strings" }

func (v *commaListValue) String() string {
	if len(*v.p) == 0 {
		return "" // no "(default [])" in --help
	}
	return "[" + strings.Join(*v.p, ",") + "]"
}
