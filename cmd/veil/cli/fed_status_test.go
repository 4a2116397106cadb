package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/veil-privacy/veil/fed/fedpb"
)

// The coordinator's status message carries the last evaluation, so a
// remote veil fed status shows it as a local one does.
func TestFedStatusShowsTheLastEvaluation(t *testing.T) {
	st := &fedpb.StatusResponse{Round: 3, ModelVersion: "abcdef0123456789",
		LastEvaluation: &fedpb.Evaluation{Round: 3, ModelVersion: "abcdef0123456789", Accuracy: 0.8125, Threshold: 0.5,
			Pairs: "LFW development pairs", TimeUnixMs: 1700000000000}}
	out := statusFromPB(st)
	want := fedEvaluation{Round: 3, ModelVersion: "abcdef0123456789", Accuracy: 0.8125, Threshold: 0.5, Pairs: "LFW development pairs",
		Time: "2023-11-14T22:13:20Z"}
	if out.LastEvaluation == nil || *out.LastEvaluation != want {
		t.Fatalf("evaluation %+v, want %+v", out.LastEvaluation, want)
	}
	var b bytes.Buffer
	printFedStatus(&env{stdout: &b}, out)
	if !strings.Contains(b.String(), "last evaluation: accuracy 0.8125") {
		t.Errorf("printed status lacks the evaluation:\n%s", b.String())
	}
	if statusFromPB(&fedpb.StatusResponse{}).LastEvaluation != nil {
		t.Error("an evaluation where the coordinator has none")
	}
}
