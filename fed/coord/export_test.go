package coord

import "time"

// SetLoopTick sets how often c's loop steps when nothing happens (before
// Run): tests set it to an hour, so that anything that happens proves it
// waited for no tick.
func SetLoopTick(c *Coordinator, d time.Duration) { c.tick = d }
