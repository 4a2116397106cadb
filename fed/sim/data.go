package sim

import (
	"fmt"

	"github.com/veil-privacy/veil/fed/local"
)

// DataOptions say where a simulation's data are and how its images are
// described (local.DataOptions, without a Part: the simulation splits the
// whole set among its clients).
type DataOptions = local.DataOptions

// CheckData validates d for o's model, so that a caller can refuse bad
// settings before it loads anything.
func (o *Options) CheckData(d DataOptions) error {
	t := d.Training(o.Model, o.Optim)
	if err := t.ValidateData(); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	return nil
}

// LoadData reads and describes the data d names into o.Data (the whole
// training set and the evaluation pairs), after saying which folder is
// missing, if one is, before anything is read.
func (o *Options) LoadData(d DataOptions) error {
	if d.Part != nil {
		return fmt.Errorf("sim: the simulation splits the whole data set; it takes no part of it")
	}
	data, err := local.LoadData(o.Model, o.Optim, d)
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	o.Data = data
	return nil
}
