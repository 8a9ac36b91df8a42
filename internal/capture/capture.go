// Package capture is a real SMTP server that keeps every message it accepts
// in memory (and optionally on disk). Tests use it to check exactly-once
// delivery end to end over a real socket, with scripted failures; `rangecast
// dev` uses it as the mail sink so nothing leaves the machine.
package capture

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"math/big"
	"mime"
	"net"
	"net/mail"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// Message is one accepted message.
type Message struct {
	Seq       int      // 1-based, in order of acceptance
	MessageID string   // Message-ID header without angle brackets; "" if absent
	From      string   // envelope sender
	To        []string // envelope recipients, as given
	Subject   string   // decoded Subject header
	Received  time.Time
	Raw       []byte // the message exactly as received (after dot-unstuffing)
}

// Option configures a Server.
type Option func(*config)

type config struct {
	mailHook func(from string) *smtp.SMTPError
	rcptHook func(to string) *smtp.SMTPError
	dataHook func(m Message) *smtp.SMTPError
	latency  time.Duration
	dir      string
	user     string
	pass     string
	needAuth bool
	mechs    []string // offered AUTH mechanisms; default PLAIN
	startTLS bool
	implicit bool
	now      func() time.Time
	maxBytes int64
	errorLog smtp.Logger
}

// WithMailHook lets f decide the reply to each MAIL FROM; nil accepts.
func WithMailHook(f func(from string) *smtp.SMTPError) Option {
	return func(c *config) { c.mailHook = f }
}

// WithRcptHook lets f decide the reply to each RCPT TO; nil accepts.
func WithRcptHook(f func(to string) *smtp.SMTPError) Option {
	return func(c *config) { c.rcptHook = f }
}

// WithDataHook lets f decide the reply to the end of each DATA, after the
// message has been read; nil accepts. The Message passed has Seq 0: it is
// numbered only if accepted.
func WithDataHook(f func(m Message) *smtp.SMTPError) Option {
	return func(c *config) { c.dataHook = f }
}

// WithLatency delays every DATA reply by d, simulating a real relay. With it,
// throughput depends on how many messages a client keeps in flight.
func WithLatency(d time.Duration) Option {
	return func(c *config) { c.latency = d }
}

// WithDir also writes each accepted message to <dir>/<seq>-<messageid>.eml.
// A failed write makes the DATA reply 451, and the message is not counted.
func WithDir(dir string) Option {
	return func(c *config) { c.dir = dir }
}

// WithAuth requires AUTH PLAIN with exactly these credentials: anything else
// is answered 535, and MAIL before authenticating is answered 530. Without
// this option any credentials are accepted and AUTH is optional.
func WithAuth(username, password string) Option {
	return func(c *config) { c.user, c.pass, c.needAuth = username, password, true }
}

// WithAuthMechanisms sets the SASL mechanisms AUTH offers, in order
// (default PLAIN). PLAIN and LOGIN check WithAuth's user name and password;
// XOAUTH2 checks its user name and takes the password as the bearer token.
// Any other name is offered but refused when used (504), as a server
// offering only mechanisms the client cannot speak would be.
func WithAuthMechanisms(mechs ...string) Option {
	return func(c *config) { c.mechs = mechs }
}

// WithStartTLS offers STARTTLS with a freshly generated self-signed
// certificate for 127.0.0.1 and localhost.
func WithStartTLS() Option {
	return func(c *config) { c.startTLS = true }
}

// WithImplicitTLS serves TLS from the first byte (smtps) with a freshly
// generated self-signed certificate.
func WithImplicitTLS() Option {
	return func(c *config) { c.implicit = true }
}

// WithNow sets the clock used for Message.Received.
func WithNow(now func() time.Time) Option {
	return func(c *config) { c.now = now }
}

// WithErrorLog sends go-smtp's connection errors to l; by default they are
// discarded, since clients dropping connections is routine in tests.
func WithErrorLog(l *log.Logger) Option {
	return func(c *config) { c.errorLog = l }
}

// Server is a running capture server.
type Server struct {
	cfg   config
	srv   *smtp.Server
	ln    net.Listener
	addr  string
	done  chan struct{} // closed by Close; wakes latency sleeps
	serve chan error    // Serve's result

	conns atomic.Int64

	mu       sync.Mutex
	messages []Message
	byID     map[string]int // Message-ID → copies received
	hooks    []func(Message)
	closed   bool
}

// Start listens on addr (use "127.0.0.1:0" for a free port) and serves until
// Close.
func Start(addr string, opts ...Option) (*Server, error) {
	cfg := config{now: time.Now, maxBytes: 64 << 20, errorLog: log.New(io.Discard, "", 0)}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.startTLS && cfg.implicit {
		return nil, errors.New("capture: WithStartTLS and WithImplicitTLS are exclusive")
	}
	if cfg.dir != "" {
		if err := os.MkdirAll(cfg.dir, 0o755); err != nil {
			return nil, fmt.Errorf("capture: %w", err)
		}
		// A message being written when the process was killed was never
		// answered 250: its sender sends it again. Its file, left under
		// the temporary name, made a count of the folder's files look
		// like a second copy (tester).
		partial, err := filepath.Glob(filepath.Join(cfg.dir, "*.eml.tmp"))
		if err != nil {
			return nil, fmt.Errorf("capture: %w", err)
		}
		for _, p := range partial {
			if err := os.Remove(p); err != nil {
				return nil, fmt.Errorf("capture: %w", err)
			}
		}
	}

	s := &Server{cfg: cfg, done: make(chan struct{}), serve: make(chan error, 1), byID: map[string]int{}}
	if cfg.dir != "" {
		// A restarted capture server (rangecast dev after Ctrl-C or a
		// crash) carries on from what it already holds.
		kept, err := ReadDir(cfg.dir)
		if err != nil {
			return nil, fmt.Errorf("capture: %w", err)
		}
		for _, m := range kept {
			s.byID[m.MessageID]++
		}
		s.messages = kept
	}
	srv := smtp.NewServer(smtp.BackendFunc(s.newSession))
	srv.Domain = "localhost"
	srv.AllowInsecureAuth = true
	srv.MaxMessageBytes = cfg.maxBytes
	// Pooled client connections sit idle between messages; this only
	// reaps the ones a crashed client left behind.
	srv.ReadTimeout = 5 * time.Minute
	srv.WriteTimeout = time.Minute
	srv.ErrorLog = cfg.errorLog
	if cfg.startTLS || cfg.implicit {
		tc, err := selfSignedTLS()
		if err != nil {
			return nil, fmt.Errorf("capture: %w", err)
		}
		srv.TLSConfig = tc
	}
	s.srv = srv

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("capture: listen on %s: %w", addr, err)
	}
	s.addr = ln.Addr().String()
	var l net.Listener = &countingListener{Listener: ln, n: &s.conns}
	if cfg.implicit {
		l = tls.NewListener(l, srv.TLSConfig)
	}
	s.ln = l
	go func() { s.serve <- srv.Serve(l) }()
	return s, nil
}

// Addr is the host:port the server listens on.
func (s *Server) Addr() string { return s.addr }

// URL is an SMTP URL the transport package can send to. It skips
// certificate verification when TLS is on, because the certificate is
// self-signed.
func (s *Server) URL() string {
	host, port, _ := net.SplitHostPort(s.addr)
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	hp := net.JoinHostPort(host, port)
	switch {
	case s.cfg.implicit:
		return "smtps://" + hp + "?insecure_skip_verify=1"
	case s.cfg.startTLS:
		return "smtp://" + hp + "?tls=starttls&insecure_skip_verify=1"
	}
	return "smtp://" + hp + "?tls=none"
}

// Close stops listening and drops every connection. Messages already
// accepted stay readable.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.done)
	err := s.srv.Close()
	// Serve may not have registered the listener with go-smtp yet; closing
	// it here too guarantees Serve returns.
	s.ln.Close()
	if serr := <-s.serve; serr != nil && err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("capture: close: %w", err)
	}
	return nil
}

// Messages returns a copy of every accepted message, in order.
func (s *Server) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Message, len(s.messages))
	copy(out, s.messages)
	return out
}

// Count is the number of accepted messages.
func (s *Server) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.messages)
}

// CountByRecipient maps each lowercased envelope recipient to the number of
// accepted messages addressed to it. Any value above 1 in a broadcast test
// is a duplicate delivery.
func (s *Server) CountByRecipient() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int)
	for _, m := range s.messages {
		for _, to := range m.To {
			out[strings.ToLower(to)]++
		}
	}
	return out
}

// Connections is the number of TCP connections accepted so far.
func (s *Server) Connections() int { return int(s.conns.Load()) }

// OnMessage registers f to be called with each accepted message. It runs on
// the connection's goroutine after the message is counted and before the
// 250 reply is written, so a blocking f holds the sender mid-send (tests use
// this to pause a broadcast at a known point).
func (s *Server) OnMessage(f func(Message)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hooks = append(s.hooks, f)
}

// accept numbers and stores m, writing it to disk first when configured.
func (s *Server) accept(m Message) (Message, error) {
	s.mu.Lock()
	m.Seq = len(s.messages) + 1
	if s.cfg.dir != "" {
		// Written under a temporary name and renamed, so a process killed
		// mid-write leaves no half message that looks delivered.
		name := filepath.Join(s.cfg.dir, fmt.Sprintf("%06d-%s.eml", m.Seq, fileSafe(m.MessageID)))
		if err := os.WriteFile(name+".tmp", m.Raw, 0o644); err != nil {
			s.mu.Unlock()
			return Message{}, err
		}
		if err := os.Rename(name+".tmp", name); err != nil {
			s.mu.Unlock()
			return Message{}, err
		}
	}
	s.messages = append(s.messages, m)
	s.byID[m.MessageID]++
	hooks := append([]func(Message){}, s.hooks...)
	s.mu.Unlock()
	for _, h := range hooks {
		h(m)
	}
	return m, nil
}

// Accepted reports whether a message with this Message-ID (no angle
// brackets) was accepted: the answer a reconciler needs for a claim whose
// outcome was lost.
func (s *Server) Accepted(messageID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byID[messageID] > 0
}

// ReadDir loads the messages a capture server wrote to dir, in order. The
// envelope is not stored; recipients are taken from the To header.
func ReadDir(dir string) ([]Message, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Message
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".eml") {
			continue
		}
		seq, err := strconv.Atoi(strings.SplitN(name, "-", 2)[0])
		if err != nil {
			continue // not one of ours
		}
		raw, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		m := parse(raw)
		m.Seq = seq
		if info, err := e.Info(); err == nil {
			m.Received = info.ModTime()
		}
		if pm, err := mail.ReadMessage(bytes.NewReader(raw)); err == nil {
			if to, err := pm.Header.AddressList("To"); err == nil {
				for _, a := range to {
					m.To = append(m.To, a.Address)
				}
			}
			if from, err := pm.Header.AddressList("From"); err == nil && len(from) > 0 {
				m.From = from[0].Address
			}
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	return out, nil
}

// parse reads Message-ID and the decoded Subject from a raw message. A
// capture server stores what it is given: an unparsable header only leaves
// them empty.
func parse(raw []byte) Message {
	m := Message{Raw: raw}
	if pm, err := mail.ReadMessage(bytes.NewReader(raw)); err == nil {
		m.MessageID = strings.Trim(strings.TrimSpace(pm.Header.Get("Message-ID")), "<>")
		subj := pm.Header.Get("Subject")
		if dec, err := new(mime.WordDecoder).DecodeHeader(subj); err == nil {
			subj = dec
		}
		m.Subject = subj
	}
	return m
}

func fileSafe(id string) string {
	if id == "" {
		return "no-message-id"
	}
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '@', r == '-', r == '_':
			return r
		}
		return '_'
	}, id)
}

type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

func (s *Server) newSession(c *smtp.Conn) (smtp.Session, error) {
	return &session{srv: s}, nil
}

// session is one SMTP connection's state. go-smtp calls its methods from the
// connection's goroutine only.
type session struct {
	srv    *Server
	authed bool
	from   string
	to     []string
}

var (
	errAuthRequired = &smtp.SMTPError{Code: 530, EnhancedCode: smtp.EnhancedCode{5, 7, 0}, Message: "Authentication required"}
	errShuttingDown = &smtp.SMTPError{Code: 421, EnhancedCode: smtp.EnhancedCode{4, 3, 2}, Message: "Capture server shutting down"}
)

func (ss *session) AuthMechanisms() []string {
	if m := ss.srv.cfg.mechs; m != nil {
		return m
	}
	return []string{sasl.Plain}
}

// check is every mechanism's verdict on a user name and secret.
func (ss *session) check(username, secret string) error {
	cfg := ss.srv.cfg
	if cfg.needAuth && (username != cfg.user || secret != cfg.pass) {
		return smtp.ErrAuthFailed
	}
	ss.authed = true
	return nil
}

func (ss *session) Auth(mech string) (sasl.Server, error) {
	offered := false
	for _, m := range ss.AuthMechanisms() {
		offered = offered || strings.EqualFold(m, mech)
	}
	if !offered {
		return nil, smtp.ErrAuthUnknownMechanism
	}
	switch strings.ToUpper(mech) {
	case sasl.Plain:
		return sasl.NewPlainServer(func(_, username, password string) error { return ss.check(username, password) }), nil
	case sasl.Login:
		return &loginServer{check: ss.check}, nil
	case "XOAUTH2":
		return &xoauth2Server{check: ss.check}, nil
	}
	return nil, smtp.ErrAuthUnknownMechanism
}

// loginServer is the server side of LOGIN, which go-sasl no longer has:
// prompts "Username:" and "Password:", accepting the user name as an
// initial response.
type loginServer struct {
	check      func(user, pass string) error
	user       []byte
	state      int // 0: want user, 1: want password
	askedFirst bool
}

func (s *loginServer) Next(resp []byte) ([]byte, bool, error) {
	switch {
	case s.state == 0 && resp == nil && !s.askedFirst:
		s.askedFirst = true
		return []byte("Username:"), false, nil
	case s.state == 0:
		s.user, s.state = resp, 1
		return []byte("Password:"), false, nil
	}
	return nil, true, s.check(string(s.user), string(resp))
}

// xoauth2Server checks "user=U\x01auth=Bearer T\x01\x01"; a bad token gets
// the JSON challenge real servers send, then 535 after the empty reply.
type xoauth2Server struct {
	check   func(user, token string) error
	asked   bool
	refused bool
}

func (s *xoauth2Server) Next(resp []byte) ([]byte, bool, error) {
	switch {
	case s.refused:
		return nil, true, smtp.ErrAuthFailed
	case resp == nil && !s.asked:
		s.asked = true
		return nil, false, nil // "334 ": send the response now
	}
	var user, token string
	for _, kv := range strings.Split(string(resp), "\x01") {
		if v, ok := strings.CutPrefix(kv, "user="); ok {
			user = v
		}
		if v, ok := strings.CutPrefix(kv, "auth=Bearer "); ok {
			token = v
		}
	}
	if err := s.check(user, token); err != nil {
		s.refused = true
		return []byte(`{"status":"401","schemes":"bearer","scope":"https://mail.google.com/"}`), false, nil
	}
	return nil, true, nil
}

func (ss *session) Mail(from string, _ *smtp.MailOptions) error {
	if ss.srv.cfg.needAuth && !ss.authed {
		return errAuthRequired
	}
	if h := ss.srv.cfg.mailHook; h != nil {
		if e := h(from); e != nil {
			return e
		}
	}
	ss.from = from
	ss.to = nil
	return nil
}

func (ss *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	if h := ss.srv.cfg.rcptHook; h != nil {
		if e := h(to); e != nil {
			return e
		}
	}
	ss.to = append(ss.to, to)
	return nil
}

func (ss *session) Data(r io.Reader) error {
	raw, err := io.ReadAll(r)
	if err != nil {
		// Too large, or the connection broke mid-message: not accepted.
		return err
	}
	s := ss.srv
	if d := s.cfg.latency; d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-s.done:
			t.Stop()
			return errShuttingDown
		}
	}
	m := parse(raw)
	m.From, m.To, m.Received = ss.from, append([]string(nil), ss.to...), s.cfg.now()
	if h := s.cfg.dataHook; h != nil {
		if e := h(m); e != nil {
			return e
		}
	}
	if _, err := s.accept(m); err != nil {
		s.cfg.errorLog.Printf("capture: store message: %v", err)
		return &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "Could not store message"}
	}
	return nil
}

func (ss *session) Reset() {
	ss.from = ""
	ss.to = nil
}

func (ss *session) Logout() error { return nil }

// selfSignedTLS makes a throwaway certificate for loopback use.
func selfSignedTLS() (*tls.Config, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, fmt.Errorf("serial: %w", err)
	}
	// Validity is generous on both sides so the certificate never depends
	// on the exact wall-clock moment it was made.
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "rangecast capture"},
		NotBefore:    time.Unix(0, 0),
		NotAfter:     time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create certificate: %w", err)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		MinVersion:   tls.VersionTLS12,
	}, nil
}
