package message

import (
	"strings"
	"testing"
)

// TestPrintfMistakesRefused: a printf whose verbs do not fit its arguments
// is refused at compile time (the sample render), in the subject, the HTML
// and the text, instead of sending fmt's "%!d(string=…)" to every
// recipient; a printf that fits renders, and contact data that holds "%!"
// is not mistaken for fmt's complaint.
func TestPrintfMistakesRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		edit func(*Template)
	}{
		{"subject, wrong verb", func(tm *Template) { tm.Subject = `Hello {{printf "%d" .Name}}` }},
		{"html, missing argument", func(tm *Template) { tm.HTML = `<p>{{printf "%s and %s" .Name}}</p>` }},
		{"text, extra argument", func(tm *Template) { tm.Text = `Hi {{printf "%s" .Name .Email}}` }},
		{"html, no verb", func(tm *Template) { tm.HTML = `<p>{{printf "%" .Name}}</p>` }},
	} {
		tm := baseTemplate()
		c.edit(&tm)
		_, err := Compile(tm)
		if err == nil || !strings.Contains(err.Error(), "printf") || !strings.Contains(err.Error(), "do not fit") {
			t.Errorf("%s: Compile = %v; want the printf refused", c.name, err)
		}
	}

	// Contact data ending in "%" before a "!" is no complaint (a
	// reviewer's "Save 20%!").
	tm := baseTemplate()
	tm.Text = `{{printf "Save %s!" .Attributes.plan}}`
	c0 := mustCompile(t, tm)
	p0 := baseParams()
	p0.Contact.Attributes = map[string]any{"plan": "20%"}
	if r := mustRender(t, c0, p0); !strings.Contains(string(r.Bytes), "Save 20%!") {
		t.Errorf("printf of data ending in %%: %s", r.Bytes)
	}

	tm = baseTemplate()
	tm.Subject = `{{printf "%s, 100%% yours" .Name}}`
	tm.HTML = `<p>{{printf "%.1f" 2.25}} {{printf "%q" .Name}}</p>`
	c := mustCompile(t, tm)
	p := baseParams()
	p.Contact.Name = "Ada %!d(string=x)"
	r := mustRender(t, c, p)
	if !strings.Contains(string(r.Bytes), "Subject: Ada %!d(string=x), 100% yours") {
		t.Errorf("a printf that fits, with contact data holding %%!: %s", r.Bytes[:min(len(r.Bytes), 600)])
	}
}
