// Package child runs the separate processes of a test or benchmark harness
// (nats-server, the SMTP sink, coordinators, page workers): it starts,
// signals, kills and restarts them, and keeps their output in a log file.
// It also holds the rest the harnesses (make bench, make chaos) share: their
// work folder and the Postgres server they default to.
package child

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is one child process. Each runs in a process group of its own, so a
// kill takes whatever it started with it, and dies with the harness
// (Pdeathsig), so nothing is left running after a crash of the harness. Its
// output is appended to one log file across restarts.
type Proc struct {
	Name    string
	Path    string
	Args    []string
	Env     []string // added to the harness's environment
	LogPath string
	// Label starts the line written to the log at each start
	// ("=== Label: start #N at …"), so a harness can tell it from output.
	Label string

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
	intended bool // the current process is being stopped on purpose
	starts   int
	// exits lists exits the harness did not cause (a crash, or giving up
	// because a dependency was down), with the exit status.
	exits []string
}

// Start starts the process; it must not be running.
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !p.exited() {
		return fmt.Errorf("%s: already running", p.Name)
	}
	f, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	p.starts++
	fmt.Fprintf(f, "=== %s: start #%d at %s: %s %s\n", p.Label, p.starts, time.Now().Format(time.RFC3339Nano), p.Path, strings.Join(p.Args, " "))
	cmd := exec.Command(p.Path, p.Args...)
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.Stdout, cmd.Stderr = f, f
	// Setpgid: kill -9 reaches the whole group. Pdeathsig: if the harness
	// itself dies, the kernel kills the child, so nothing is left running.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.intended = cmd, done, false
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		if !p.intended && p.cmd == cmd {
			p.exits = append(p.exits, fmt.Sprintf("%s exited by itself (%v)", p.Name, exitText(err)))
		}
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

func exitText(err error) string {
	if err == nil {
		return "status 0"
	}
	return err.Error()
}

// exited reports whether the current process has ended; p.mu held.
func (p *Proc) exited() bool {
	if p.done == nil {
		return true
	}
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Running reports whether the process is up.
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !p.exited()
}

// DiedByItself reports whether the process was started and has ended
// without the harness stopping it.
func (p *Proc) DiedByItself() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && p.exited() && !p.intended
}

// Pid is the process id of the current process, 0 before the first start.
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Signal sends sig to the process group and waits up to wait for the
// process to end; then it is killed.
func (p *Proc) Signal(sig syscall.Signal, wait time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	if cmd == nil {
		p.mu.Unlock()
		return
	}
	p.intended = true
	p.mu.Unlock()
	pgid := cmd.Process.Pid
	syscall.Kill(-pgid, sig) //nolint:errcheck // already gone is fine
	select {
	case <-done:
	case <-time.After(wait):
		syscall.Kill(-pgid, syscall.SIGKILL) //nolint:errcheck
		<-done
	}
	// Anything the process left in its group goes too.
	syscall.Kill(-pgid, syscall.SIGKILL) //nolint:errcheck
}

// Kill9 is kill -9 of the process group.
func (p *Proc) Kill9() { p.Signal(syscall.SIGKILL, 10*time.Second) }

// OwnExits returns the exits the harness did not cause.
func (p *Proc) OwnExits() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.exits...)
}

// LogTail returns the last n lines of the process's log.
func (p *Proc) LogTail(n int) string {
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// FreeAddr returns a 127.0.0.1 address with a port nothing listens on now.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// WaitTCP waits until addr accepts connections, for at most timeout or
// until ctx ends.
func WaitTCP(ctx context.Context, addr string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not accepting connections after %s: %w", addr, timeout, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// DefaultDatabaseURL is the Postgres server a harness uses when neither
// its flag nor TEST_DATABASE_URL names one (the tests' default too).
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// DatabaseURL is the server a harness runs against: explicit (its flag)
// if set, else TEST_DATABASE_URL, else DefaultDatabaseURL.
func DatabaseURL(explicit string) string {
	if explicit != "" {
		return explicit
	}
	if env := os.Getenv("TEST_DATABASE_URL"); env != "" {
		return env
	}
	return DefaultDatabaseURL
}

// WorkDir returns the harness's work folder: dir, created if needed, or a
// new temporary one named after prefix. cleanup removes a temporary folder
// unless keep is set, and never removes a folder the caller named.
func WorkDir(dir, prefix string, keep bool) (path string, cleanup func(), err error) {
	if dir != "" {
		return dir, func() {}, os.MkdirAll(dir, 0o755)
	}
	d, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", nil, err
	}
	if keep {
		return d, func() {}, nil
	}
	return d, func() { os.RemoveAll(d) }, nil
}
