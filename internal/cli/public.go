package cli

import (
	"github.com/spf13/cobra"

	"github.com/rangecast/rangecast/internal/maintenance"
	"github.com/rangecast/rangecast/internal/server"
)

// The public HTTP's secrets are never flags (they would show in ps): the
// keys file flag names a file, the rest come from the environment.
const unsubscribeKeysFileHelp = "file of one-click unsubscribe keys, one per line (# comments), at least 32 random characters each; the first signs links, every key verifies, so a new key goes first and the old one stays listed while its mail is still read. " +
	"comma-separated keys in (env " + server.EnvUnsubscribeKeys + ") are added. Coordinators and page workers must hold the same keys (env RANGECAST_UNSUBSCRIBE_KEYS_FILE)"

func publicSecrets(keysFile string) server.Secrets {
	s := server.SecretsFromEnv()
	s.UnsubscribeKeysFile = keysFile
	return s
}

// publicFlags are the coordinator's: the unsubscribe keys it verifies, and
// the reputation alarms. Webhook secrets come from the environment:
// RANGECAST_WEBHOOK_SECRET (generic format), RANGECAST_MAILGUN_SIGNING_KEY,
// RANGECAST_RESEND_WEBHOOK_SECRET (whsec_…); each endpoint exists only when
// its secret is set.
func publicFlags(cmd *cobra.Command, keysFile *string, a *maintenance.AlarmConfig) {
	f := cmd.Flags()
	f.StringVar(keysFile, "unsubscribe-keys-file", "", unsubscribeKeysFileHelp)
	f.Var(alarmShare(&a.BounceRate, maintenance.DefaultBounceAlarm, "messages tried (accepted, or refused for good at send)", "0.02 is 2 %"), "bounce-alarm",
		"pause a running broadcast whose hard bounces (reported, or refused at send) pass this share of messages tried (accepted, or refused for good), above 0 and below 1 (0.02: 2 %); -1 turns it off (env RANGECAST_BOUNCE_ALARM)")
	f.Var(alarmShare(&a.ComplaintRate, maintenance.DefaultComplaintAlarm, "delivered messages", "0.001 is 0.1 %"), "complaint-alarm",
		"pause a running broadcast whose spam complaints pass this share of delivered messages, above 0 and below 1 (0.001: 0.1 %); -1 turns it off (env RANGECAST_COMPLAINT_ALARM)")
	f.Int64Var(&a.MinSample, "alarm-min-sample", int64(maintenance.DefaultAlarmSample),
		"messages a rate needs (accepted for bounces, delivered for complaints) before an alarm can pause (env RANGECAST_ALARM_MIN_SAMPLE)")
}

// workerPublicFlags are the page worker's: where one-click links point and
// the key file they are signed with.
func workerPublicFlags(cmd *cobra.Command, publicURL, keysFile *string) {
	f := cmd.Flags()
	f.StringVar(publicURL, "public-url", "",
		"the coordinators' public HTTP as mail readers reach it (https://mail.example.com); every message's List-Unsubscribe link points here. Required, with the unsubscribe keys (env RANGECAST_PUBLIC_URL)")
	f.StringVar(keysFile, "unsubscribe-keys-file", "", unsubscribeKeysFileHelp)
}
