package transport

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/emersion/go-sasl"
)

// SMTP AUTH mechanisms the transport speaks, by the name EHLO offers.
const (
	mechPlain   = sasl.Plain
	mechLogin   = sasl.Login
	mechXOAuth2 = "XOAUTH2"
)

// supportedMechs is what an error says rangecast supports.
const supportedMechs = "PLAIN and LOGIN (user and password in the URL), XOAUTH2 (user in the URL and token_file=)"

// credentials are what the URL says to authenticate with.
type credentials struct {
	user, pass string
	mech       string     // forced by auth=; "" picks from what the server offers
	token      *tokenFile // XOAUTH2's bearer token; nil without token_file
	addr       string     // for messages
}

// client picks the mechanism from those the server offered and returns the
// SASL client for it.
func (cr *credentials) client(offered []string) (sasl.Client, error) {
	want := []string{mechPlain, mechLogin} // PLAIN first: one round trip
	if cr.token != nil {
		want = []string{mechXOAuth2}
	}
	if cr.mech != "" {
		want = []string{cr.mech}
	}
	for _, m := range want {
		if !slices.Contains(offered, m) {
			continue
		}
		switch m {
		case mechPlain:
			return sasl.NewPlainClient("", cr.user, cr.pass), nil
		case mechLogin:
			return &loginClient{Client: sasl.NewLoginClient(cr.user, cr.pass), user: cr.user}, nil
		case mechXOAuth2:
			tok, err := cr.token.read()
			if err != nil {
				return nil, err
			}
			return &xoauth2Client{user: cr.user, token: tok}, nil
		}
	}
	offers := "no mechanism"
	if len(offered) > 0 {
		offers = "AUTH " + strings.Join(offered, " ")
	}
	return nil, fmt.Errorf("%s offers %s, and none of them is %s (what this URL can use); rangecast supports %s",
		cr.addr, offers, strings.Join(want, " or "), supportedMechs)
}

// loginClient is go-sasl's LOGIN, which sends the user name as an initial
// response and expects "Password:", extended for servers that ignore the
// initial response and ask for the user name first (Exchange and others
// prompt "Username:").
type loginClient struct {
	sasl.Client
	user string
}

func (c *loginClient) Next(challenge []byte) ([]byte, error) {
	if p := bytes.ToLower(bytes.TrimSpace(challenge)); bytes.HasPrefix(p, []byte("user")) {
		return []byte(c.user), nil
	}
	return c.Client.Next(challenge)
}

// xoauth2Client is Google's and Microsoft's XOAUTH2: one initial response
// "user=U^Aauth=Bearer T^A^A". A refused token is answered with a
// challenge carrying a JSON error, to which the client sends an empty
// response and the server then replies 535.
type xoauth2Client struct {
	user, token string
	refused     bool
}

func (c *xoauth2Client) Start() (string, []byte, error) {
	return mechXOAuth2, []byte("user=" + c.user + "\x01auth=Bearer " + c.token + "\x01\x01"), nil
}

func (c *xoauth2Client) Next(challenge []byte) ([]byte, error) {
	if c.refused {
		return nil, sasl.ErrUnexpectedServerChallenge
	}
	c.refused = true
	return []byte{}, nil
}

// tokenFile is a bearer token kept in a file that something else (a
// sidecar, a cron job) refreshes before it expires. It is read at every
// authentication (a new connection, not a message), so a new connection
// always uses the current token: a change kept to the file's size and
// modification time (a Kubernetes ..data swap of two tokens of one length,
// cp -p, a coarse clock) was missed when it was read again only on those,
// and a worker sent a stale token until restarted (tester).
type tokenFile struct {
	path string
}

func (f *tokenFile) read() (string, error) {
	raw, err := os.ReadFile(f.path)
	if err != nil {
		return "", fmt.Errorf("XOAUTH2 token file: %w", err)
	}
	tok := strings.TrimSpace(string(raw))
	switch {
	case tok == "":
		return "", fmt.Errorf("XOAUTH2 token file %s is empty", f.path)
	case strings.ContainsAny(tok, "\x00\x01\r\n \t"):
		return "", errors.New("XOAUTH2 token file " + f.path + " holds more than one token (whitespace or control characters inside)")
	}
	return tok, nil
}
