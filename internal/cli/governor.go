package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/rangecast/rangecast/internal/governor"
	pb "github.com/rangecast/rangecast/proto/rangecast/v1"
)

func (c *client) governor() (pb.GovernorServiceClient, error) {
	conn, err := c.dial()
	if err != nil {
		return nil, err
	}
	return pb.NewGovernorServiceClient(conn), nil
}

func governorCommand(c *client) *cobra.Command {
	cmd := &cobra.Command{Use: "governor", Short: "Show and adjust the per-sending-domain limits (daily ceiling, rate, hourly limit, provider breakers)"}
	cmd.AddCommand(governorStatusCommand(c), governorSetCommand(c), governorResetCommand(c), governorReleaseCommand(c))
	return cmd
}

func governorStatusCommand(c *client) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status [DOMAIN]",
		Short: "Show one sending domain's governor, or every domain's",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			gc, err := c.governor()
			if err != nil {
				return err
			}
			var domains []*pb.DomainStatus
			var msg proto.Message
			if len(args) == 1 {
				r, err := gc.GetDomain(cmd.Context(), &pb.GetDomainRequest{Domain: args[0]})
				if err != nil {
					return err
				}
				domains, msg = []*pb.DomainStatus{r.GetDomain()}, r.GetDomain()
			} else {
				r, err := gc.ListDomains(cmd.Context(), &pb.ListDomainsRequest{})
				if err != nil {
					return err
				}
				domains, msg = r.GetDomains(), r
			}
			if asJSON {
				out, err := protojson.MarshalOptions{Multiline: true, EmitUnpopulated: true}.Marshal(msg)
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), string(out))
				return nil
			}
			if len(domains) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "no sending domain has governor state yet (nothing sent)")
			}
			for i, d := range domains {
				if i > 0 {
					fmt.Fprintln(cmd.OutOrStdout())
				}
				printDomain(cmd.OutOrStdout(), d)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// printDomain writes one domain's governor in words and a provider table.
func printDomain(w io.Writer, d *pb.DomainStatus) {
	fmt.Fprintf(w, "%s  (day %s UTC", d.GetDomain(), d.GetDay())
	if !d.GetLive() {
		fmt.Fprint(w, ", last stored state")
	}
	fmt.Fprintln(w, ")")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	rejected := ""
	if d.GetRejectedToday() {
		rejected = "  (quota rejection today: no doubling tonight)"
	}
	fmt.Fprintf(tw, "  daily ceiling\t%s\n", thousands(d.GetDailyCeiling()))
	fmt.Fprintf(tw, "  sent today\t%s  (in flight %d)%s\n", thousands(d.GetSentToday()), d.GetInFlight(), rejected)
	fmt.Fprintf(tw, "  rate\t%s/s, burst %d, %.0f tokens now\n", strconv.FormatFloat(d.GetRatePerSecond(), 'f', -1, 64), d.GetBurst(), d.GetTokens())
	hourly := "no hourly limit"
	if d.GetEmailsPerHour() > 0 {
		hourly = fmt.Sprintf("%s of %s this hour", thousands(d.GetHourlyCount()), thousands(d.GetEmailsPerHour()))
	}
	if r := d.GetHourlyResetAt(); r != nil {
		hourly += fmt.Sprintf(" (reset at %s UTC; %s sent in the last hour)", r.AsTime().UTC().Format(time.TimeOnly), thousands(d.GetHourlySent()))
	}
	fmt.Fprintf(tw, "  smtp server %s\t%s\n", d.GetServer(), hourly)
	waiting := d.GetWaiting()
	if waiting == "" {
		waiting = "nothing: sending"
	}
	fmt.Fprintf(tw, "  waiting for\t%s\n", waiting)
	tw.Flush() //nolint:errcheck
	if len(d.GetProviders()) == 0 {
		return
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  PROVIDER\tSTATE\tFAILURES\tUNTIL (UTC)\tWHY")
	for _, p := range d.GetProviders() {
		until := "-"
		if p.GetUntil() != nil {
			until = p.GetUntil().AsTime().UTC().Format(time.TimeOnly)
		}
		phase := strings.ToLower(strings.TrimPrefix(p.GetPhase().String(), "PROVIDER_PHASE_"))
		if p.GetProbeInFlight() {
			phase += " (step out)"
		}
		why := strings.TrimPrefix(p.GetSummary(), p.GetProvider()+": ")
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\t%s\n", p.GetProvider(), strings.ReplaceAll(phase, "_", "-"), p.GetFailures(), until, shown(why))
	}
	tw.Flush() //nolint:errcheck
	if n := d.GetProvidersLeftOut(); n > 0 {
		fmt.Fprintf(w, "  and %s more providers, ranked below these (held, open, ramping, then refusing most)\n", thousands(n))
	}
}

// thousands formats n as the governor's own reasons do.
func thousands(n int64) string { return governor.Thousands(int(n)) }

func governorSetCommand(c *client) *cobra.Command {
	var rate float64
	var burst int32
	var ceiling int64
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "set-limits DOMAIN",
		Short: "Change a sending domain's rate, burst or daily ceiling (the hourly limit is the SMTP server's: coordinator --emails-per-hour)",
		Example: `  rangecast governor set-limits example.com --rate 20 --burst 100
  rangecast governor set-limits example.com --daily-ceiling 200000   # a domain warmed elsewhere`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &pb.SetDomainLimitsRequest{Domain: args[0]}
			f := cmd.Flags()
			if f.Changed("rate") {
				req.RatePerSecond = &rate
			}
			if f.Changed("burst") {
				req.Burst = &burst
			}
			if f.Changed("daily-ceiling") {
				req.DailyCeiling = &ceiling
			}
			gc, err := c.governor()
			if err != nil {
				return err
			}
			// Listed before the change, which makes the domain known.
			known, listErr := gc.ListDomains(cmd.Context(), &pb.ListDomainsRequest{})
			r, err := gc.SetDomainLimits(cmd.Context(), req)
			if err != nil {
				return err
			}
			if listErr != nil {
				known = nil // the change is made; the note is only a help
			}
			limitsNotes(cmd.ErrOrStderr(), known, r.GetDomain(), f.Changed("rate") && !f.Changed("burst"))
			if asJSON {
				return jsonLine(cmd.OutOrStdout(), r.GetDomain())
			}
			printDomain(cmd.OutOrStdout(), r.GetDomain())
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the domain's state after the change as JSON")
	cmd.Flags().Float64Var(&rate, "rate", 0, "messages per second")
	cmd.Flags().Int32Var(&burst, "burst", 0, "token bucket burst")
	cmd.Flags().Int64Var(&ceiling, "daily-ceiling", 0, "set the learned daily ceiling by hand (100 to 5,000,000)")
	return cmd
}

// limitsNotes says, on stderr, what a limits change may not do as the
// operator expects (testers): a rate lowered under a burst of many
// minutes' worth still lets the burst go at once, and a domain no
// broadcast sends from (a typo, say) was changed without effect on any.
func limitsNotes(w io.Writer, known *pb.ListDomainsResponse, d *pb.DomainStatus, rateOnly bool) {
	if rate, burst := d.GetRatePerSecond(), d.GetBurst(); rateOnly && rate > 0 && float64(burst) > rate*60 {
		fmt.Fprintf(w, "note: the burst is still %s, over a minute at %g a second: up to %s may go at once before the rate holds; lower it with --burst\n",
			thousands(int64(burst)), rate, thousands(int64(burst)))
	}
	if known == nil {
		return
	}
	var names []string
	for _, o := range known.GetDomains() {
		if strings.EqualFold(o.GetDomain(), d.GetDomain()) {
			return
		}
		names = append(names, o.GetDomain())
	}
	listed := "none yet"
	if len(names) > 0 {
		listed = strings.Join(names, ", ")
	}
	fmt.Fprintf(w, "note: no broadcast sends from %s yet (sending domains: %s); its limits are kept for when one does; check the spelling\n", d.GetDomain(), listed)
}

func governorResetCommand(c *client) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "reset-rate-limit SERVER",
		Short: "Restart an SMTP server's hourly count from now (deletes nothing)",
		Long: `Use it when the SMTP server's own hourly counter was reset, or its limit
raised by hand: sends before now stop counting against the hourly limit.
They stay recorded. A broadcast waiting for the hourly limit picks up on its
next tick.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			gc, err := c.governor()
			if err != nil {
				return err
			}
			r, err := gc.ResetRateLimit(cmd.Context(), &pb.ResetRateLimitRequest{Server: args[0]})
			if err != nil {
				return err
			}
			if asJSON {
				return jsonLine(cmd.OutOrStdout(), r)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "hourly limit of %s reset at %s UTC for %s\n", args[0],
				r.GetResetAt().AsTime().UTC().Format(time.TimeOnly), strings.Join(r.GetDomains(), ", "))
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the reset time and the domains it applies to as JSON")
	return cmd
}

func governorReleaseCommand(c *client) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "release DOMAIN PROVIDER",
		Short: "Lift a receiving provider's hold or open breaker now (it ramps back from one connection)",
		Long: `Use it when you fixed what a provider refused (a PTR record, an
authentication failure), or know its pause is over: the provider held
(a quota, Gmail's 421 4.7.28) or with its breaker open for the sending
domain DOMAIN ramps back up now, from one connection, as when a hold runs
out, and its recipients deferred while it was held in the domain's running
and paused broadcasts are due at once. A provider ramping back already is
left so, its held recipients made due. PROVIDER is as 'rangecast governor status DOMAIN' names it
(google, microsoft, example.org), or one of its recipient domains
(gmail.com). If it refuses again, it is held again.`,
		Example: `  rangecast governor release news.example.com google`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			gc, err := c.governor()
			if err != nil {
				return err
			}
			r, err := gc.ReleaseProvider(cmd.Context(), &pb.ReleaseProviderRequest{Domain: args[0], Provider: args[1]})
			if err != nil {
				return err
			}
			if asJSON {
				return jsonLine(cmd.OutOrStdout(), r)
			}
			how := "it was held; it ramps back up from one connection"
			switch r.GetWas() {
			case pb.ProviderPhase_PROVIDER_PHASE_OPEN:
				how = "its breaker was open; it ramps back up from one connection"
			case pb.ProviderPhase_PROVIDER_PHASE_HALF_OPEN:
				how = "it was ramping back up already, and is left so"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s lifted for %s (%s); %s recipients held for it are due now\n",
				r.GetProvider(), r.GetDomain().GetDomain(), how, thousands(r.GetDue()))
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the domain's governor after the release, the phase the provider had and how many recipients were made due, as JSON")
	return cmd
}
