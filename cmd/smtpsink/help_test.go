package main

import (
	"os"
	"testing"

	"github.com/rangecast/rangecast/internal/testenv"
)

func TestMain(m *testing.M) {
	if testenv.HelpChild() {
		main() // renders -h, checks it and exits
	}
	os.Exit(m.Run())
}

// TestHelp: -h shows every flag's usage as written (no backquoted value
// names eating words).
func TestHelp(t *testing.T) { testenv.CheckStdHelp(t) }
