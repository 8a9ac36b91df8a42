package message

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// Bombs are refused as a *ValidationError, at compile, well under a
// second: the literal loops and recursion by the parse check, the rest by
// the budget of the sample render.
func TestTemplateBombsRefused(t *testing.T) {
	t.Parallel()
	bombs := map[string]string{
		"range over a huge integer":      `{{range 100000000000}}{{end}}`,
		"through a variable":             `{{$n := 100000000000}}{{range $n}}{{end}}`,
		"nested loops that write":        `{{range 10000}}{{range 10000}}xxxxxxxxxxxxxxxx{{end}}{{end}}`,
		"nested loops that write little": `{{range 10000}}{{range 10000}}{{end}}{{end}}`,
		"recursion":                      `{{define "a"}}{{template "a" .}}{{end}}{{template "a" .}}`,
		"mutual recursion":               `{{define "a"}}{{template "b" .}}{{end}}{{define "b"}}{{template "a" .}}{{template "a" .}}{{end}}{{template "a" .}}`,
		"output":                         `{{range 10000}}{{printf "%0900000d" 1}}{{end}}`,
		"computed loop":                  `{{range $i := 10000}}{{range len (printf "%09999d" 1)}}{{range 100}}{{end}}{{end}}{{end}}`,
		"source":                         strings.Repeat("x", MaxSource+1),
	}
	for name, html := range bombs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			_, err := Compile(Template{FromAddress: "news@example.com", Subject: "Hi", HTML: html})
			var ve *ValidationError
			if !errors.As(err, &ve) || ve.Field != fieldHTML {
				t.Fatalf("Compile = %v; want a ValidationError on html", err)
			}
			if d := time.Since(start); d > 500*time.Millisecond {
				t.Errorf("refused after %s; want well under a second", d)
			}
			t.Log(err)
		})
	}
}

// The same budgets hold for transactional templates, at compile (put) and
// at execution (send).
func TestTransactionalTemplateBombsRefused(t *testing.T) {
	t.Parallel()
	_, err := CompileTransactional(TransactionalTemplate{Subject: "s", Text: `{{range 100000000000}}{{end}}`})
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("CompileTransactional = %v; want a ValidationError", err)
	}
	c, err := CompileTransactional(TransactionalTemplate{Subject: "s", HTML: `{{range .rows}}{{range $.rows}}{{range $.rows}}{{.}}{{end}}{{end}}{{end}}`})
	if err != nil {
		t.Fatal(err)
	}
	rows := make([]any, 200)
	for i := range rows {
		rows[i] = "row"
	}
	start := time.Now()
	_, _, _, err = c.Execute(map[string]any{"rows": rows})
	if !errors.As(err, &ve) || !strings.Contains(ve.Reason, "to render") {
		t.Fatalf("Execute = %v; want the budget", err)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("stopped after %s", d)
	}
}

// Real templates are untouched by the budget: loops, defines and blocks
// render as before, and the instrumentation adds no output.
func TestBudgetKeepsOrdinaryTemplates(t *testing.T) {
	t.Parallel()
	c, err := Compile(Template{FromAddress: "news@example.com", Subject: "Hi {{.Name}}",
		HTML: `{{define "row"}}<li>{{.}}</li>{{end}}<ul>{{range 3}}{{template "row" .}}{{end}}</ul>{{block "foot" .}}<p>{{.Name}}</p>{{end}}`})
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Render(Params{Contact: Contact{Email: "a@example.org", Name: "Ann"}, Date: time.Unix(0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(m.Bytes), "<ul><li>0</li><li>1</li><li>2</li></ul><p>Ann</p>") {
		t.Errorf("rendered:\n%s", m.Bytes)
	}
}

// FuzzTemplateBudget: whatever the source, Compile and Render return (an
// error or a message) within a bound, and never more output than the
// budget allows.
func FuzzTemplateBudget(f *testing.F) {
	for _, s := range []string{`{{range 10000}}{{range 10000}}{{end}}{{end}}`, `{{define "a"}}{{template "a"}}{{end}}`,
		`{{range $i := 5000}}{{printf "%0100000d" $i}}{{end}}`, `<p>{{.Name}}</p>`, `{{range .Attributes}}{{.}}{{end}}`,
		`{{$x := 10000}}{{range $x}}{{range $x}}{{end}}{{end}}`, `{{with .Name}}{{range len .}}{{.}}{{end}}{{end}}`} {
		f.Add(s)
	}
	budget := DefaultBudget
	budget.MaxTime = 200 * time.Millisecond
	f.Fuzz(func(t *testing.T, html string) {
		start := time.Now()
		c, err := CompileBudget(Template{FromAddress: "news@example.com", Subject: "Hi", HTML: html}, budget)
		if err == nil {
			m, err := c.Render(Params{Contact: Contact{Email: "a@example.org", Name: "Ann", Attributes: map[string]any{"k": "v"}}, Date: time.Unix(0, 0)})
			if err == nil && len(m.Bytes) > 3*budget.MaxOutput {
				t.Fatalf("rendered %d bytes", len(m.Bytes))
			}
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("took %s", d)
		}
	})
}
