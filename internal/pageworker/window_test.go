package pageworker

import "testing"

func TestWholeWindows(t *testing.T) {
	t.Parallel()
	cases := []struct{ limit, window, want int }{
		{200, 64, 192},
		{200, 16, 192},
		{200, 8, 200},
		{200, 200, 200},
		{200, 256, 200}, // a page smaller than a window is one window
		{10, 4, 8},
		{3, 4, 3}, // a throttled page of a few messages is left alone
		{1, 1, 1},
	}
	for _, c := range cases {
		if got := wholeWindows(c.limit, c.window); got != c.want {
			t.Errorf("wholeWindows(%d, %d) = %d, want %d", c.limit, c.window, got, c.want)
		}
	}
}

// TestWindowUnwell: a page stops on a window that looks like a struggling
// server, never on a provider's ordinary few percent of deferrals, however
// short the window.
func TestWindowUnwell(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		refused, attempted, window int
		want                       bool
	}{
		{0, 16, 16, false},
		{1, 1, 16, false}, // the last send of a page refused: one row deferred, not a stopped range
		{1, 2, 16, false},
		{2, 2, 16, false},
		{2, 16, 16, false},
		{3, 3, 16, true}, // everything refused
		{3, 6, 16, true},
		{7, 16, 16, false},
		{8, 16, 16, true},
		{16, 16, 16, true},
		// Windows smaller than the floor: a full window refused stops the
		// page, or a relay refusing everyone would never be seen as one.
		{1, 1, 1, true},
		{0, 1, 1, false},
		{1, 2, 2, false},
		{2, 2, 2, true},
		{1, 1, 2, false}, // a short last window of one, of a window of two
		{2, 3, 3, false},
		{3, 3, 3, true},
	} {
		if got := windowUnwell(tt.refused, tt.attempted, tt.window); got != tt.want {
			t.Errorf("windowUnwell(%d refused of %d, window %d) = %v; want %v", tt.refused, tt.attempted, tt.window, got, tt.want)
		}
	}
}
