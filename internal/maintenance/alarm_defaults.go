package maintenance

// Defaulted is a with every zero field set to its default: the thresholds
// the alarm really applies.
func (a AlarmConfig) Defaulted() AlarmConfig { return a.withDefaults() }
