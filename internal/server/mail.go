package server

import (
	"github.com/rangecast/rangecast/internal/api"
	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/message"
	"github.com/rangecast/rangecast/internal/transactional"
	"github.com/rangecast/rangecast/internal/transport"
)

// MailOptions are the page workers' mail settings, given to a coordinator
// too so that previews and test copies (BroadcastOpsService) render and
// send exactly as a worker does. Each is optional: without the public URL
// previews are refused, without the SMTP URL test copies are.
type MailOptions struct {
	SMTPURL   string // RANGECAST_SMTP_URL, as the workers'
	PublicURL string // RANGECAST_PUBLIC_URL, as the workers'
	DKIMKeys  []string
}

// testPool is the SMTP connections a coordinator keeps for test copies.
const testPool = 2

// mail builds the API's Mail from o and the coordinator's unsubscribe keys
// (test copies are counted in the governors through b, as transactional
// mail is), and returns the function that closes its transport.
func (o CoordinatorOptions) mail(b *bus.Bus) (api.Mail, func(), error) {
	m := api.Mail{Usage: transactional.NewHeldProviders(b, o.Log.With("component", "test copies"))}
	closeAll := func() {}
	if o.Mail.PublicURL != "" {
		u, err := unsubscribeLinks(o.Mail.PublicURL, o.Secrets)
		if err != nil {
			return m, closeAll, err
		}
		m.Unsubscribe = u
	}
	d, err := loadDKIM(o.Mail.DKIMKeys, o.Log)
	if err != nil {
		return m, closeAll, err
	}
	m.DKIM = d
	if o.Mail.SMTPURL != "" {
		tr, err := transport.NewSMTP(withPool(o.Mail.SMTPURL, testPool))
		if err != nil {
			return m, closeAll, err
		}
		m.Transport, closeAll = tr, func() { tr.Close() }
	}
	return m, closeAll, nil
}

// validate refuses mail settings the coordinator could not use, before
// anything is connected.
func (m MailOptions) validate(s Secrets) error {
	if m.PublicURL != "" {
		if _, err := unsubscribeLinks(m.PublicURL, s); err != nil {
			return err
		}
	}
	if _, err := message.LoadDKIM(m.DKIMKeys); err != nil {
		return err
	}
	if m.SMTPURL != "" {
		tr, err := transport.NewSMTP(m.SMTPURL)
		if err != nil {
			return err
		}
		tr.Close()
	}
	return nil
}
