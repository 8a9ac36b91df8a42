package version

import (
	"runtime/debug"
	"testing"
)

func info(settings ...string) func() (*debug.BuildInfo, bool) {
	return func() (*debug.BuildInfo, bool) {
		bi := &debug.BuildInfo{}
		for i := 0; i+1 < len(settings); i += 2 {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return bi, true
	}
}

func none() (*debug.BuildInfo, bool) { return nil, false }

func TestResolve(t *testing.T) {
	for _, tc := range []struct {
		name, v, c string
		info       func() (*debug.BuildInfo, bool)
		want       string
	}{
		{"ldflags", "v0.1.0", "abc1234", info("vcs.revision", "ffffffffffffffff"), "v0.1.0 (abc1234)"},
		{"unset, no build info", "dev", "", none, "dev"},
		{"unset, -buildvcs=false", "dev", "", info("-trimpath", "true"), "dev"},
		{"unset, vcs stamp", "dev", "", info("vcs.revision", "0123456789abcdef", "vcs.modified", "false"), "dev (0123456)"},
		{"unset, dirty", "dev", "", info("vcs.revision", "0123456789abcdef", "vcs.modified", "true"), "dev (0123456-dirty)"},
		{"version only", "v1.2.3", "", none, "v1.2.3"},
		{"empty version", "", "", none, "dev"},
		{"describe without tags", "abc1234", "abc1234", none, "abc1234"},
		{"describe without tags, dirty", "abc1234-dirty", "abc1234", none, "abc1234-dirty"},
		{"describe past a tag", "v0.1.0-3-gabc1234", "abc1234", none, "v0.1.0-3-gabc1234 (abc1234)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := format(resolveFrom(tc.v, tc.c, tc.info)); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestString: a test binary has no ldflags and no VCS stamp, but String must
// still give something non-empty.
func TestString(t *testing.T) {
	if s := String(); s == "" {
		t.Fatal("String() is empty")
	}
}
