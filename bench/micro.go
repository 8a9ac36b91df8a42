package bench

import (
	"context"
	"fmt"
	"os/exec"
	"time"
)

// MicroPackages hold the hot paths' testing.B benchmarks; MicroPattern
// selects them (not the long store walks those packages also have).
var (
	MicroPackages = []string{"./internal/ranges/", "./internal/message/", "./internal/store/postgres/"}
	MicroPattern  = "^Benchmark(Split|Position|Render|EligiblePage|ClaimBatch|RecordOutcomes|WindowWrite)$"
)

// micro runs the micro-benchmarks and returns go test's output.
func (h *harness) micro(ctx context.Context) (string, error) {
	count := "5"
	if h.cfg.Short {
		count = "1"
	}
	args := append([]string{"test", "-run", "^$", "-bench", MicroPattern, "-benchmem", "-count", count}, MicroPackages...)
	h.logf("micro-benchmarks: go %v", args)
	began := time.Now()
	out, err := exec.CommandContext(ctx, "go", args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go test -bench: %v\n%s", err, out)
	}
	h.logf("micro-benchmarks done in %s", time.Since(began).Round(time.Second))
	return string(out), nil
}
