// Package metricsref reads the metrics reference (docs/metrics.md) so the
// artefacts that query metrics (the Grafana dashboard, the Prometheus
// alerts) can be held to it in tests: a renamed metric breaks the test, not
// an operator's dashboard or pager at 3 a.m.
package metricsref

import (
	"fmt"
	"os"
	"regexp"
	"strings"
)

// Load parses the reference table: metric name (first column) to type
// (second column: counter, gauge, histogram).
func Load(path string) (map[string]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		cols := strings.Split(line, "|")
		if len(cols) < 3 {
			continue
		}
		name := strings.Trim(strings.TrimSpace(cols[1]), "`")
		if strings.HasPrefix(name, "rangecast_") {
			m[name] = strings.TrimSpace(cols[2])
		}
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("%s: no rangecast_* rows in the table", path)
	}
	return m, nil
}

var metricName = regexp.MustCompile(`\brangecast_[a-zA-Z0-9_]+`)

// Used returns the documented metrics a PromQL expression reads, and the
// rangecast_* names in it that are not documented. A histogram's _bucket,
// _sum and _count series count as the histogram.
func Used(expr string, docs map[string]string) (used, unknown []string) {
	for _, name := range metricName.FindAllString(expr, -1) {
		base := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(name, suffix); ok && docs[b] == "histogram" {
				base = b
			}
		}
		if _, ok := docs[base]; !ok {
			unknown = append(unknown, name)
			continue
		}
		used = append(used, base)
	}
	return used, unknown
}
