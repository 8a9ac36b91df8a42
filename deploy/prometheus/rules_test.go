// Package prometheus holds rangecast's alerting rules (rules.yaml); this
// test keeps them well-formed and in step with docs/metrics.md.
package prometheus

import (
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/rangecast/rangecast/internal/metricsref"
)

type rule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

type ruleFile struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []rule `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// TestRules: every alert has a severity the pager knows, a summary, a
// description and a runbook, and queries only documented metrics. Strict
// decoding catches a misspelt field that Prometheus would ignore.
func TestRules(t *testing.T) {
	raw, err := os.ReadFile("rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.UnmarshalStrict(raw, &f); err != nil {
		t.Fatalf("rules.yaml: %v", err)
	}
	if f.APIVersion != "monitoring.coreos.com/v1" || f.Kind != "PrometheusRule" {
		t.Fatalf("rules.yaml is %s %s, want a monitoring.coreos.com/v1 PrometheusRule", f.APIVersion, f.Kind)
	}
	docs, err := metricsref.Load("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	n := 0
	for _, g := range f.Spec.Groups {
		for _, r := range g.Rules {
			n++
			if r.Alert == "" || seen[r.Alert] {
				t.Errorf("group %s: alert name %q is empty or repeated", g.Name, r.Alert)
			}
			seen[r.Alert] = true
			switch r.Labels["severity"] {
			case "critical", "warning", "info":
			default:
				t.Errorf("%s: severity %q, want critical, warning or info", r.Alert, r.Labels["severity"])
			}
			for _, a := range []string{"summary", "description", "runbook"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("%s: no %s", r.Alert, a)
				}
			}
			if strings.Count(r.Expr, "(") != strings.Count(r.Expr, ")") {
				t.Errorf("%s: unbalanced parentheses in %q", r.Alert, r.Expr)
			}
			used, unknown := metricsref.Used(r.Expr, docs)
			for _, name := range unknown {
				t.Errorf("%s: %s is not in docs/metrics.md", r.Alert, name)
			}
			if len(used) == 0 {
				t.Errorf("%s: queries no rangecast metric", r.Alert)
			}
		}
	}
	if n == 0 {
		t.Fatal("rules.yaml has no alerts")
	}
	// An operator paged at night reads the alert table in the runbook.
	ops, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for name := range seen {
		if !strings.Contains(string(ops), "| `"+name+"` |") {
			t.Errorf("%s is not in docs/operations.md's alert table", name)
		}
	}
}
