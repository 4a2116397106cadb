package sim

import (
	"fmt"
)

// checkAsync checks the asynchronous settings: the strategy named both
// ways, and none of the round-only faults or secure aggregation.
func (o *Options) checkAsync() error {
	if o.Async == nil {
		return nil
	}
	switch {
	case o.Async.Strategy != o.Strategy:
		return fmt.Errorf("sim: the asynchronous strategy is %q but the strategy %q", o.Async.Strategy, o.Strategy)
	case o.SecAgg == "masking":
		return fmt.Errorf("sim: secure aggregation of the asynchronous strategy %s is not supported yet", o.Strategy)
	case o.Dropout != 0 || o.Stragglers != 0:
		return fmt.Errorf("sim: drop-outs and stragglers are simulated in rounds only, not with the asynchronous strategy %s", o.Strategy)
	}
	return nil
}
