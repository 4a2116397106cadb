package training

import (
	"bytes"
	"strings"
	"testing"
)

func TestNewStepBenchRefusesBadOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    StepBenchOptions
		want string
	}{
		{"no batch", StepBenchOptions{Batch: 0, Steps: 1, Width: 0.25}, "at least 1"},
		{"no steps", StepBenchOptions{Batch: 1, Steps: 0, Width: 0.25}, "at least 1"},
		{"zero width", StepBenchOptions{Batch: 1, Steps: 1, Width: 0}, "not in (0, 4]"},
		{"wide", StepBenchOptions{Batch: 1, Steps: 1, Width: 4.5}, "not in (0, 4]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewStepBench(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// One step of each kind on every model: positive speeds, the ratio of the
// two, and the head's parameter count (2048→256→128 and the ArcFace
// classes' rows).
func TestStepBenchReportsEveryModel(t *testing.T) {
	var progress bytes.Buffer
	b, err := NewStepBench(StepBenchOptions{Batch: 2, Steps: 1, Width: 0.25, Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := b.Run()
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 2 || rep.Results[0].Input != 64 || rep.Results[1].Input != 112 {
		t.Fatalf("report %+v: want rows for 64 and 112 px and a head", rep)
	}
	for _, r := range append(rep.Results, rep.Head) {
		if !(r.ImagesPerS > 0 && r.DPImagesPerS > 0) || r.DPRatio != r.ImagesPerS/r.DPImagesPerS || r.Batch != 2 || r.Steps != 1 {
			t.Errorf("row %+v: want positive speeds and dp_ratio = images_per_s / dp_images_per_s", r)
		}
	}
	if rep.Head.Input != 0 || !strings.Contains(rep.Head.Model, "agegender") || rep.Head.Params != 2048*256+256+256+256*128+128+128*BenchClasses {
		t.Errorf("head row %+v", rep.Head)
	}
	if n := strings.Count(progress.String(), "\n"); n != 3 {
		t.Errorf("progress has %d lines, want one per model:\n%s", n, progress.String())
	}
}
