package local

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/veil-privacy/veil/internal/datadir"
	"github.com/veil-privacy/veil/training"
)

// DataOptions say where a federated run's data are (LFW's development
// training identities and pairs, and the public face photos that centre
// the distillation targets) and how its images are described: what a
// federated client and the simulation load for the distillation head.
type DataOptions struct {
	// LFW is an LFW-layout folder (default: <data>/lfw).
	LFW string
	// MinImages and MaxPeople select the identities (training.DataOptions).
	MinImages, MaxPeople int
	// CentreImages is a folder of public face photos whose mean
	// descriptor centres the distillation targets (default:
	// <data>/mtfl/net_7876); CentreCount how many of them to average.
	CentreImages string
	CentreCount  int
	// Part, if set, keeps only one part of the split of the identities,
	// before any image is read or described: a federated client's own
	// data.
	Part *training.DataPart
	// Describers compute the head's input vectors and the teacher's
	// descriptors (required).
	Describers training.Describers
	// Progress, if set, is told of the images' description.
	Progress func(training.Event)
}

// Training returns package training's options that load d for model m
// and optimiser o, with the default folders filled in (the data folder
// of datadir.Default).
func (d DataOptions) Training(m training.ModelOptions, o training.OptimOptions) training.Options {
	t := training.Options{Model: m, Optim: o, Describers: d.Describers, Progress: d.Progress,
		Data: training.DataOptions{Set: "lfw", LFW: d.LFW, MinImages: d.MinImages, MaxPeople: d.MaxPeople,
			CentreImages: d.CentreImages, CentreCount: d.CentreCount, Part: d.Part}}
	t.Data.DefaultFolders(datadir.Default())
	return t
}

// LoadData reads and describes the data d names for model m and
// optimiser o, after checking the options and saying which folder is
// missing, if one is, before anything is read (a folder d names is checked
// before a default one).
func LoadData(m training.ModelOptions, o training.OptimOptions, d DataOptions) (*training.Data, error) {
	t := d.Training(m, o)
	if err := t.ValidateData(); err != nil {
		return nil, err
	}
	// A folder the caller named is checked first: a mistake there is the
	// likelier one.
	checks := []func() error{d.checkCentres(t.Data.CentreImages), d.checkLFW(t.Data.LFW)}
	if d.LFW != "" {
		checks[0], checks[1] = checks[1], checks[0]
	}
	for _, check := range checks {
		if err := check(); err != nil {
			return nil, err
		}
	}
	return training.LoadData(&t)
}

// checkLFW says how to give the LFW folder when dir has no identities
// list.
func (DataOptions) checkLFW(dir string) func() error {
	return func() error {
		if _, err := os.Stat(filepath.Join(dir, "peopleDevTrain.txt")); errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("no LFW data at %s (peopleDevTrain.txt is missing): give --data DIR (an LFW-layout folder) or set %s to the data folder",
				dir, datadir.EnvData)
		}
		return nil
	}
}

// checkCentres says how to give the centre photos when dir is missing.
func (DataOptions) checkCentres(dir string) func() error {
	return func() error {
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("the public face photos that centre the distillation targets are not at %s: "+
				"give --centre-images DIR (MTFL's net_7876 folder) or set %s to the data folder", dir, datadir.EnvData)
		}
		return nil
	}
}
