// Package sinkproc is an SMTP sink that accepts every message and, before
// replying 250, appends one line per envelope recipient (with the message's
// Message-ID) to a log it fsyncs. What the log holds was accepted; what it
// does not hold was not. The chaos harness (test/chaos) runs it as a separate
// process (cmd/smtpsink) and counts deliveries per recipient afterwards.
// Without a log it only counts, which is what the benchmark (bench) needs:
// an fsync per message would measure the sink's disk, not the sender.
package sinkproc

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/textproto"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// Options configures a sink.
type Options struct {
	// Addr to listen on; "127.0.0.1:0" picks a free port.
	Addr string
	// LogPath is the append-only delivery log; "" keeps no log and only
	// counts (Stats).
	LogPath string
	// Latency delays every DATA reply, like a real relay: throughput then
	// depends on how many messages senders keep in flight.
	Latency time.Duration
	// RefuseRcpt is the share of RCPT commands answered 451 4.3.0 at
	// random, as Yahoo's and Gmail's deferrals and greylisting do; 0 for
	// none.
	RefuseRcpt float64
	// Tarpit is the share of messages whose DATA reply is held for
	// TarpitDelay instead of Latency, at random, as a server that
	// tarpits some senders or scans some messages slowly does; 0 for
	// none.
	Tarpit      float64
	TarpitDelay time.Duration
	// ErrorLog receives go-smtp's connection errors; nil discards them.
	ErrorLog *log.Logger
}

// Sink is a running SMTP sink.
type Sink struct {
	srv      *smtp.Server
	ln       net.Listener
	log      *logWriter // nil without a log
	accepted atomic.Int64
	rcpts    atomic.Int64
	refused  atomic.Int64
	// first and last are the wall-clock times (Unix ns) of the first and
	// latest accepted message; 0 before any.
	first, last atomic.Int64
	// inData is the messages whose DATA is being answered right now, and
	// peak the most there ever were: the senders' messages in flight, as
	// the server sees them.
	inData, peak atomic.Int64
	served       chan error
	closing      chan struct{}
	once         sync.Once
}

// Start listens and serves until Close.
func Start(o Options) (*Sink, error) {
	var f *os.File
	if o.LogPath != "" {
		var err error
		if f, err = os.OpenFile(o.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
			return nil, fmt.Errorf("sinkproc: open log: %w", err)
		}
	}
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		if f != nil {
			f.Close()
		}
		return nil, fmt.Errorf("sinkproc: listen on %s: %w", o.Addr, err)
	}
	s := &Sink{ln: ln, served: make(chan error, 1), closing: make(chan struct{})}
	if f != nil {
		s.log = newLogWriter(f)
	}
	srv := smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) {
		return &session{s: s, latency: o.Latency, refuse: o.RefuseRcpt, tarpit: o.Tarpit, tarpitDelay: o.TarpitDelay}, nil
	}))
	srv.Domain = "localhost"
	srv.AllowInsecureAuth = true
	srv.MaxMessageBytes = 64 << 20
	srv.ReadTimeout = 5 * time.Minute
	srv.WriteTimeout = time.Minute
	if o.ErrorLog != nil {
		srv.ErrorLog = o.ErrorLog
	} else {
		srv.ErrorLog = log.New(io.Discard, "", 0)
	}
	s.srv = srv
	go func() { s.served <- srv.Serve(flushOnReadListener{ln}) }()
	return s, nil
}

// Addr is the address the sink listens on.
func (s *Sink) Addr() string { return s.ln.Addr().String() }

// Accepted is the number of messages accepted so far.
func (s *Sink) Accepted() int64 { return s.accepted.Load() }

// Stats is what a sink has accepted so far.
type Stats struct {
	Messages   int64 `json:"messages"`
	Recipients int64 `json:"recipients"`
	// Refused counts RCPTs answered with a random 451 (Options.RefuseRcpt).
	Refused int64 `json:"refused"`
	// FirstUnixNano and LastUnixNano are when the first and the latest
	// message were accepted (0 before any).
	FirstUnixNano int64 `json:"first_unix_nano"`
	LastUnixNano  int64 `json:"last_unix_nano"`
	// PeakInFlight is the most messages the sink was answering DATA for at
	// once: with a latency, the senders' messages in flight.
	PeakInFlight int64 `json:"peak_in_flight"`
	// InFlight is how many it is answering DATA for now.
	InFlight int64 `json:"in_flight"`
}

// Stats returns the counters so far.
func (s *Sink) Stats() Stats {
	return Stats{Messages: s.accepted.Load(), Recipients: s.rcpts.Load(), Refused: s.refused.Load(), FirstUnixNano: s.first.Load(), LastUnixNano: s.last.Load(), PeakInFlight: s.peak.Load(), InFlight: s.inData.Load()}
}

// StatsHandler serves Stats as JSON on GET /stats, for a harness in
// another process.
func (s *Sink) StatsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(s.Stats()) //nolint:errcheck // the reader went away
	})
	return mux
}

// Close stops serving and closes the log; everything accepted is on disk.
func (s *Sink) Close() error {
	var err error
	s.once.Do(func() {
		close(s.closing)
		err = s.srv.Close()
		s.ln.Close()
		<-s.served
		if s.log != nil {
			err = errors.Join(err, s.log.close())
		}
	})
	return err
}

type session struct {
	s           *Sink
	latency     time.Duration
	refuse      float64
	tarpit      float64
	tarpitDelay time.Duration
	to          []string
}

func (ss *session) AuthMechanisms() []string { return []string{sasl.Plain} }

func (ss *session) Auth(string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(string, string, string) error { return nil }), nil
}

func (ss *session) Mail(string, *smtp.MailOptions) error { ss.to = nil; return nil }

func (ss *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	if ss.refuse > 0 && rand.Float64() < ss.refuse {
		ss.s.refused.Add(1)
		return &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "Temporary local problem, please try again later"}
	}
	ss.to = append(ss.to, to)
	return nil
}

func (ss *session) Data(r io.Reader) error {
	n := ss.s.inData.Add(1)
	defer ss.s.inData.Add(-1)
	for {
		p := ss.s.peak.Load()
		if n <= p || ss.s.peak.CompareAndSwap(p, n) {
			break
		}
	}
	br := bufio.NewReader(r)
	hdr, err := textproto.NewReader(br).ReadMIMEHeader()
	if err != nil && len(hdr) == 0 {
		io.Copy(io.Discard, br) //nolint:errcheck
		return &smtp.SMTPError{Code: 554, EnhancedCode: smtp.EnhancedCode{5, 6, 0}, Message: "unparsable header"}
	}
	if _, err := io.Copy(io.Discard, br); err != nil {
		return err // connection broke mid-message: not accepted
	}
	delay := ss.latency
	if ss.tarpit > 0 && rand.Float64() < ss.tarpit {
		delay = ss.tarpitDelay
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ss.s.closing:
			t.Stop()
			return &smtp.SMTPError{Code: 421, EnhancedCode: smtp.EnhancedCode{4, 3, 2}, Message: "shutting down"}
		}
	}
	nowNano := time.Now().UnixNano()
	if ss.s.log != nil {
		mid := strings.Trim(strings.TrimSpace(hdr.Get("Message-Id")), "<>")
		if mid == "" {
			mid = "-"
		}
		now := strconv.FormatInt(nowNano, 10)
		var b bytes.Buffer
		for _, to := range ss.to {
			fmt.Fprintf(&b, "%s\t%s\t%s\n", now, clean(mid), clean(strings.ToLower(to)))
		}
		if err := ss.s.log.append(b.Bytes()); err != nil {
			return &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "could not store message"}
		}
	}
	ss.s.first.CompareAndSwap(0, nowNano)
	for {
		// Concurrent sessions may finish out of order: keep the latest.
		last := ss.s.last.Load()
		if nowNano <= last || ss.s.last.CompareAndSwap(last, nowNano) {
			break
		}
	}
	ss.s.accepted.Add(1)
	ss.s.rcpts.Add(int64(len(ss.to)))
	return nil
}

func (ss *session) Reset()        { ss.to = nil }
func (ss *session) Logout() error { return nil }

// clean keeps a field on one line and out of the separators.
func clean(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\t' || r == '\n' || r == '\r' {
			return '_'
		}
		return r
	}, s)
}

// logWriter appends and fsyncs with group commit: every writer waiting while
// one fsync runs shares the next one.
type logWriter struct {
	f    *os.File
	reqs chan logReq
	done chan struct{}
}

type logReq struct {
	data []byte
	done chan error
}

func newLogWriter(f *os.File) *logWriter {
	w := &logWriter{f: f, reqs: make(chan logReq, 1024), done: make(chan struct{})}
	go w.loop()
	return w
}

func (w *logWriter) append(data []byte) error {
	r := logReq{data: data, done: make(chan error, 1)}
	w.reqs <- r
	return <-r.done
}

func (w *logWriter) loop() {
	defer close(w.done)
	var buf bytes.Buffer
	for r := range w.reqs {
		batch := []logReq{r}
	drain:
		for {
			select {
			case more, ok := <-w.reqs:
				if !ok {
					break drain
				}
				batch = append(batch, more)
			default:
				break drain
			}
		}
		buf.Reset()
		for _, b := range batch {
			buf.Write(b.data)
		}
		_, err := w.f.Write(buf.Bytes())
		if err == nil {
			err = w.f.Sync()
		}
		for _, b := range batch {
			b.done <- err
		}
	}
}

// close is called once no session can append any more.
func (w *logWriter) close() error {
	close(w.reqs)
	<-w.done
	return w.f.Close()
}

// Record is one accepted recipient of one message.
type Record struct {
	Time      time.Time
	MessageID string
	Recipient string // lowercased envelope recipient
}

// ReadLog reads a sink's log. A torn last line (a sink killed mid-write,
// never acknowledged) is ignored.
func ReadLog(path string) ([]Record, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []Record
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break // torn tail
		}
		line := string(data[:i])
		data = data[i+1:]
		f := strings.Split(line, "\t")
		if len(f) != 3 {
			return nil, fmt.Errorf("sinkproc: malformed log line %q", line)
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("sinkproc: malformed log line %q", line)
		}
		out = append(out, Record{Time: time.Unix(0, ns), MessageID: f[1], Recipient: f[2]})
	}
	return out, nil
}
