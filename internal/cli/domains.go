package cli

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"regexp"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rangecast/rangecast/internal/address"
	"github.com/rangecast/rangecast/internal/message"
)

func domainsCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "domains", Short: "What a sending domain must publish in DNS (DKIM, SPF, DMARC)"}
	cmd.AddCommand(domainsRecordsCommand())
	return cmd
}

func domainsRecordsCommand() *cobra.Command {
	var keys, spfIncludes, spfIPs []string
	var dmarcPolicy, dmarcRUA string
	cmd := &cobra.Command{
		Use:   "records DOMAIN",
		Short: "Print the DNS records to publish for a sending domain (works offline)",
		Long: `Prints, in zone-file form, the records receivers check before they trust mail
from DOMAIN (the domain of the From address, which rangecast also uses as
the envelope sender):

  DKIM   one TXT record per --dkim-key selector, derived from the private key
  SPF    the TXT record that authorizes your relay to send for DOMAIN
  DMARC  the policy record, starting at p=none

Nothing is looked up: it reads only the key files.`,
		Example: `  rangecast domains records news.example.com \
    --dkim-key example.com=rc2026:/etc/rangecast/dkim/rc2026.pem \
    --dkim-key example.com=rc2027:/etc/rangecast/dkim/rc2027.pem \
    --spf-include _spf.relay.example --dmarc-rua dmarc@example.com`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			domain := strings.ToLower(strings.TrimSuffix(args[0], "."))
			if err := message.ValidateFromAddress("postmaster@" + domain); err != nil {
				return fmt.Errorf("%q is not a domain name", args[0])
			}
			if len(keys) == 0 {
				return fmt.Errorf("give at least one --dkim-key SELECTOR:KEYFILE (or DOMAIN=SELECTOR:KEYFILE) for %s", domain)
			}
			specs := make([]string, len(keys))
			for i, k := range keys {
				specs[i] = k
				if !strings.Contains(k, "=") {
					specs[i] = domain + "=" + k
				}
			}
			d, err := message.LoadDKIM(specs)
			if err != nil {
				return err
			}
			// The From domain is known here, so a key that would sign
			// none of its mail is a mistake, not a warning.
			if err := d.CheckDomains([]string{domain}); err != nil {
				return err
			}
			switch dmarcPolicy {
			case "none", "quarantine", "reject":
			default:
				return fmt.Errorf("--dmarc-policy %q: use none, quarantine or reject", dmarcPolicy)
			}
			if err := checkRecordInputs(spfIncludes, spfIPs, dmarcRUA); err != nil {
				return err
			}
			return printRecords(cmd.OutOrStdout(), domain, d, spfIncludes, spfIPs, dmarcPolicy, dmarcRUA)
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&keys, "dkim-key", nil, "SELECTOR:KEYFILE, or DOMAIN=SELECTOR:KEYFILE as given to the page workers (the signing domain may be DOMAIN or a parent of it); repeat for each selector")
	f.StringArrayVar(&spfIncludes, "spf-include", nil, "a domain whose SPF record lists your relay's servers (your provider documents it, e.g. _spf.relay.example); repeatable")
	f.StringArrayVar(&spfIPs, "spf-ip", nil, "an address or network your own relay sends from (203.0.113.7, 2001:db8::/48); repeatable")
	f.StringVar(&dmarcPolicy, "dmarc-policy", "none", "DMARC p=: none (monitor), quarantine or reject")
	f.StringVar(&dmarcRUA, "dmarc-rua", "", "mailbox for DMARC aggregate reports (rua=mailto:…)")
	return cmd
}

// checkRecordInputs refuses what would print a record that does not
// work: a published SPF record with "ip4:999.1.1.1" or "include:bad..x" is
// a permerror, which fails SPF for all of the domain's mail, and a DMARC
// rua with a ';' in it adds tags of its own (a second p=).
func checkRecordInputs(spfIncludes, spfIPs []string, rua string) error {
	var errs []error
	for _, ip := range spfIPs {
		if a, err := netip.ParseAddr(ip); err == nil {
			if a.Zone() != "" {
				// "%" is SPF's macro character: fe80::1%eth0 is a permerror.
				errs = append(errs, fmt.Errorf("--spf-ip %q: an address with a zone (%%%s) is not one the internet sees", ip, a.Zone()))
			}
			continue
		}
		if p, err := netip.ParsePrefix(ip); err != nil || p.Masked() != p {
			errs = append(errs, fmt.Errorf("--spf-ip %q: give an address (203.0.113.7) or a network with its host bits zero (203.0.113.0/24, 2001:db8::/48)", ip))
		}
	}
	for _, inc := range spfIncludes {
		if !dnsName.MatchString(strings.ToLower(inc)) || len(inc) > 253 {
			errs = append(errs, fmt.Errorf("--spf-include %q: give a domain name, as your provider documents it (_spf.relay.example)", inc))
		}
	}
	if rua != "" {
		mbox := strings.TrimPrefix(rua, "mailto:")
		if _, err := address.Canonical(mbox); err != nil || strings.ContainsAny(mbox, ";,! ") {
			errs = append(errs, fmt.Errorf("--dmarc-rua %q: give one mailbox, such as dmarc@example.com", rua))
		}
	}
	return errors.Join(errs...)
}

// dnsName is a DNS name as an SPF include names it: labels of letters,
// digits, hyphens and underscores (_spf.google.com), at least two, no
// macros.
var dnsName = regexp.MustCompile(`^([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\.)+[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.?$`)

// printRecords writes the records as zone-file lines with comments.
func printRecords(w io.Writer, domain string, d *message.DKIM, spfIncludes, spfIPs []string, policy, rua string) error {
	fmt.Fprintf(w, "; DNS records for mail from %s. Publish them, then check each with dig +short TXT NAME.\n\n", domain)
	fmt.Fprintf(w, "; DKIM: one TXT record per selector. Keep a selector's record published for a week after\n")
	fmt.Fprintf(w, "; its key stops signing: mail already sent is still verified with it.\n")
	for _, k := range d.Keys() {
		rec, err := k.Record()
		if err != nil {
			return err
		}
		desc := fmt.Sprintf("RSA %d bits", k.Bits())
		if k.Algorithm() == "ed25519" {
			desc = "Ed25519"
		}
		fmt.Fprintf(w, "; selector %s (%s, %s)\n", k.Selector, desc, k.File)
		fmt.Fprintf(w, "%s.\tIN\tTXT\t%s\n", k.RecordName(), txtStrings(rec))
	}
	for _, warning := range d.Warnings() {
		fmt.Fprintf(w, "; note: %s\n", warning)
	}

	fmt.Fprintf(w, "\n; SPF: on %s, the envelope sender's domain (rangecast's MAIL FROM is the From address).\n", domain)
	fmt.Fprintf(w, "; It must name every server that hands your mail to the internet; -all refuses the rest.\n")
	fmt.Fprintf(w, "; One SPF record per name: merge these mechanisms into an existing v=spf1 record, never add a second.\n")
	var mech []string
	for _, inc := range spfIncludes {
		mech = append(mech, "include:"+inc)
	}
	for _, ip := range spfIPs {
		a, err := netip.ParseAddr(ip)
		if err != nil {
			a = netip.MustParsePrefix(ip).Addr() // checkRecordInputs took it
		}
		if a.Is4() {
			mech = append(mech, "ip4:"+ip)
		} else {
			mech = append(mech, "ip6:"+ip)
		}
	}
	if len(mech) == 0 {
		fmt.Fprintf(w, "; (no --spf-include or --spf-ip given: replace RELAY with your relay's include or addresses)\n")
		mech = []string{"include:RELAY"}
	}
	fmt.Fprintf(w, "%s.\tIN\tTXT\t%s\n", domain, txtStrings("v=spf1 "+strings.Join(mech, " ")+" -all"))

	fmt.Fprintf(w, "\n; DMARC: passes when DKIM (d= aligned with From) or SPF passes.")
	if org := orgDomain(domain, d); org != domain {
		fmt.Fprintf(w, " Relaxed alignment (adkim=r) lets d=%s sign for %s.", org, domain)
	}
	fmt.Fprintf(w, "\n; Start with p=none, read the aggregate reports, then move to p=quarantine and p=reject.\n")
	fmt.Fprintf(w, "; A record on the organisational domain covers its subdomains that have none of their own.\n")
	dmarc := "v=DMARC1; p=" + policy
	if rua != "" {
		dmarc += "; rua=mailto:" + strings.TrimPrefix(rua, "mailto:")
	}
	dmarc += "; adkim=r; aspf=r"
	fmt.Fprintf(w, "_dmarc.%s.\tIN\tTXT\t%s\n", domain, txtStrings(dmarc))
	return nil
}

// orgDomain is the shortest signing domain that covers domain, for the
// comment only (the Public Suffix List is not consulted).
func orgDomain(domain string, d *message.DKIM) string {
	ks := d.For(domain)
	if len(ks) == 0 {
		return domain
	}
	return ks[0].Domain
}

// txtStrings quotes s as one or more character-strings of at most 255
// bytes (RFC 1035 3.3): a 2048-bit RSA key does not fit in one. Resolvers
// join them back without a separator.
func txtStrings(s string) string {
	var parts []string
	for len(s) > 255 {
		parts = append(parts, `"`+s[:255]+`"`)
		s = s[255:]
	}
	parts = append(parts, `"`+s+`"`)
	if len(parts) == 1 {
		return parts[0]
	}
	return "( " + strings.Join(parts, " ") + " )"
}
