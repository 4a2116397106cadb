package ops

import "github.com/veil-privacy/veil/fed/coord"

// secAggMinClients is the least number of clients in a masked round:
// masking unmasks only sums of at least t ≥ 2 survivors, and a round of 2
// would let each client learn the other's update from the sum.
const secAggMinClients = 3

// secAggDefault fills in the settings left at their defaults. --secagg
// given as "" is masking whenever the clients run DP (--dp, the default)
// with a strategy masking serves (fedavg and fedsgd rounds, fedbuff
// buffers), so that the coordinator sees only sums of at least t clients'
// updates, never one client's; it is off without DP and with easgd, whose
// elastic exchanges need each client's own parameters in plaintext. A
// plaintext round under DP must be asked for (--secagg off). --min-available
// given as 0 is 3 under masking (its least round) and 2 otherwise.
func (c *Config) secAggDefault() {
	if c.SecAgg == "" {
		c.SecAgg = "off"
		if c.DDP || c.DP && c.Strategy != coord.AsyncEASGD {
			c.SecAgg = "masking"
		}
	}
	if c.MinAvail == 0 {
		c.MinAvail = max(2, c.MinUpdate)
		if c.SecAgg == "masking" && !c.asyncStrategy() {
			c.MinAvail = max(secAggMinClients, c.MinUpdate)
		}
	}
}

// secAggOffHint ends an error about masking: masking is the default under
// DP, so the user may not have asked for it, and --secagg off is how to ask
// for plaintext updates instead.
const secAggOffHint = "; or pass --secagg off (masking is the default under --dp) to send each client's update to the coordinator in plaintext"
