package message

import (
	"strings"
	"testing"
	"time"
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

// TestTextBuildersBounded: functions that build text from their arguments
// are bounded in what one call returns, so a template cannot grow a
// string in a variable (no write, so no step and no output for the budget
// to meter) until the process runs out of memory (a tester's five nested
// printf levels took 6 GB at create). Each is refused quickly, with the
// function named, and a template within the bound renders as before.
func TestTextBuildersBounded(t *testing.T) {
	t.Parallel()
	unsub := `<a href="{{.UnsubscribeURL}}">u</a>`
	for _, c := range []struct{ name, html, fn string }{
		{"nested printf", `{{$a := printf "%0900000d" 0}}{{$b := printf "%s%s%s%s" $a $a $a $a}}` +
			`{{$c := printf "%s%s%s%s" $b $b $b $b}}{{$d := printf "%s%s%s%s" $c $c $c $c}}{{len $d}}`, "printf"},
		{"one huge width", `{{$a := printf "%0900000000d" 0}}{{len $a}}`, "printf"},
		{"width from an argument", `{{$a := printf "%0*d" 900000000 0}}{{len $a}}`, "printf"},
		{"precision", `{{$a := printf "%.900000000f" 1.5}}{{len $a}}`, "printf"},
		{"one argument printed again and again", `{{$a := printf "%03000000d" 0}}{{$b := printf "%[1]s%[1]s%[1]s%[1]s%[1]s" $a}}{{len $b}}`, "printf"},
		{"print", `{{$a := printf "%03000000d" 0}}{{$b := print $a $a}}{{len $b}}`, "print"},
		{"println", `{{$a := printf "%03000000d" 0}}{{$b := println $a $a}}{{len $b}}`, "println"},
		{"html", `{{$a := printf "%03000000s" "<"}}{{$b := html $a $a}}{{len $b}}`, "html"},
		{"js", `{{$a := printf "%03000000s" "<"}}{{$b := js $a $a}}{{len $b}}`, "js"},
		{"urlquery", `{{$a := printf "%03000000s" "<"}}{{$b := urlquery $a $a}}{{len $b}}`, "urlquery"},
	} {
		start := time.Now()
		tm := baseTemplate()
		tm.HTML = unsub + c.html
		_, err := Compile(tm)
		if err == nil || !strings.Contains(err.Error(), c.fn+" would build a string") {
			t.Errorf("%s: Compile = %v; want %s refused for its size", c.name, err, c.fn)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: took %s", c.name, d)
		}
	}
	tm := baseTemplate()
	tm.Text = `{{print "a" 1}}|{{println "b"}}|{{html "<x>"}}|{{js "'"}}|{{urlquery "a b"}}|{{printf "%05d|%-4s|%*d|%.2f" 7 "ab" 3 1 2.5}}`
	r := mustRender(t, mustCompile(t, tm), baseParams())
	if want := "a1|b\r\n|&lt;x&gt;|\\'|a+b|00007|ab  |  1|2.50"; !strings.Contains(string(r.Bytes), want) {
		t.Errorf("the builders within bounds render %q; want %q in it", r.Bytes, want)
	}
}

// TestMissingAttributeNamesItsOtherCase: a contact lacking the attribute a
// template names, but holding it under another case (a CSV column "City"
// against {{.Attributes.city}}), fails with the key it does have named.
func TestMissingAttributeNamesItsOtherCase(t *testing.T) {
	t.Parallel()
	tm := baseTemplate()
	tm.Text = `Greetings to {{.Attributes.city}}`
	c := mustCompile(t, tm)
	p := baseParams()
	p.Contact.Attributes = map[string]any{"City": "Oslo", "plan": "pro"}
	_, err := c.Render(p)
	if err == nil || !strings.Contains(err.Error(), `no attribute "city"`) || !strings.Contains(err.Error(), `(it has "City": attribute names are case-sensitive)`) {
		t.Errorf("render with City for city: %v", err)
	}
}
