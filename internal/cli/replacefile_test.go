package cli

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestReplaceFileKeepsWhatItWritesTo: export -o replaces a regular file all
// or nothing, keeping its permissions; follows a symlink to its target; and
// writes in place to what is not a regular file (a FIFO here; as root,
// /dev/null had been replaced by a file of the ledger, a tester found).
func TestReplaceFileKeepsWhatItWritesTo(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(s string) func(io.Writer) error {
		return func(w io.Writer) error { _, err := io.WriteString(w, s); return err }
	}
	target := filepath.Join(dir, "target.csv")
	if err := os.WriteFile(target, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := replaceFile(target, func(w io.Writer) error { return errors.New("stream broke") }); err == nil {
		t.Error("a failed write returned no error")
	}
	if b, _ := os.ReadFile(target); string(b) != "old" {
		t.Errorf("a failed write left %q; want the old file whole", b)
	}
	link := filepath.Join(dir, "link.csv")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := replaceFile(link, write("email\n")); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the symlink was replaced: %v, %v", fi, err)
	}
	if b, _ := os.ReadFile(target); string(b) != "email\n" {
		t.Errorf("the link's target holds %q", b)
	}
	if fi, _ := os.Stat(target); fi.Mode().Perm() != 0o644 {
		t.Errorf("the target's mode is %v; want its 0644 kept", fi.Mode().Perm())
	}
	fresh := filepath.Join(dir, "new.csv")
	if err := replaceFile(fresh, write("x")); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(fresh); fi.Mode().Perm() != 0o600 {
		t.Errorf("a new export is %v; want 0600 (it holds addresses)", fi.Mode().Perm())
	}

	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no FIFO here: %v", err)
	}
	got := make(chan string, 1)
	go func() {
		f, err := os.Open(fifo)
		if err != nil {
			got <- err.Error()
			return
		}
		defer f.Close()
		b, _ := io.ReadAll(f)
		got <- string(b)
	}()
	if err := replaceFile(fifo, write("through the pipe\n")); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != "through the pipe\n" {
		t.Errorf("the FIFO's reader got %q", s)
	}
	if fi, _ := os.Lstat(fifo); fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the FIFO was replaced by a %v file", fi.Mode())
	}
}
