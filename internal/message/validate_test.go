package message

import (
	"strings"
	"testing"
)

func TestCheckControl(t *testing.T) {
	for _, c := range []struct {
		v    string
		want string // "" accepted; else a word of the refusal
	}{
		{"Spring sale\tnow", ""},
		{"שלום \u200fעולם", ""},            // a right-to-left mark
		{"name \u2067عربي\u2069 here", ""}, // an isolate
		{"Über größe ✓", ""},
		{"line\nbreak", "control character U+000A"},
		{"esc\x1b[2Jclear", "control character U+001B"},
		{"c1 \u0085 next line", "control character U+0085"},
		{"js\u2028separator", "line or paragraph separator U+2028"},
		{"para\u2029graph", "line or paragraph separator U+2029"},
		{"invoice \u202egnp.exe", "bidirectional override U+202E"},
		{"embed \u202bhere\u202c", "bidirectional override U+202B"},
	} {
		err := CheckControl("subject", c.v)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%q refused: %v", c.v, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%q: %v; want a refusal naming %q", c.v, err, c.want)
		}
	}
}
