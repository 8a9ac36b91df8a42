package message

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
)

// BenchmarkRender renders and MIME-builds one newsletter-sized message (a
// few paragraphs of HTML, the derived plain-text part, quoted-printable,
// headers): the per-message work of a page worker besides SMTP.
//
//	go test -run '^$' -bench Render -benchmem ./internal/message/
func BenchmarkRender(b *testing.B) {
	c, p := benchTemplate(b)
	var size int
	for b.Loop() {
		m, err := c.Render(p)
		if err != nil {
			b.Fatal(err)
		}
		size = len(m.Bytes)
	}
	b.ReportMetric(float64(size), "bytes/msg")
}

func benchTemplate(b *testing.B) (*Compiled, Params) {
	b.Helper()
	para := "<p>Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation.</p>\n"
	c, err := Compile(Template{
		FromName:    "Bench",
		FromAddress: "news@bench.example",
		Subject:     "News for {{.Name}}",
		HTML: "<html><body><h1>Hello {{.Name}}</h1>\n<p>The letter for {{.Attributes.city}}.</p>\n" + strings.Repeat(para, 4) +
			`<p><a href="https://bench.example/read">Read it on the web</a></p><p><a href="{{.UnsubscribeURL}}">Unsubscribe</a></p></body></html>`,
	})
	if err != nil {
		b.Fatal(err)
	}
	return c, Params{
		BroadcastID:    ulid.Make(),
		Contact:        Contact{ID: ulid.Make(), Email: "c123456@bench.example", Name: "Contact 123456", Attributes: map[string]any{"city": "Oslo"}},
		Date:           time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC),
		UnsubscribeURL: "https://mail.bench.example/u/AZLNm0c3GZ3R4ch1hZ1Y2yZ1AZLNm0c3GZ3R4ch1hZ1Y2yZ1AbCdEfGhIjKlMnOp",
	}
}

// processCPU is the user and system CPU time the process has used: on a
// machine shared with other work, CPU per message says more than wall time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRenderDKIM is a page worker's per-message CPU without SMTP:
// render, then sign (or not), for each kind of key. The parallel variants
// use every core, as a worker's in-flight window does; msg/s is what the
// machine can sign, to set beside the ~7k msg/s a bare SMTP client reaches
// on this box (DESIGN.md). No timing is asserted; docs/dkim.md has the
// figures.
//
//	go test -run '^$' -bench RenderDKIM -benchmem ./internal/message/
func BenchmarkRenderDKIM(b *testing.B) {
	c, p := benchTemplate(b)
	rsa2048, ed := rsaKey(b, 2048), ed25519Key(b)
	load := func(specs ...string) *DKIM {
		d, err := LoadDKIM(specs)
		if err != nil {
			b.Fatal(err)
		}
		return d
	}
	for _, tc := range []struct {
		name string
		dkim *DKIM
	}{
		{"unsigned", nil},
		{"rsa2048", load("bench.example=r:" + writeKey(b, rsa2048, false))},
		{"ed25519", load("bench.example=e:" + writeKey(b, ed, false))},
		{"rsa2048+ed25519", load("bench.example=r:"+writeKey(b, rsa2048, false), "bench.example=e:"+writeKey(b, ed, false))},
	} {
		one := func() {
			m, err := c.Render(p)
			if err == nil {
				_, _, err = tc.dkim.Sign(m)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu := processCPU()
			for b.Loop() {
				one()
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
			b.ReportMetric((processCPU()-cpu).Seconds()*1e6/float64(b.N), "cpu-µs/msg")
		})
		b.Run(tc.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			cpu := processCPU()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					one()
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
			b.ReportMetric((processCPU()-cpu).Seconds()*1e6/float64(b.N), "cpu-µs/msg")
		})
	}
}

// BenchmarkUnsubscribeURL is one contact's signed one-click link, which a
// page worker makes for every message besides rendering it.
func BenchmarkUnsubscribeURL(b *testing.B) {
	u, err := NewUnsubscribe("https://mail.example.com", []byte(strings.Repeat("k", MinUnsubscribeKeyLen)))
	if err != nil {
		b.Fatal(err)
	}
	broadcast, contact := ulid.Make(), ulid.Make()
	b.ReportAllocs()
	for b.Loop() {
		_ = u.URL(broadcast, contact)
	}
}
