// Package version is the build's version and commit, for --version and logs.
//
// Release builds set both with the linker:
//
//	go build -ldflags "-X github.com/rangecast/rangecast/internal/version.Version=v0.1.0 \
//	  -X github.com/rangecast/rangecast/internal/version.Commit=abc1234" ./cmd/...
//
// (`make build` and the Dockerfile do). Otherwise the commit comes from the VCS
// stamp Go embeds (vcs.revision, vcs.modified), when there is one: builds with
// -buildvcs=false, `go run` and tests have none, and String is then "dev".
package version

import (
	"runtime/debug"
	"strings"
	"sync"
)

// Version is the release, e.g. "v0.1.0" (git describe); "dev" when unset.
var Version = "dev"

// Commit is the short commit hash, e.g. "abc1234"; empty when unknown.
var Commit = ""

var readBuildInfo = debug.ReadBuildInfo

var resolve = sync.OnceValues(func() (string, string) {
	return resolveFrom(Version, Commit, readBuildInfo)
})

// resolveFrom fills an unset commit from the embedded VCS stamp.
func resolveFrom(v, c string, info func() (*debug.BuildInfo, bool)) (string, string) {
	if v == "" {
		v = "dev"
	}
	if c != "" {
		return v, c
	}
	bi, ok := info()
	if !ok || bi == nil {
		return v, ""
	}
	var rev string
	var modified bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev == "" {
		return v, ""
	}
	if len(rev) > 7 {
		rev = rev[:7]
	}
	if modified {
		rev += "-dirty"
	}
	return v, rev
}

// Get returns the version and commit, the commit possibly from the VCS stamp.
func Get() (version, commit string) { return resolve() }

// String is "v0.1.0 (abc1234)", "dev (abc1234)", or just "dev" / "v0.1.0"
// when the commit is unknown.
func String() string { return format(Get()) }

func format(v, c string) string {
	// With no tags, git describe gives the commit itself ("abc1234-dirty").
	if c == "" || strings.HasPrefix(v, c) {
		return v
	}
	return v + " (" + c + ")"
}
