package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rangecast/rangecast/internal/procstat"
	"github.com/rangecast/rangecast/internal/sinkproc"
)

// scrape reads a Prometheus text exposition and returns each series'
// value, keyed by the series as written (name and labels).
func scrape(ctx context.Context, addr string) (map[string]float64, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(cctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// sum adds every series of the metric name.
func sum(m map[string]float64, name string) float64 {
	var t float64
	for k, v := range m {
		if k == name || strings.HasPrefix(k, name+"{") {
			t += v
		}
	}
	return t
}

// sinkStats reads the sink's counters.
func sinkStats(ctx context.Context, url string) (sinkproc.Stats, error) {
	var st sinkproc.Stats
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(cctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("sink stats: %s", resp.Status)
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	return st, err
}

// cpuSampler follows the CPU time of groups of processes whose members may
// come and go (Postgres backends, restarted workers). A process already
// running at the start counts from its value then; one that appears later
// counts from zero. A process that exits loses at most one interval.
type cpuSampler struct {
	groups map[string]func() []int
	mu     sync.Mutex
	base   map[string]map[int]time.Duration
	last   map[string]map[int]time.Duration
	stopc  chan struct{}
	done   chan struct{}
}

func startCPUSampler(interval time.Duration, groups map[string]func() []int) *cpuSampler {
	s := &cpuSampler{groups: groups, base: map[string]map[int]time.Duration{}, last: map[string]map[int]time.Duration{},
		stopc: make(chan struct{}), done: make(chan struct{})}
	for g := range groups {
		s.base[g], s.last[g] = map[int]time.Duration{}, map[int]time.Duration{}
	}
	s.sample(true)
	go func() {
		defer close(s.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-s.stopc:
				return
			case <-t.C:
				s.sample(false)
			}
		}
	}()
	return s
}

func (s *cpuSampler) sample(first bool) {
	for g, pids := range s.groups {
		for _, pid := range pids() {
			v, err := procstat.CPU(pid)
			if err != nil {
				continue // exited between listing and reading
			}
			s.mu.Lock()
			if _, seen := s.last[g][pid]; !seen {
				if first {
					s.base[g][pid] = v
				} else {
					s.base[g][pid] = 0
				}
			}
			s.last[g][pid] = v
			s.mu.Unlock()
		}
	}
}

// stop takes a last sample and returns each group's CPU time since start.
func (s *cpuSampler) stop() map[string]time.Duration {
	close(s.stopc)
	<-s.done
	s.sample(false)
	out := map[string]time.Duration{}
	s.mu.Lock()
	defer s.mu.Unlock()
	for g := range s.groups {
		for pid, v := range s.last[g] {
			out[g] += v - s.base[g][pid]
		}
	}
	return out
}

// profile takes a CPU profile of the process serving pprof on addr and
// returns pprof's top entries for it.
func profile(ctx context.Context, addr, binary, path string, seconds int) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, time.Duration(seconds+30)*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(cctx, http.MethodGet, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, seconds), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("profile %s: %s", addr, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=15", binary, path).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go tool pprof: %v\n%s", err, out)
	}
	return trimPprof(string(out)), nil
}

// trimPprof keeps pprof -top's summary and table, without the file header.
func trimPprof(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "Duration:") || strings.HasPrefix(l, "Showing") {
			return strings.Join(lines[i:], "\n")
		}
	}
	return s
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
