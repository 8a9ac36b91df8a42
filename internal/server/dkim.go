package server

import (
	"context"
	"log/slog"
	"os"
	"strings"

	"github.com/rangecast/rangecast/internal/message"
	"github.com/rangecast/rangecast/internal/store"
)

// EnvDKIMKeys holds DKIM keys as comma-separated DOMAIN=SELECTOR:KEYFILE,
// added to the --dkim-key flags.
const EnvDKIMKeys = "RANGECAST_DKIM_KEYS"

// DKIMKeysFromEnv splits EnvDKIMKeys.
func DKIMKeysFromEnv() []string {
	var out []string
	for _, s := range strings.Split(os.Getenv(EnvDKIMKeys), ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// loadDKIM reads the keys (any error stops the process from starting: an
// unreadable key, or RSA under 1024 bits) and logs what is legal but
// unwise. Mail from a domain no key covers goes out unsigned, with one
// warning per domain: the From domains are only known as broadcasts are
// created, so a key for the wrong domain shows then.
func loadDKIM(specs []string, log *slog.Logger) (*message.DKIM, error) {
	d, err := message.LoadDKIM(specs)
	if err != nil || d == nil {
		return d, err
	}
	for _, w := range d.Warnings() {
		log.Warn("dkim key configuration", "warning", w)
	}
	d.OnUnsigned(func(domain string) {
		log.Warn("mail from a domain without a DKIM key goes out unsigned; add --dkim-key "+domain+"=SELECTOR:KEYFILE",
			"domain", domain, "dkim_domains", strings.Join(d.Domains(), ","))
	})
	for _, k := range d.Keys() {
		log.Info("dkim key", "domain", k.Domain, "selector", k.Selector, "algorithm", k.Algorithm(), "bits", k.Bits())
	}
	return d, nil
}

// warnUnusedDKIM names keys whose domain none of the unfinished
// broadcasts sends from. Only a warning: transactional mail and
// broadcasts created later may well use them.
func warnUnusedDKIM(ctx context.Context, st store.Store, d *message.DKIM, log *slog.Logger) {
	if d == nil {
		return
	}
	list, err := st.ListBroadcasts(ctx)
	if err != nil {
		return
	}
	var froms []string
	for _, b := range list {
		if b.State.Finished() {
			continue
		}
		if at := strings.LastIndexByte(b.Content.FromAddress, '@'); at >= 0 {
			froms = append(froms, strings.ToLower(b.Content.FromAddress[at+1:]))
		}
	}
	if len(froms) == 0 {
		return
	}
	if err := d.CheckDomains(froms); err != nil {
		log.Warn("dkim keys unused by the unfinished broadcasts", "err", err)
	}
}
