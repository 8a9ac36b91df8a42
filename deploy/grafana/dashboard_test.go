// Package grafana holds the rangecast Grafana dashboard (rangecast.json);
// this test keeps it loadable and in step with docs/metrics.md.
package grafana

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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

// declared reads the metrics the code registers: every
// prometheus.{Counter,Gauge,Histogram,Summary}Opts literal with a Name in
// a metrics.go under internal/ (one file per component declares them),
// name to type, as docs/metrics.md spells types.
func declared(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir("../../internal", func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || e.Name() != "metrics.go" {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			sel, ok := lit.Type.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			typ, ok := strings.CutSuffix(sel.Sel.Name, "Opts")
			if x, _ := sel.X.(*ast.Ident); !ok || x == nil || x.Name != "prometheus" {
				return true
			}
			for _, el := range lit.Elts {
				kv, ok := el.(*ast.KeyValueExpr)
				if k, _ := kv.Key.(*ast.Ident); !ok || k == nil || k.Name != "Name" {
					continue
				}
				if v, ok := kv.Value.(*ast.BasicLit); ok && v.Kind == token.STRING {
					name, _ := strconv.Unquote(v.Value)
					out[name] = strings.ToLower(typ)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("no metrics found in internal/*/metrics.go")
	}
	return out
}

// families the dashboard must cover whole: every metric of each, as the
// code declares them, is on some panel.
var families = []string{"rangecast_governor_", "rangecast_transactional_", "rangecast_webhook_", "rangecast_unsubscribe_"}

// TestMetricsExist: every rangecast_* series a panel queries is a metric
// the code declares (not only one the docs list), and the governor,
// transactional and webhook (and unsubscribe) families are on the
// dashboard, every metric of them.
func TestMetricsExist(t *testing.T) {
	code := declared(t)
	used := map[string]bool{}
	for _, p := range all(load(t).Panels) {
		for _, tg := range p.Targets {
			names, unknown := metricsref.Used(tg.Expr, code)
			for _, name := range unknown {
				t.Errorf("%s: %s is no metric declared in internal/*/metrics.go", p.Title, name)
			}
			for _, name := range names {
				used[name] = true
			}
		}
	}
	for _, fam := range families {
		n := 0
		for name := range code {
			if !strings.HasPrefix(name, fam) {
				continue
			}
			n++
			if !used[name] {
				t.Errorf("%s is on no panel; the dashboard covers the whole %s* family", name, fam)
			}
		}
		if n == 0 {
			t.Errorf("no metric %s* is declared; the family was renamed?", fam)
		}
	}
}
