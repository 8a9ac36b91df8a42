package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one child process the harness starts, kills and restarts. Each
// runs in a process group of its own, so a kill takes whatever it started
// with it; its output is appended to one log file across restarts.
type proc struct {
	name    string
	path    string
	args    []string
	logPath string

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
	intended bool // the current process is being stopped on purpose
	starts   int
	// exits lists exits the harness did not cause (a crash, or giving up
	// because a dependency was down), with the exit status.
	exits []string
}

func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !p.exited() {
		return fmt.Errorf("%s: already running", p.name)
	}
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	p.starts++
	fmt.Fprintf(f, "=== chaos: start #%d at %s: %s %s\n", p.starts, time.Now().Format(time.RFC3339Nano), p.path, strings.Join(p.args, " "))
	cmd := exec.Command(p.path, p.args...)
	cmd.Stdout, cmd.Stderr = f, f
	// Setpgid: kill -9 reaches the whole group. Pdeathsig: if the harness
	// itself dies, the kernel kills the child, so nothing is left running.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.intended = cmd, done, false
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		if !p.intended && p.cmd == cmd {
			p.exits = append(p.exits, fmt.Sprintf("%s exited by itself (%v)", p.name, exitText(err)))
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
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// running reports whether the process is up.
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !p.exited()
}

// signal sends sig to the process group and waits up to wait for the
// process to end; then it is killed.
func (p *proc) signal(sig syscall.Signal, wait time.Duration) {
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

// kill9 is kill -9 of the process group.
func (p *proc) kill9() { p.signal(syscall.SIGKILL, 10*time.Second) }

// ownExits returns the exits the harness did not cause.
func (p *proc) ownExits() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.exits...)
}

// logTail returns the last n lines of the process's log.
func (p *proc) logTail(n int) string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// freeAddr returns a 127.0.0.1 address with a port nothing listens on now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// waitTCP waits until addr accepts connections.
func waitTCP(addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not accepting connections after %s: %w", addr, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
