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
