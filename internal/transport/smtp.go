package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/rangecast/rangecast/internal/address"
	"github.com/rangecast/rangecast/internal/message"
)

const (
	defaultPool    = 16
	maxPool        = 1024
	defaultTimeout = 30 * time.Second
	// defaultDataTimeout is how long the reply to the message's end (the
	// final dot, or BDAT LAST) may take: RFC 5321 4.5.3.2.6's 10 minutes.
	// A server that tarpits senders answers in tens of seconds; under the
	// 30 s of the other commands, half its messages were left in doubt,
	// most of them delivered (tester: 95 of 109 "unknown").
	defaultDataTimeout = 10 * time.Minute
	// defaultIdle is how long a pooled connection may sit unused and still
	// be reused: below the 5 minutes RFC 5321 asks servers to wait, and
	// below the 10 s Postfix keeps an idle client when it is overloaded.
	// A connection is reused within milliseconds while a page sends; only a
	// pause (a governor hold, a slow trickle) lets one sit this long, and
	// then a fresh dial costs little. It is also how long a worker with
	// nothing left to send keeps a relay's few allowed connections from
	// the others (reapIdle): at 8 s the last few hundred messages of a
	// broadcast through a 3-connection relay went out in 10–15 s gaps
	// (tester), at 2–3 s promptly.
	defaultIdle = 3 * time.Second
)

type tlsMode int

const (
	tlsOpportunistic tlsMode = iota // smtp:// — STARTTLS when the server offers it
	tlsStartTLS                     // smtp://…?tls=starttls — STARTTLS or fail
	tlsNone                         // smtp://…?tls=none — never
	tlsImplicit                     // smtps://
)

// What an opportunistic transport has learned about the server. Once a
// server has offered STARTTLS, later connections require it, so a
// man-in-the-middle stripping the capability makes sends fail instead of
// silently going out in plaintext.
const (
	startTLSUnknown int32 = iota
	startTLSOffered
	startTLSAbsent
)

// noStartTLS is the refusal to send when STARTTLS is required and the
// server did not offer it, saying which rule required it and what to
// change: "server doesn't support STARTTLS" alone left a tester guessing
// why a broadcast paused, why a resume paused again, and why a restarted
// worker (which has not seen the offer) sent in plaintext.
func (s *SMTP) noStartTLS() error {
	if s.mode == tlsStartTLS {
		return fmt.Errorf("%s does not offer STARTTLS, which the relay URL requires (tls=starttls); nothing is sent in plaintext", s.addr)
	}
	return fmt.Errorf("%s offered STARTTLS on an earlier connection and no longer does, so nothing is sent in plaintext (a downgrade by something in between, or TLS turned off on the relay); "+
		"if it was turned off on purpose, add tls=none to the relay URL; a worker started since has not seen the offer and sends in plaintext unless the URL says tls=starttls", s.addr)
}

// SMTP is a Transport that keeps a pool of authenticated connections to one
// server. Concurrent Send calls are safe; each uses its own connection.
type SMTP struct {
	addr     string // host:port
	host     string
	redacted string // the URL without the password, for messages
	mode     tlsMode
	tlsConf  *tls.Config
	creds    *credentials // nil: no AUTH
	helo     string
	timeout  time.Duration
	// dataTimeout bounds the wait for the reply to the message's end
	// (endReply); timeout, the rest of an attempt.
	dataTimeout time.Duration
	// maxIdle: a pooled connection unused for longer is closed, not
	// reused (idle= in the URL).
	maxIdle time.Duration
	dialer  net.Dialer
	// noChunking keeps to DATA even where the server offers CHUNKING
	// (chunking=0 in the URL), for a relay whose BDAT is broken.
	noChunking bool

	startTLS atomic.Int32

	mu     sync.Mutex // guards closed and sends on idle
	closed bool
	idle   chan *conn

	// limit learns a relay's limit on concurrent connections.
	limit connLimit
	// authRefused holds new connections after the relay refused our
	// credentials (authHold).
	authRefused authHold
	// reaping starts reapIdle with the first connection pooled; done,
	// closed by Close, ends it.
	reaping sync.Once
	done    chan struct{}
}

// connLimit learns a relay's limit on concurrent connections from a 421 at
// the greeting while others of ours are open, and holds new dials to the
// connections it then had for connLimitHold: a send waits for one of them
// instead of dialling into the same 421. Without it, a relay allowing 3
// connections answered 421 to hundreds of dials a minute, each failing its
// send, and took 30 messages a minute (a tester).
type connLimit struct {
	mu    sync.Mutex
	open  int           // connections of ours the relay took (handshake done), in use or pooled
	max   int           // 0: no limit known
	until time.Time     // when max lapses (and a dial probes again)
	freed chan struct{} // closed when a connection is put back or closed
	// busyUntil: a 421 at the greeting with nothing of ours open (another
	// worker holds the relay's connections) holds every dial until then,
	// so the sends of a worker that has none do not dial into the 421
	// thousands of times a second (a verifier counted 11,118 refused).
	busyUntil time.Time
}

// freedCh is closed when a connection is next put back or closed.
func (l *connLimit) freedCh() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.freed == nil {
		l.freed = make(chan struct{})
	}
	return l.freed
}

// connBusyHold is how long a 421 at the greeting with nothing of ours open
// holds new dials.
const connBusyHold = 2 * time.Second

// busy holds dials for connBusyHold from now.
func (l *connLimit) busy(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.busyUntil = now.Add(connBusyHold)
}

// busyFor is how long dials are held still.
func (l *connLimit) busyFor(now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.busyUntil.Sub(now)
}

// connLimitHold is how long a learnt limit holds before a dial probes past it.
const connLimitHold = time.Minute

func (l *connLimit) opened() {
	l.mu.Lock()
	l.open++
	l.mu.Unlock()
}

// released says a connection was closed (closed) or put back in the pool.
func (l *connLimit) released(closed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if closed {
		l.open--
	}
	if l.freed != nil {
		close(l.freed)
		l.freed = nil
	}
}

// refused takes a 421 at a new connection's greeting (already closed) as
// the relay's limit when others of ours are open: it reports whether the
// send should wait for one of them.
func (l *connLimit) refused(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open < 1 {
		return false
	}
	if l.max == 0 || !now.Before(l.until) || l.open < l.max {
		l.max = l.open
	}
	l.until = now.Add(connLimitHold)
	return true
}

// full reports whether a dial would pass the learnt limit, with a channel
// closed when a connection is put back or closed.
func (l *connLimit) full(now time.Time) (<-chan struct{}, int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.max == 0 || !now.Before(l.until) {
		l.max = 0
		return nil, 0, false
	}
	if l.open < l.max {
		return nil, 0, false
	}
	if l.freed == nil {
		l.freed = make(chan struct{})
	}
	return l.freed, l.max, true
}

// conn is one pooled connection. nc is the raw network connection under the
// client, kept so a cancelled context can close it from another goroutine.
// c is nil until the handshake is done.
type conn struct {
	nc    net.Conn
	c     *client
	probe *idleProbe // made when the connection first goes back to the pool
	// idleSince is when the connection last went back to the pool.
	idleSince time.Time
}

var _ Transport = (*SMTP)(nil)

// NewSMTP parses an SMTP URL and returns a transport for it. No connection is
// made until the first Send.
//
//	smtp://[user:pass@]host:port   STARTTLS if the server offers it
//	smtps://[user:pass@]host:port  implicit TLS
//
// Query parameters:
//
//	tls=none|starttls       never use STARTTLS / require it (smtp:// only)
//	insecure_skip_verify=1  accept any server certificate (tests only)
//	pool=N                  idle connections kept for reuse (default 16)
//	timeout=30s             bound on one Send, including connecting
//	idle=3s                 longest a pooled connection may sit unused and
//	                        still be reused (default 3s); keep it below the
//	                        relay's own idle timeout
//	chunking=0              keep to DATA where the server offers CHUNKING
//	helo=name               name sent in EHLO (default "localhost")
//	auth=plain|login|xoauth2  the AUTH mechanism (default: PLAIN, else LOGIN,
//	                        whichever the server offers; XOAUTH2 with token_file)
//	token_file=/path        XOAUTH2 bearer token, re-read when the file changes;
//	                        the URL names the user (smtp://user@host:587?token_file=…)
//
// Credentials are only sent over TLS, unless the server is on a loopback
// address or tls=none was asked for explicitly.
func NewSMTP(rawURL string) (*SMTP, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error repeats the whole URL, password included; keep only
		// the reason.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("transport: invalid SMTP URL: %v", err)
	}
	s := &SMTP{redacted: u.Redacted(), helo: "localhost", timeout: defaultTimeout, dataTimeout: defaultDataTimeout, maxIdle: defaultIdle}
	bad := func(format string, args ...any) (*SMTP, error) {
		return nil, fmt.Errorf("transport: invalid SMTP URL %s: %s", s.redacted, fmt.Sprintf(format, args...))
	}
	switch u.Scheme {
	case "smtp":
		s.mode = tlsOpportunistic
	case "smtps":
		s.mode = tlsImplicit
	default:
		return bad("scheme %q is not supported; use smtp:// (STARTTLS) or smtps:// (implicit TLS)", u.Scheme)
	}
	if u.Opaque != "" {
		return bad("expected %s://host:port", u.Scheme)
	}
	if u.Path != "" && u.Path != "/" {
		return bad("unexpected path %q; an SMTP URL has only host, port and parameters", u.Path)
	}
	s.host = u.Hostname()
	port := u.Port()
	if s.host == "" {
		return bad("missing host")
	}
	if port == "" {
		return bad("missing port; write it explicitly, e.g. :587 for submission with STARTTLS or :465 for smtps")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return bad("port %q is not a number between 1 and 65535", port)
	}
	s.addr = net.JoinHostPort(s.host, port)
	if u.User != nil {
		pass, _ := u.User.Password()
		s.creds = &credentials{user: u.User.Username(), pass: pass, addr: s.addr}
		if s.creds.user == "" {
			return bad("empty user name before '@'")
		}
	}

	pool := defaultPool
	insecure := false
	var authMech, tokenPath string
	q := u.Query()
	for key, vals := range q {
		if len(vals) != 1 {
			return bad("parameter %q given %d times", key, len(vals))
		}
		v := vals[0]
		switch key {
		case "tls":
			switch v {
			case "none":
				s.mode = tlsNone
			case "starttls":
				s.mode = tlsStartTLS
			default:
				return bad("tls=%q: use tls=none or tls=starttls (or smtps:// for implicit TLS)", v)
			}
			if u.Scheme == "smtps" {
				return bad("tls=%s contradicts smtps:// (which is always implicit TLS)", v)
			}
		case "insecure_skip_verify":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return bad("insecure_skip_verify=%q: use 1 or 0", v)
			}
			insecure = b
		case "pool":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > maxPool {
				return bad("pool=%q: must be a whole number from 1 to %d", v, maxPool)
			}
			pool = n
		case "timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return bad("timeout=%q: must be a positive duration such as 30s", v)
			}
			s.timeout = d
		case "data_timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return bad("data_timeout=%q: must be a positive duration such as 10m", v)
			}
			s.dataTimeout = d
		case "idle":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return bad("idle=%q: must be a positive duration such as 3s", v)
			}
			s.maxIdle = d
		case "auth":
			m := strings.ToUpper(v)
			if m != mechPlain && m != mechLogin && m != mechXOAuth2 {
				return bad("auth=%q: use plain, login or xoauth2 (or leave it out to use what the server offers)", v)
			}
			authMech = m
		case "token_file":
			if v == "" {
				return bad("token_file= is empty")
			}
			tokenPath = v
		case "chunking":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return bad("chunking=%q: use 1 or 0", v)
			}
			s.noChunking = !b
		case "helo":
			if v == "" || strings.ContainsAny(v, " \t\r\n") {
				return bad("helo=%q: must be a host name", v)
			}
			s.helo = v
		default:
			return bad("unknown parameter %q (known: tls, insecure_skip_verify, pool, timeout, idle, helo, auth, token_file, chunking)", key)
		}
	}
	if authMech != "" || tokenPath != "" {
		if s.creds == nil {
			return bad("auth= and token_file= need the user name in the URL (smtp://user@host:587?...)")
		}
		s.creds.mech = authMech
	}
	if tokenPath != "" {
		if authMech != "" && authMech != mechXOAuth2 {
			return bad("token_file= is for auth=xoauth2, not auth=%s", strings.ToLower(authMech))
		}
		if s.creds.pass != "" {
			return bad("give either a password or token_file=, not both")
		}
		s.creds.token = &tokenFile{path: tokenPath}
		// Read now, so a missing or empty file fails at start rather than
		// at the first message.
		if _, err := s.creds.token.read(); err != nil {
			return bad("%v", err)
		}
	} else if authMech == mechXOAuth2 {
		return bad("auth=xoauth2 needs token_file=/path/to/token")
	}
	s.tlsConf = &tls.Config{ServerName: s.host, InsecureSkipVerify: insecure, MinVersion: tls.VersionTLS12}
	s.idle = make(chan *conn, pool)
	s.done = make(chan struct{})
	return s, nil
}

// String returns the URL with the password redacted.
func (s *SMTP) String() string { return s.redacted }

// Send delivers m: MAIL FROM m.From, RCPT TO m.To, DATA m.Bytes. The
// attempt, connecting included, is bounded by the URL's timeout and by ctx,
// except the wait for the reply to the message's end, which the URL's
// data_timeout bounds once the whole message has gone out (endReply).
func (s *SMTP) Send(ctx context.Context, m message.Rendered) (string, error) {
	if m.From == "" || m.To == "" {
		return "", fmt.Errorf("transport: send %s: envelope sender and recipient are required", m.MessageID)
	}
	// ctx bounds the attempt but for the wait for the end's reply, which
	// the socket's deadline bounds (endReply); caller is what the caller
	// gave, whose end closes the socket.
	caller := ctx
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()

	var carried *conn // a pooled connection idleWithin found for this send
	for attempt := 0; ; attempt++ {
		if s.isClosed() {
			return "", ErrClosed
		}
		pc, reused := carried, carried != nil
		carried = nil
		if pc == nil {
			pc, reused = s.takeIdle()
		}
		for pc == nil {
			freed, limit, full := s.limit.full(time.Now())
			if !full {
				break
			}
			select {
			case <-freed:
				if s.isClosed() {
					return "", ErrClosed
				}
				pc, reused = s.takeIdle()
			case <-ctx.Done():
				// Deferred as the relay's 421 would have been: at connect,
				// never charged to the recipient.
				return "", &SendError{Stage: StageConnect, Code: 421, Err: ctx.Err(),
					Text: fmt.Sprintf("no connection free: the relay allows %d at once (it answered 421 to more), and none came free in time", limit)}
			}
		}
		if wait := s.limit.busyFor(time.Now()); pc == nil && wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return "", &SendError{Stage: StageConnect, Code: 421, Err: ctx.Err(),
					Text: "the relay answered 421 to a new connection moments ago (its connections taken, by another worker's), and it was not tried again in time"}
			}
			pc, reused = s.takeIdle()
		}
		release := func() {}
		if pc == nil {
			var se *SendError
			if release, se = s.authRefused.admit(ctx, s.creds != nil); se != nil {
				return "", withContext(ctx, se)
			}
			nc, err := s.dial(ctx)
			if err != nil {
				release()
				return "", stageError(ctx, StageConnect, err)
			}
			pc = &conn{nc: nc}
		}

		// One deadline, ctx's own, bounds every read and write of this
		// attempt (setting one per command cost a timer update each). It
		// is set again by every Send, so an idle connection's stale one
		// never fires. A failure here is a dead socket, which the first
		// write reports at a stage Send knows how to retry.
		deadline, _ := ctx.Deadline() // always set: ctx has s.timeout
		_ = pc.nc.SetDeadline(deadline)
		// The deadline does not cover a cancellation; closing the socket
		// makes a blocked read or write return as soon as the attempt's
		// caller gives up. Not when ctx's time is up: the deadline does
		// that, and endReply moves it for the end's reply.
		stop := context.AfterFunc(caller, func() { pc.nc.Close() })
		reply, err := s.use(ctx, pc, m)
		release()
		var se *SendError
		isSendErr := errors.As(err, &se)
		// After a reply that leaves the connection usable, RSET while still
		// guarded by ctx so the transaction state is clean for the next
		// message. A successful DATA already ends the transaction. A
		// broken client has lost step with the server (say, pipelined
		// replies it could not read), whatever the first reply was. A
		// recipient refused before any command leaves nothing to reset.
		reuse := pc.c != nil && !pc.c.broken &&
			(err == nil || (isSendErr && se.Refused) || (isSendErr && reusableAfter(se) && pc.c.reset() == nil))
		if !stop() {
			reuse = false // ctx closed the socket under us
		}

		if reuse {
			s.put(pc)
		} else {
			s.drop(pc)
		}
		switch {
		case err == nil:
			return reply, nil
		case errors.Is(err, errRedial):
			continue
		case !reused && isSendErr && se.Stage == StageConnect && se.Code == 421 && ctx.Err() == nil && s.limit.refused(time.Now()):
			continue // wait for one of the connections the relay allows
		case !reused && isSendErr && se.Stage == StageConnect && se.Code == 421 && pc.c == nil:
			// Nothing of ours was open to learn a limit from. The next
			// dials wait; this send takes a connection put back within the
			// hold (at a start the refusals come before the handshakes
			// the relay took are done), or its 421 stands. It never dials
			// again itself.
			s.limit.busy(time.Now())
			if carried = s.idleWithin(ctx, connBusyHold); carried != nil {
				continue
			}
		}
		// A pooled connection the server dropped after takeIdle looked at
		// it fails on the first command. Unless the body went with that
		// command (BDAT), nothing was sent, so one retry on a fresh
		// connection is safe and keeps a stale pool from looking like a
		// server outage. A body that went out stays in doubt: the server
		// may have taken it before it closed.
		if isSendErr && reused && attempt == 0 && se.Stage == StageMail && (se.Code == 0 || se.Code == 421) && !se.MaybeDelivered && ctx.Err() == nil {
			continue
		}
		return "", err
	}
}

// authHold keeps a relay's refusal of our credentials (a reply to AUTH, or
// a credentials setting it cannot take: no AUTH offered, no TLS) while it
// stands: the sends meanwhile that need a new connection get that refusal
// without dialing. Each new connection authenticated again, so a wrong
// password cost one failed login per send (tester: 128 in a second), which
// is what makes a provider lock the account or a fail2ban ban the sender's
// address. When it lapses one send tries again, and the others keep the
// refusal until that one's answer; each refusal in a row holds twice as
// long, up to authRetryMax. A connection lost or cancelled during AUTH is
// no refusal and is not kept.
type authHold struct {
	mu      sync.Mutex
	err     *SendError
	until   time.Time
	refusal int  // refusals in a row
	proven  bool // the credentials went through on this transport
	// gate admits one new connection at a time until the credentials are
	// proven (at start, and after a refusal): sends starting together
	// each dialed and each failed a login, 16 at once per worker
	// (verifier).
	gate chan struct{}
}

// admit lets a new connection be made: at once when the credentials are
// proven (or there are none); else one at a time, each after the one
// before has its answer, and not at all while a refusal is held. release
// is called once the connection's handshake is over.
func (h *authHold) admit(ctx context.Context, creds bool) (release func(), se *SendError) {
	none := func() {}
	if !creds {
		return none, nil
	}
	h.mu.Lock()
	if h.proven {
		h.mu.Unlock()
		return none, nil
	}
	if h.gate == nil {
		h.gate = make(chan struct{}, 1)
	}
	gate := h.gate
	h.mu.Unlock()
	select {
	case gate <- struct{}{}:
	case <-ctx.Done():
		return none, &SendError{Stage: StageConnect, Err: ctx.Err(),
			Text: "not connected in time: another connection was proving the SMTP credentials"}
	}
	release = func() { <-gate }
	if se := h.held(time.Now()); se != nil {
		release()
		return none, se
	}
	return release, nil
}

// authRetryAfter is how long a first refusal of our credentials stands
// before one connection tries them again: a password fixed in the relay,
// or a token file refreshed, is used within it. authRetryMax bounds the
// doubling.
const (
	authRetryAfter = 10 * time.Second
	authRetryMax   = 5 * time.Minute
)

// refused keeps se when it is the relay's refusal of our credentials.
func (h *authHold) refused(now time.Time, se *SendError) {
	if se.Code == 0 && !se.local {
		return // no reply: a lost or cancelled connection, not a refusal
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	kept := *se
	h.err = &kept
	h.until = now.Add(min(authRetryAfter<<min(h.refusal, 8), authRetryMax))
	h.refusal++
	h.proven = false
}

// accepted ends a hold: the credentials went through.
func (h *authHold) accepted() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.err, h.refusal, h.proven = nil, 0, true
}

// held returns a copy of the refusal while it stands, else nil. The first
// caller after it lapses gets nil and tries the credentials; until its
// answer (refused or accepted), the others still get the refusal.
func (h *authHold) held(now time.Time) *SendError {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil {
		return nil
	}
	if !now.Before(h.until) {
		h.until = now.Add(authRetryAfter) // this caller probes; the rest wait for its answer
		return nil
	}
	se := *h.err // the same refusal, so that it reads and groups as the one the relay gave
	return &se
}

// errRedial asks Send to dial again: the probe connection found that the
// server offers STARTTLS. The client could upgrade the probe connection in
// place and save one connection per transport; redialing is what the
// transport did with go-smtp (which could not upgrade), and TestTLS pins it.
var errRedial = errors.New("transport: redial for STARTTLS")

// use runs the handshake on a new connection, then one mail transaction.
func (s *SMTP) use(ctx context.Context, pc *conn, m message.Rendered) (string, error) {
	if pc.c == nil {
		c, err := s.handshake(pc.nc)
		if err != nil {
			pc.nc.Close()
			if errors.Is(err, errRedial) {
				return "", err
			}
			var se *SendError
			if errors.As(err, &se) {
				if se.Stage == StageAuth {
					s.authRefused.refused(time.Now(), se)
				}
				return "", withContext(ctx, se)
			}
			return "", stageError(ctx, StageConnect, err)
		}
		pc.c = c
		if s.creds != nil {
			s.authRefused.accepted()
		}
		s.limit.opened() // counted once the relay took it: greeted, and past EHLO
	}
	return s.transact(ctx, pc.c, m)
}

func (s *SMTP) dial(ctx context.Context) (net.Conn, error) {
	if s.mode == tlsImplicit {
		d := tls.Dialer{NetDialer: &s.dialer, Config: s.tlsConf}
		return d.DialContext(ctx, "tcp", s.addr)
	}
	return s.dialer.DialContext(ctx, "tcp", s.addr)
}

// handshake reads the greeting, says EHLO, negotiates TLS and authenticates.
func (s *SMTP) handshake(nc net.Conn) (*client, error) {
	bg := context.Background() // use adds ctx to the errors
	c := newClient(nc)
	if err := c.greet(); err != nil {
		return nil, stageError(bg, StageConnect, err)
	}
	if err := c.hello(s.helo); err != nil {
		return nil, stageError(bg, StageConnect, err)
	}

	useStartTLS := s.mode == tlsStartTLS || (s.mode == tlsOpportunistic && s.startTLS.Load() == startTLSOffered)
	if useStartTLS {
		var err error
		if !c.ext.startTLS {
			err = s.noStartTLS()
		} else {
			err = c.startTLS(s.tlsConf)
		}
		if err != nil {
			se := stageError(bg, StageConnect, err)
			if se.Code == 0 {
				se.Err = fmt.Errorf("STARTTLS with %s: %w", s.addr, err)
			}
			return nil, se
		}
		if err := c.hello(s.helo); err != nil {
			return nil, stageError(bg, StageConnect, err)
		}
	}

	if s.mode == tlsOpportunistic && s.startTLS.Load() == startTLSUnknown {
		if c.ext.startTLS {
			s.startTLS.Store(startTLSOffered)
			return nil, errRedial
		}
		s.startTLS.Store(startTLSAbsent)
	}

	if s.creds != nil {
		if !c.isTLS() && s.mode != tlsNone && !isLoopback(s.host) {
			return nil, &SendError{Stage: StageAuth, local: true, Err: fmt.Errorf("refusing to send credentials to %s without TLS: the server did not offer STARTTLS (use smtps://, or tls=none to accept plaintext)", s.addr)}
		}
		if !c.ext.auth {
			return nil, &SendError{Stage: StageAuth, local: true, Err: fmt.Errorf("the URL has credentials but %s does not offer AUTH", s.addr)}
		}
		sc, err := s.creds.client(c.ext.authMechs)
		if err != nil {
			return nil, &SendError{Stage: StageAuth, local: true, Err: err}
		}
		if err := c.auth(sc); err != nil {
			return nil, stageError(bg, StageAuth, err)
		}
	}
	return c, nil
}

// transact runs MAIL, RCPT, DATA on an established connection and returns
// the server's reply to the final dot.
//
// With PIPELINING (RFC 2920) the three commands leave in one write and the
// three replies are read in order; the body goes only after DATA got 354,
// so a refused MAIL or RCPT never lets the message out. Every reply is read
// even after a refusal, to keep the connection in step for the next
// message, and the first refusal is the one reported: it says why, the
// later ones (503/554 "no valid recipients") only follow from it. Without
// PIPELINING each command waits for its reply, and the first refusal ends
// the transaction, as with go-smtp.
func (s *SMTP) transact(ctx context.Context, c *client, m message.Rendered) (string, error) {
	// Refusals of our own come before a byte is written, so they never
	// leave a command half sent.
	// The sender is the same for every message: a sender the server cannot
	// take is the channel's problem. The recipient is this message's.
	from, err := envelopeAddress(m.From, c.ext.smtpUTF8)
	if err != nil {
		return "", stageError(ctx, StageMail, fmt.Errorf("sender: %w", err))
	}
	to, err := envelopeAddress(m.To, c.ext.smtpUTF8)
	if err != nil {
		return "", &SendError{Stage: StageRcpt, Err: fmt.Errorf("recipient: %w", err), Refused: true}
	}
	utf8 := !isASCII(from) || !isASCII(to)
	if c.ext.chunking && c.ext.pipelining && !s.noChunking {
		return s.transactChunked(ctx, c, m, from, to, utf8)
	}

	steps := [...]step{
		{StageMail, 250},
		{StageRcpt, 25}, // 250 or 251
		{StageData, 354},
	}
	queue := func(i int) {
		switch i {
		case 0:
			c.queueMail(from, len(m.Bytes), utf8)
		case 1:
			c.queue("RCPT TO:<", to, ">")
		case 2:
			c.queue("DATA")
		}
	}
	pipelined := c.ext.pipelining
	if pipelined {
		for i := range steps {
			queue(i)
		}
	}
	var refused *SendError
	for i, st := range steps {
		if !pipelined {
			queue(i)
		}
		if len(c.wbuf) > 0 {
			if _, err := c.flush(); err != nil {
				return "", stageError(ctx, st.stage, err)
			}
		}
		code, err := c.readReply()
		if err != nil {
			if refused != nil {
				return "", refused // the client is broken: not reused
			}
			return "", stageError(ctx, st.stage, err)
		}
		ok := codeIs(code, st.expect)
		switch {
		case !ok && refused == nil:
			refused = stageError(ctx, st.stage, c.replyError(code))
			if !pipelined {
				return "", refused
			}
		case ok && refused != nil && st.stage == StageData:
			// A server that says 354 after refusing MAIL or RCPT now waits
			// for a body. Dropping the connection aborts the transaction
			// (RFC 5321 3.8) without giving the server anything to deliver.
			c.broken = true
		}
	}
	if refused != nil {
		return "", refused
	}

	// The body and the final dot in one write.
	c.wbuf = appendData(c.wbuf, m.Bytes)
	size := len(c.wbuf)
	if n, err := c.flush(); err != nil {
		se := stageError(ctx, StageData, err)
		// The final ".\r\n" ends what was being written: a write that
		// failed short of it never gave the server the end of the message,
		// which therefore cannot have been accepted. Only a failure with
		// every byte gone out leaves the outcome unknown.
		se.MaybeDelivered = n == size
		return "", se
	}
	code, err := s.endReply(ctx, c)
	if err != nil {
		// The whole message went out and no answer came back: the server
		// may have queued it.
		se := stageError(ctx, StageData, err)
		se.MaybeDelivered = true
		return "", se
	}
	if code != 250 {
		return "", stageError(ctx, StageData, c.replyError(code))
	}
	return strings.TrimSpace("250 " + string(c.text)), nil
}

// step is one reply of a transaction: the stage it answers and the code
// expected (as in textproto: 25 means 25x).
type step struct {
	stage  string
	expect int
}

// transactChunked sends MAIL, RCPT and the whole message as one BDAT LAST
// chunk in a single write (RFC 3030 with RFC 2920 pipelining), then reads
// the three replies: one write per message instead of two, and no round
// trip waiting for 354. The server must refuse the chunk when MAIL or RCPT
// was refused (no valid recipient), and reads and discards it either way,
// so the connection stays in step and is reset for the next message as
// after a refusal at DATA.
//
// What may have been delivered differs from DATA: the body goes out with
// the commands, so once the whole write is out, a reply that never comes
// (any of the three) leaves the message maybe delivered; a write cut short
// ended before the chunk did, which the server cannot accept.
func (s *SMTP) transactChunked(ctx context.Context, c *client, m message.Rendered, from, to string, utf8 bool) (string, error) {
	c.queueMail(from, len(m.Bytes), utf8)
	c.queue("RCPT TO:<", to, ">")
	c.wbuf = appendChunk(c.wbuf, m.Bytes)
	size := len(c.wbuf)
	if n, err := c.flush(); err != nil {
		if n < size {
			return "", stageError(ctx, StageMail, err)
		}
		se := stageError(ctx, StageData, err)
		se.MaybeDelivered = true
		return "", se
	}
	steps := [...]step{
		{StageMail, 250},
		{StageRcpt, 25},  // 250 or 251
		{StageData, 250}, // the chunk
	}
	var refused *SendError
	for _, st := range steps {
		read := c.readReply
		if st.stage == StageData && refused == nil {
			read = func() (int, error) { return s.endReply(ctx, c) }
		}
		code, err := read()
		if err != nil {
			if refused != nil {
				// Refused before the chunk, then no reply to it: nothing
				// delivered, and the client is broken, not reused. A 421
				// at MAIL followed by a close is how RFC 5321 has a server
				// go away, the ordinary stale pool, so Send may retry it
				// on a fresh connection; only a server that takes the
				// chunk after refusing (below) says otherwise.
				return "", refused
			}
			// The stage is the first reply missing, but the whole message
			// left with it: say so, or "smtp mail: timeout" reads as if
			// the server never saw the message (a probe's halt reason).
			se := stageError(ctx, st.stage, fmt.Errorf("no reply after MAIL, RCPT and the whole message were sent together (pipelined): %w", err))
			se.MaybeDelivered = true
			return "", se
		}
		ok := codeIs(code, st.expect)
		switch {
		case !ok && refused == nil:
			refused = stageError(ctx, st.stage, c.replyError(code))
		case ok && refused != nil && st.stage == StageData:
			// A chunk taken after MAIL or RCPT was refused: the server is
			// not following RFC 3030, and nothing it says can be trusted,
			// least of all the refusal. It said it took the message, so
			// the message may have been delivered: a 421 at MAIL on a
			// reused connection would otherwise look like a stale pool and
			// be sent again (TestChunkTakenAfterRefusalNotRetried).
			c.broken = true
			refused.MaybeDelivered = true
		}
	}
	if refused != nil {
		return "", refused
	}
	return strings.TrimSpace("250 " + string(c.text)), nil
}

// endReply reads the reply to the message's end, which a server may take
// long to write (it is delivering, scanning or tarpitting), within the
// URL's data_timeout from now: the deadline set for the attempt would
// leave a message the server may well deliver in doubt. The attempt's
// deadline bounds what follows (an RSET after a refusal) again.
func (s *SMTP) endReply(ctx context.Context, c *client) (int, error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(s.dataTimeout))
	code, err := c.readReply()
	if d, ok := ctx.Deadline(); ok {
		_ = c.conn.SetReadDeadline(d)
	}
	return code, err
}

// reusableAfter reports whether a connection is still in a known state after
// err: the server answered a transaction command with a reply that does not
// announce the end of the connection.
func reusableAfter(se *SendError) bool {
	switch se.Stage {
	case StageMail, StageRcpt, StageData:
		return se.Code != 0 && se.Code != 421 && !sessionLimit(se)
	}
	return false
}

// sessionLimit reports a reply that counts the recipients of the session
// ("452 4.5.3 Too many recipients"): every later transaction on the
// connection would meet it too, so the connection is closed, not reused.
func sessionLimit(se *SendError) bool {
	return tooManyRecipients(se.Code, se.Enhanced, se.Text)
}

func (s *SMTP) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// takeIdle returns a pooled connection that is still open and quiet, and
// closes the ones the server dropped while they waited, and the ones that
// waited longer than maxIdle.
//
// The idle check sees a close that has happened; a server whose idle
// timeout fires just as a transaction goes out still closes under it, and
// with CHUNKING that transaction carried its body: the message would end
// in doubt. A connection unused for maxIdle, set below the relay's idle
// timeout, is never reused near that timeout.
func (s *SMTP) takeIdle() (*conn, bool) {
	for {
		select {
		case pc := <-s.idle:
			if pc.c.br.Buffered() == 0 && time.Since(pc.idleSince) < s.maxIdle && pc.probe.quietOpen() {
				return pc, true
			}
			// Dropped by the server while idle (a restart, an idle
			// timeout, a limit of messages per connection), sent
			// something unasked, or unused for too long: nothing of ours
			// went into it.
			s.drop(pc)
		default:
			return nil, false
		}
	}
}

// put returns a healthy connection to the pool, or closes it when the pool
// is full or the transport is closed.
func (s *SMTP) put(pc *conn) {
	if pc.probe == nil {
		pc.probe = newIdleProbe(pc.nc)
	}
	// Real time, not an injected clock: the server's idle timer runs on
	// it, as the I/O deadlines do.
	pc.idleSince = time.Now()
	if s.pool(pc) {
		s.limit.released(false)
		s.reaping.Do(func() { go s.reapIdle() })
		return
	}
	s.drop(pc)
}

// pool puts pc in the idle pool as it is, unless the pool is full or the
// transport closed: it reports whether it did.
func (s *SMTP) pool(pc *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	select {
	case s.idle <- pc:
		return true
	default:
		return false
	}
}

// reapIdle closes pooled connections once they have waited maxIdle, until
// the transport is closed. Checked only when taken, an idle connection
// stayed open for as long as nothing was sent: a worker done with its
// pages held a relay's few allowed connections while another worker's
// sends met 421 (a verifier: the last 94 messages took 52 s).
func (s *SMTP) reapIdle() {
	tick := time.NewTicker(max(s.maxIdle/2, 100*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-s.done:
			return
		}
		for range len(s.idle) {
			var pc *conn
			select {
			case pc = <-s.idle:
			default:
			}
			if pc == nil {
				break
			}
			switch {
			case time.Since(pc.idleSince) >= s.maxIdle || !pc.probe.quietOpen():
				s.quit(pc)
			case !s.pool(pc): // its idleSince kept
				s.drop(pc)
			}
		}
	}
}

// idleWithin waits up to d for a pooled connection (one put back by
// another send), returning nil without one.
func (s *SMTP) idleWithin(ctx context.Context, d time.Duration) *conn {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		if pc, _ := s.takeIdle(); pc != nil {
			return pc
		}
		select {
		case <-s.limit.freedCh():
		case <-t.C:
			pc, _ := s.takeIdle()
			return pc
		case <-ctx.Done():
			return nil
		}
	}
}

// quit says QUIT on a pooled connection and drops it.
func (s *SMTP) quit(pc *conn) {
	_ = pc.nc.SetDeadline(time.Now().Add(min(s.timeout, 5*time.Second)))
	_ = pc.c.quit() // a polite goodbye; the socket is closed either way
	s.drop(pc)
}

// drop closes a connection of the pool's for good.
func (s *SMTP) drop(pc *conn) {
	pc.nc.Close()
	s.limit.released(pc.c != nil)
}

// Close says QUIT on idle connections and closes them. Connections in use by
// a concurrent Send are closed when that Send finishes.
func (s *SMTP) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	s.mu.Unlock()
	for {
		select {
		case pc := <-s.idle:
			s.quit(pc)
		default:
			return nil
		}
	}
}

// stageError converts an error from the client (or go-smtp's, whose reply
// type it shares) into a SendError, keeping the server's reply when there
// was one.
func stageError(ctx context.Context, stage string, err error) *SendError {
	se := &SendError{Stage: stage}
	var reply *smtp.SMTPError
	if errors.As(err, &reply) {
		se.Code = reply.Code
		se.Text = reply.Message
		se.Enhanced = enhancedString(reply.EnhancedCode)
		return se
	}
	se.Err = err
	return withContext(ctx, se)
}

// withContext records that a reply-less failure was caused by ctx ending:
// the socket was closed under the exchange, and "use of closed network
// connection" alone would hide that it was a timeout.
func withContext(ctx context.Context, se *SendError) *SendError {
	ctxErr := ctx.Err()
	if _, hasDeadline := ctx.Deadline(); ctxErr == nil && hasDeadline && errors.Is(se.Err, os.ErrDeadlineExceeded) {
		// The connection's deadline is the context's; its timer can fire a
		// moment before the context's own.
		ctxErr = context.DeadlineExceeded
	}
	if ctxErr != nil && se.Code == 0 && se.Err != nil && !errors.Is(se.Err, ctxErr) {
		se.Err = fmt.Errorf("%w: %w", ctxErr, se.Err)
	}
	return se
}

// enhancedString formats an enhanced status code as "5.1.1", or "" when the
// reply had none.
func enhancedString(ec smtp.EnhancedCode) string {
	if ec == smtp.EnhancedCodeNotSet || ec == smtp.NoEnhancedCode {
		return ""
	}
	return fmt.Sprintf("%d.%d.%d", ec[0], ec[1], ec[2])
}

// envelopeAddress is the MAIL FROM or RCPT TO argument for addr: its
// domain as IDNA A-labels, which every server accepts, and its local part
// as written, which needs SMTPUTF8 when it is not ASCII.
func envelopeAddress(addr string, smtpUTF8 bool) (string, error) {
	if err := validateLine(addr); err != nil {
		return "", err
	}
	out, utf8Local, err := address.ASCIIDomain(addr)
	if err != nil {
		return "", fmt.Errorf("smtp: %q: %w", addr, err)
	}
	if utf8Local && !smtpUTF8 {
		return "", fmt.Errorf("smtp: %q has a non-ASCII local part and the server does not support SMTPUTF8", addr)
	}
	return out, nil
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
