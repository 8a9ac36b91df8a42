package gcpolicy

import "testing"

func TestDecide(t *testing.T) {
	t.Parallel()
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	limit := func(s string) func() string { return func() string { return s } }
	for _, tc := range []struct {
		name  string
		env   map[string]string
		limit string
		want  Settings
	}{
		{"no container limit", nil, "", Settings{Percent: Percent}},
		{"cgroup v2 without a limit", nil, "max\n", Settings{Percent: Percent}},
		{"cgroup v1 without a limit", nil, "9223372036854771712\n", Settings{Percent: Percent}},
		{"a 512 MiB limit", nil, "536870912\n", Settings{Percent: Percent, MemoryLimit: 429496729}},
		{"GOGC set by the operator", map[string]string{"GOGC": "100"}, "536870912", Settings{MemoryLimit: 429496729}},
		{"GOMEMLIMIT set by the operator", map[string]string{"GOMEMLIMIT": "300MiB"}, "536870912", Settings{Percent: Percent}},
		{"both set", map[string]string{"GOGC": "off", "GOMEMLIMIT": "1GiB"}, "536870912", Settings{}},
		{"unreadable limit", nil, "garbage", Settings{Percent: Percent}},
	} {
		if got := Decide(env(tc.env), limit(tc.limit)); got != tc.want {
			t.Errorf("%s: Decide = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestCgroupV2Path(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"0::/\n": "/",
		"0::/system.slice/rangecast-pageworker.service\n": "/system.slice/rangecast-pageworker.service",
		"12:memory:/docker/abc\n11:cpu:/docker/abc\n":     "",
		"1:name=systemd:/x\n0::/kubepods/pod1/c1\n":       "/kubepods/pod1/c1",
		"": "",
	} {
		if got := cgroupV2Path(in); got != want {
			t.Errorf("cgroupV2Path(%q) = %q, want %q", in, got, want)
		}
	}
}
