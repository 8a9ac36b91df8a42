package bench

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is one child process. Each runs in a process group of its own, so a
// kill takes whatever it started with it, and dies with the harness
// (Pdeathsig), so nothing is left running after a crash of the bench.
type proc struct {
	name    string
	path    string
	args    []string
	env     []string
	logPath string

	cmd  *exec.Cmd
	done chan struct{}
}

func (p *proc) start() error {
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "=== bench: start at %s: %s %s\n", time.Now().Format(time.RFC3339Nano), p.path, strings.Join(p.args, " "))
	cmd := exec.Command(p.path, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done = cmd, done
	go func() {
		cmd.Wait() //nolint:errcheck // exit status is in the log when it matters
		f.Close()
		close(done)
	}()
	return nil
}

// pid is the process id of the running process (0 when not started).
func (p *proc) pid() int {
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

func (p *proc) exited() bool {
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

// stop sends sig to the group and waits up to wait, then kills it.
func (p *proc) stop(sig syscall.Signal, wait time.Duration) {
	if p.cmd == nil {
		return
	}
	pgid := p.cmd.Process.Pid
	syscall.Kill(-pgid, sig) //nolint:errcheck // already gone is fine
	select {
	case <-p.done:
	case <-time.After(wait):
		syscall.Kill(-pgid, syscall.SIGKILL) //nolint:errcheck
		<-p.done
	}
	syscall.Kill(-pgid, syscall.SIGKILL) //nolint:errcheck
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

// clockTicks is USER_HZ, the unit of utime/stime in /proc/PID/stat. It is
// 100 on every Linux platform Go supports.
const clockTicks = 100

// cpuTime reads utime+stime of pid from /proc/PID/stat (this process only,
// not its waited-for children).
func cpuTime(pid int) (time.Duration, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields after it are
	// counted from the closing parenthesis.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	// After ")": state is field 3, utime field 14, stime field 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// statusKB reads a "Key: N kB" line of /proc/PID/status (VmHWM, VmRSS).
func statusKB(pid int, key string) (int64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, key+":"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				break
			}
			return strconv.ParseInt(f[0], 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no %s", pid, key)
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
