package cli

import (
	"errors"
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
		{[]string{"contacts", "purge", "p10@example.org"}, `unknown command "purge" for "rangecast contacts"`},
		{[]string{"broadcasts", "pasue", "X"}, `did you mean pause?`},
		{[]string{"governor", "stauts"}, `did you mean status?`},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"send", "templat", "list"}, `did you mean template?`}, // send runs itself too
	} {
		out, err := rangecast(t, "", tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("rangecast %s: err = %v (printed %q); want one saying %q", strings.Join(tc.args, " "), err, out, tc.want)
		}
	}
	// erase is delete, as the help calls it.
	if out, err := rangecast(t, "", "contacts", "erase", "--help"); err != nil || !strings.Contains(out, "Erase people") {
		t.Errorf("rangecast contacts erase --help: err = %v, printed %q; want delete's help", err, out)
	}
	var b strings.Builder
	printError(&b, errors.New("unknown command \"segmnts\"\n\nDid you mean this?\n\tsegments"))
	if strings.Contains(b.String(), `\t`) {
		t.Errorf("printError showed a tab as \\t: %q", b.String())
	}
	out, err := rangecast(t, "", "contacts")
	if err != nil || !strings.Contains(out, "Available Commands") {
		t.Errorf("rangecast contacts: err = %v, printed %q; want its help", err, out)
	}
}
