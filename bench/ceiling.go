package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emersion/go-smtp"
	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/message"
	"github.com/rangecast/rangecast/internal/procstat"
)

// content is what every benchmark broadcast sends, and what the bare client
// sends too, so message sizes match.
var content = message.Template{
	FromName:    "Bench",
	FromAddress: "news@bench.example",
	Subject:     "News for {{.Name}}",
	HTML: `<html><body><h1>Hello {{.Name}}</h1>
<p>This is the monthly letter for everyone in {{.Attributes.city}}. It is about as long as a short
newsletter: a few paragraphs of text, a link or two and a footer, so the message that travels is
a realistic few kilobytes rather than a one-liner.</p>
<p>Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore
et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut
aliquip ex ea commodo consequat. Duis aute irure dolor in reprehenderit in voluptate velit esse
cillum dolore eu fugiat nulla pariatur.</p>
<p>Excepteur sint occaecat cupidatat non proident, sunt in culpa qui officia deserunt mollit anim id
est laborum. Sed ut perspiciatis unde omnis iste natus error sit voluptatem accusantium doloremque
laudantium, totam rem aperiam.</p>
<p><a href="https://bench.example/read">Read it on the web</a></p>
<p style="font-size:small">You get this because you subscribed at bench.example. <a href="{{.UnsubscribeURL}}">Unsubscribe</a></p>
</body></html>`,
}

// sampleMessage renders content for one contact: the bytes the bare client
// sends.
func sampleMessage() (message.Rendered, error) {
	c, err := message.Compile(content)
	if err != nil {
		return message.Rendered{}, err
	}
	return c.Render(message.Params{
		BroadcastID: ulid.Make(),
		Contact:     message.Contact{ID: ulid.Make(), Email: "c123456@bench.example", Name: "Contact 123456", Attributes: map[string]any{"city": "Oslo"}},
		Date:        time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC),
		// As long as a signed one-click link of a worker's message.
		UnsubscribeURL: "http://127.0.0.1:40000/u/" + strings.Repeat("x", 120),
	})
}

// ceilingResult is the bare client's run.
type ceilingResult struct {
	conns     int
	messages  int64
	bytes     int
	elapsed   time.Duration
	clientCPU time.Duration // the harness process (the client) while it ran
	sinkCPU   time.Duration
}

func (r ceilingResult) rate() float64 { return float64(r.messages) / r.elapsed.Seconds() }

// cpuPerMsg is the bare client's own CPU per message.
func (r ceilingResult) cpuPerMsg() float64 {
	return float64(r.clientCPU) / float64(max(1, r.messages))
}

// adjacentBare is the bare client measured just before and just after one
// scenario. The box's speed drifts by tens of percent over the minutes a
// matrix takes (a ceiling of 10.5k msg/s at the start of one run, 6.7k in
// another an hour later), so a ratio against the run's first ceiling
// measures the drift as much as rangecast; against the mean of the two
// beside it, the drift within the scenario's own minute.
type adjacentBare struct{ before, after ceilingResult }

func (a adjacentBare) rate() float64 {
	return float64(a.before.messages+a.after.messages) / (a.before.elapsed + a.after.elapsed).Seconds()
}

func (a adjacentBare) cpuPerMsg() float64 {
	return float64(a.before.clientCPU+a.after.clientCPU) / float64(max(1, a.before.messages+a.after.messages))
}

// bareClient pushes n messages to addr over conns connections, each reused
// for every message (MAIL, RCPT, DATA; no RSET needed after a 250): no
// database, no NATS, no rendering. It is what the machine can do with SMTP
// alone, the ceiling rangecast's throughput is a fraction of.
func bareClient(ctx context.Context, addr string, conns int, n int64, m message.Rendered) (time.Duration, error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	began := time.Now()
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := smtp.Dial(addr)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			if err := c.Hello("bench.example"); err != nil {
				errs <- err
				return
			}
			for ctx.Err() == nil {
				i := next.Add(1)
				if i > n {
					break
				}
				if err := c.Mail(m.From, &smtp.MailOptions{Size: int64(len(m.Bytes))}); err != nil {
					errs <- err
					return
				}
				if err := c.Rcpt(fmt.Sprintf("c%d@bench.example", i), nil); err != nil {
					errs <- err
					return
				}
				w, err := c.Data()
				if err != nil {
					errs <- err
					return
				}
				if _, err := w.Write(m.Bytes); err != nil {
					errs <- err
					return
				}
				if err := w.Close(); err != nil {
					errs <- err
					return
				}
			}
			c.Quit() //nolint:errcheck
		}()
	}
	wg.Wait()
	elapsed := time.Since(began)
	close(errs)
	if err := <-errs; err != nil {
		return 0, fmt.Errorf("bare smtp client: %w", err)
	}
	return elapsed, ctx.Err()
}

// measureCeiling runs the bare client against a fresh sink; name is the
// work folder's (the run's first ceiling, or the one beside a scenario).
func (h *harness) measureCeiling(ctx context.Context, name string, conns int, n int64) (ceilingResult, error) {
	s := &stack{h: h, spec: stackSpec{name: name}}
	s.dir = h.dir + "/" + s.spec.name
	if err := os.MkdirAll(s.dir+"/logs", 0o755); err != nil {
		return ceilingResult{}, err
	}
	if err := s.startSink(ctx); err != nil {
		return ceilingResult{}, err
	}
	defer s.stop()
	m, err := sampleMessage()
	if err != nil {
		return ceilingResult{}, err
	}
	self := os.Getpid()
	cpu0, err1 := procstat.CPU(self)
	sink0, err2 := procstat.CPU(s.sink.Pid())
	elapsed, err := bareClient(ctx, s.sinkAddr, conns, n, m)
	if err != nil {
		return ceilingResult{}, err
	}
	cpu1, err3 := procstat.CPU(self)
	sink1, err4 := procstat.CPU(s.sink.Pid())
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
		return ceilingResult{}, fmt.Errorf("read /proc cpu times")
	}
	st, err := sinkStats(ctx, s.sinkStat)
	if err != nil {
		return ceilingResult{}, err
	}
	if st.Recipients != n {
		return ceilingResult{}, fmt.Errorf("bare client: sink accepted %d of %d", st.Recipients, n)
	}
	return ceilingResult{conns: conns, messages: n, bytes: len(m.Bytes), elapsed: elapsed, clientCPU: cpu1 - cpu0, sinkCPU: sink1 - sink0}, nil
}
