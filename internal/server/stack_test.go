package server

import (
	"strings"
	"testing"
)

// TestDirLock: a second stack on a folder in use is refused with a message
// that says what to do; the lock goes with its holder.
func TestDirLock(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first, err := lockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockDir(dir); err == nil || !strings.Contains(err.Error(), "in use by another rangecast dev") {
		t.Fatalf("second lock: %v; want it refused", err)
	}
	first.Close()
	again, err := lockDir(dir)
	if err != nil {
		t.Fatalf("after the first holder let go: %v", err)
	}
	again.Close()
}
