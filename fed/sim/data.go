package sim

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/veil-privacy/veil/internal/datadir"
	"github.com/veil-privacy/veil/training"
)

// DataOptions say where a simulation's data are and how its images are
// described.
type DataOptions struct {
	// LFW is an LFW-layout folder: its development training identities
	// are split among the clients, its development pairs score the model
	// (default: <data>/lfw).
	LFW string
	// MinImages and MaxPeople select the identities (training.DataOptions).
	MinImages, MaxPeople int
	// CentreImages is a folder of public face photos whose mean
	// descriptor centres the distillation targets (default:
	// <data>/mtfl/net_7876); CentreCount how many of them to average.
	CentreImages string
	CentreCount  int
	// Describers compute the head's input vectors and the teacher's
	// descriptors (required).
	Describers training.Describers
	// Progress, if set, is told of the images' description.
	Progress func(training.Event)
}

// training returns the options of package training that load the data
// for o's model and optimiser, with the default folders filled in.
func (d DataOptions) training(o *Options) training.Options {
	t := training.Options{Model: o.Model, Optim: o.Optim, Describers: d.Describers, Progress: d.Progress,
		Data: training.DataOptions{Set: "lfw", LFW: d.LFW, MinImages: d.MinImages, MaxPeople: d.MaxPeople,
			CentreImages: d.CentreImages, CentreCount: d.CentreCount}}
	t.Data.DefaultFolders(datadir.Default())
	return t
}

// CheckData validates d for o's model, so that a caller can refuse bad
// settings before it loads anything.
func (o *Options) CheckData(d DataOptions) error {
	t := d.training(o)
	if err := t.ValidateData(); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	return nil
}

// LoadData reads and describes the data d names into o.Data (the whole
// training set and the evaluation pairs), after saying which folder is
// missing, if one is, before anything is read.
func (o *Options) LoadData(d DataOptions) error {
	t := d.training(o)
	if err := t.ValidateData(); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	if _, err := os.Stat(filepath.Join(t.Data.LFW, "peopleDevTrain.txt")); errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("sim: no LFW data at %s (peopleDevTrain.txt is missing): give --data DIR (an LFW-layout folder) or set %s to the data folder",
			t.Data.LFW, datadir.EnvData)
	}
	if _, err := os.Stat(t.Data.CentreImages); errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("sim: the public face photos that centre the distillation targets are not at %s: "+
			"give --centre-images DIR (MTFL's net_7876 folder) or set %s to the data folder", t.Data.CentreImages, datadir.EnvData)
	}
	data, err := training.LoadData(&t)
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	o.Data = data
	return nil
}
