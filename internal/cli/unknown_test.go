package cli

import (
	"strings"
	"testing"
)

// TestUnknownSubcommandFails: a word that names no command of a group is
// an error, with a suggestion where one is near, as at the top level;
// cobra printed the group's help and succeeded, so a script's misspelt
// erasure or pause reported success (tester). A group alone still shows
// its help.
func TestUnknownSubcommandFails(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"contacts", "erase", "p10@example.org"}, `unknown command "erase" for "rangecast contacts"`},
		{[]string{"broadcasts", "pasue", "X"}, `did you mean pause?`},
		{[]string{"governor", "stauts"}, `did you mean status?`},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
	} {
		out, err := rangecast(t, "", tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("rangecast %s: err = %v (printed %q); want one saying %q", strings.Join(tc.args, " "), err, out, tc.want)
		}
	}
	out, err := rangecast(t, "", "contacts")
	if err != nil || !strings.Contains(out, "Available Commands") {
		t.Errorf("rangecast contacts: err = %v, printed %q; want its help", err, out)
	}
}
