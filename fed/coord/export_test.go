package coord

import "time"

// SetLoopTick sets how often c's loop steps when nothing happens (before
// Run): tests set it to an hour, so that anything that happens proves it
// waited for no tick.
func SetLoopTick(c *Coordinator, d time.Duration) { c.tick = d }

// OnSecureSum shows f each secure round's unmasked sum (set before Run).
func OnSecureSum(c *Coordinator, f func(round uint64, sum []uint32)) { c.onSecureSum = f }
