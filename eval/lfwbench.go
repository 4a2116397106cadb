package eval

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/veil-privacy/veil/metric"
)

// LinkageBenchReport is veil bench unlink's report: MeasureLinkage on
// LFW's development identities, with the LMNN options and the wall time.
type LinkageBenchReport struct {
	*LinkageReport
	LMNN  metric.Options `json:"lmnn_options"`
	WallS float64        `json:"wall_s"`
}

// LinkageMinPhotos is the number of photos a person of the linkage
// benchmark's pool has at least.
const LinkageMinPhotos = 4

// MeasureLinkageLFW measures the linkage attack (MeasureLinkage with o)
// on the people of LFW's development identity lists with at least
// LinkageMinPhotos photos.
func MeasureLinkageLFW(ctx context.Context, src *LFWSource, o LinkageOptions) (*LinkageBenchReport, error) {
	if src == nil {
		return nil, errors.New("eval: linkage bench without an LFW source")
	}
	start := time.Now()
	pool, err := src.People([]string{LFWDevTrain, LFWDevTest}, func(n int) bool { return n >= LinkageMinPhotos }, "describing")
	if err != nil {
		return nil, err
	}
	rep, err := MeasureLinkage(ctx, WithDescriptors(pool), o)
	if err != nil {
		return nil, err
	}
	return &LinkageBenchReport{LinkageReport: rep, LMNN: o.LMNN, WallS: time.Since(start).Seconds()}, nil
}

// metricSplitFile is the people list of an LFW development split veil
// bench metric measures, by name ("train", "test").
func metricSplitFile(name string) (string, bool) {
	switch name {
	case "train":
		return LFWDevTrain, true
	case "test":
		return LFWDevTest, true
	}
	return "", false
}

// MetricGainMinPhotos is the number of photos a named person of the
// metric benchmark has at least (the others with one photo are strangers).
const MetricGainMinPhotos = 5

// MetricBenchSplit is one LFW development split's measurement.
type MetricBenchSplit struct {
	Split  string            `json:"split"`
	Report *MetricGainReport `json:"report"`
}

// MetricBenchReport is veil bench metric's report.
type MetricBenchReport struct {
	Splits []MetricBenchSplit `json:"splits"`
	LMNN   metric.Options     `json:"lmnn_options"`
	WallS  float64            `json:"wall_s"`
}

// MetricBenchOptions configure MeasureMetricGainLFW.
type MetricBenchOptions struct {
	// Splits are names of LFW development splits, "train" (LFWDevTrain)
	// or "test" (LFWDevTest), measured in this order.
	Splits []string
	// Gain configures each split's MeasureMetricGain.
	Gain MetricGainOptions
	// Progress receives a line per split measured; nil: none.
	Progress io.Writer
}

// MeasureMetricGainLFW measures the learned metric's gain
// (MeasureMetricGain) on each split: its people with at least
// MetricGainMinPhotos photos named, those with one photo strangers.
// Every split's name is checked before the first split's work.
func MeasureMetricGainLFW(ctx context.Context, src *LFWSource, o MetricBenchOptions) (*MetricBenchReport, error) {
	if src == nil {
		return nil, errors.New("eval: metric bench without an LFW source")
	}
	for _, split := range o.Splits {
		if _, ok := metricSplitFile(split); !ok {
			return nil, fmt.Errorf("eval: no LFW development split %q (train, test)", split)
		}
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	start := time.Now()
	out := &MetricBenchReport{LMNN: o.Gain.LMNN}
	for _, split := range o.Splits {
		file, _ := metricSplitFile(split)
		files := []string{file}
		people, err := src.People(files, func(n int) bool { return n >= MetricGainMinPhotos }, "describing")
		if err != nil {
			return nil, err
		}
		strangers, err := src.People(files, func(n int) bool { return n == 1 }, "describing")
		if err != nil {
			return nil, err
		}
		rep, err := MeasureMetricGain(ctx, WithDescriptors(people), WithDescriptors(strangers), o.Gain)
		if err != nil {
			return nil, err
		}
		out.Splits = append(out.Splits, MetricBenchSplit{Split: split, Report: rep})
		fmt.Fprintf(o.Progress, "%s split measured\n", split)
	}
	out.WallS = time.Since(start).Seconds()
	return out, nil
}
