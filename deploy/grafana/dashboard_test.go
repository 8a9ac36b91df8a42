// Package grafana holds the rangecast Grafana dashboard (rangecast.json);
// this test keeps it loadable and in step with docs/metrics.md.
package grafana

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/rangecast/rangecast/internal/metricsref"
)

type target struct {
	RefID      string          `json:"refId"`
	Expr       string          `json:"expr"`
	Datasource json.RawMessage `json:"datasource"`
}

type panel struct {
	ID         int                       `json:"id"`
	Type       string                    `json:"type"`
	Title      string                    `json:"title"`
	Datasource json.RawMessage           `json:"datasource"`
	GridPos    *struct{ H, W, X, Y int } `json:"gridPos"`
	Targets    []target                  `json:"targets"`
	Panels     []panel                   `json:"panels"` // a collapsed row's panels
}

type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name, Type string
			Query      any
		} `json:"list"`
	} `json:"templating"`
}

func load(t *testing.T) dashboard {
	t.Helper()
	raw, err := os.ReadFile("rangecast.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("rangecast.json: %v", err)
	}
	if dec.More() {
		t.Fatal("rangecast.json: trailing data after the dashboard object")
	}
	return d
}

// all flattens rows: a row panel's own targets are not required, its
// children's are.
func all(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		if p.Type == "row" {
			out = append(out, all(p.Panels)...)
			continue
		}
		out = append(out, p)
	}
	return out
}

func TestDashboard(t *testing.T) {
	d := load(t)
	if d.UID == "" || d.Title == "" {
		t.Error("dashboard needs a uid and a title")
	}
	if d.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d: want a current Grafana schema (~39)", d.SchemaVersion)
	}
	hasDS := false
	for _, v := range d.Templating.List {
		if v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus" {
			hasDS = true
		}
	}
	if !hasDS {
		t.Fatal("no Prometheus datasource variable named datasource")
	}
	panels := all(d.Panels)
	if len(panels) == 0 {
		t.Fatal("no panels")
	}
	ids := map[int]bool{}
	for _, p := range panels {
		name := p.Title
		if strings.TrimSpace(p.Title) == "" {
			name = "panel " + p.Type
			t.Errorf("panel id %d has no title", p.ID)
		}
		if ids[p.ID] {
			t.Errorf("%s: duplicate panel id %d", name, p.ID)
		}
		ids[p.ID] = true
		if p.GridPos == nil || p.GridPos.W == 0 || p.GridPos.H == 0 {
			t.Errorf("%s: no gridPos", name)
		}
		if len(p.Targets) == 0 {
			t.Errorf("%s: no targets", name)
		}
		if !strings.Contains(string(p.Datasource), "${datasource}") {
			t.Errorf("%s: datasource %s does not use the ${datasource} variable", name, p.Datasource)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("%s: target %s has no expr", name, tg.RefID)
			}
			if tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("%s: target refId %q missing or repeated", name, tg.RefID)
			}
			refs[tg.RefID] = true
			if open, closed := strings.Count(tg.Expr, "("), strings.Count(tg.Expr, ")"); open != closed {
				t.Errorf("%s: %q: unbalanced parentheses", name, tg.Expr)
			}
		}
	}
}

// TestMetricsDocumented: every rangecast_* series a panel queries is a
// documented metric (a histogram's _bucket/_sum/_count series count as the
// histogram).
func TestMetricsDocumented(t *testing.T) {
	docs, err := metricsref.Load("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, p := range all(load(t).Panels) {
		for _, tg := range p.Targets {
			names, unknown := metricsref.Used(tg.Expr, docs)
			for _, name := range unknown {
				t.Errorf("%s: %s is not in docs/metrics.md", p.Title, name)
			}
			for _, name := range names {
				used[name] = true
			}
		}
	}
	// Not required, but say what the dashboard leaves out.
	var missing []string
	for name := range docs {
		if !used[name] {
			missing = append(missing, name)
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Logf("documented metrics not on the dashboard: %v", missing)
	}
}
