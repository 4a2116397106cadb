package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/training"
)

func TestBenchTrainReportsEveryModel(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main([]string{"bench", "train", "--steps", "1", "--batch", "2", "--json"}, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var rep struct {
		Results []training.StepBenchResult `json:"results"`
		Head    *training.StepBenchResult  `json:"head"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 2 || rep.Results[0].Input != 64 || rep.Results[1].Input != 112 || rep.Head == nil {
		t.Fatalf("report %s: want rows for 64 and 112 px and a head", out.String())
	}
	for _, r := range append(rep.Results, *rep.Head) {
		if !(r.ImagesPerS > 0 && r.DPImagesPerS > 0) || r.DPRatio != r.ImagesPerS/r.DPImagesPerS || r.Batch != 2 || r.Steps != 1 {
			t.Errorf("row %+v: want positive speeds and dp_ratio = images_per_s / dp_images_per_s", r)
		}
	}
	if rep.Head.Input != 0 || !strings.Contains(rep.Head.Model, "agegender") || rep.Head.Params != 2048*256+256+256+256*128+128+128*training.BenchClasses {
		t.Errorf("head row %+v", *rep.Head)
	}
}
