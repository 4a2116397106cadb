package cli

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runVeil(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func TestPrivacyEpsilonMNIST(t *testing.T) {
	code, out, errs := runVeil(t, "", "privacy", "epsilon", "--sampling-rate", "0.004266666666666667",
		"--noise-multiplier", "1.1", "--steps", "14062", "--delta", "1e-5", "--mechanism", "gaussian", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rep struct {
		Epsilon float64  `json:"epsilon"`
		Order   *float64 `json:"order"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if math.Abs(rep.Epsilon-2.597) > 0.001 || rep.Order == nil || *rep.Order != 8.1 {
		t.Errorf("MNIST: %s", out)
	}
	code, out, errs = runVeil(t, "", "privacy", "epsilon", "--sampling-rate", "0.004266666666666667",
		"--noise-multiplier", "1.1", "--steps", "14062", "--mechanism", "gaussian", "--accountant", "pld", "--json")
	if code != 0 {
		t.Fatalf("pld exit %d: %s", code, errs)
	}
	var pld struct {
		Epsilon float64  `json:"epsilon"`
		Order   *float64 `json:"order"`
	}
	_ = json.Unmarshal([]byte(out), &pld)
	if !(pld.Epsilon > 1.5 && pld.Epsilon < rep.Epsilon) || pld.Order != nil {
		t.Errorf("PLD: %s", out)
	}
	// Human output.
	code, out, _ = runVeil(t, "", "privacy", "epsilon", "--sampling-rate", "0.01", "--noise-multiplier", "1", "--steps", "100")
	if code != 0 || !strings.Contains(out, "ε = ") || !strings.Contains(out, "order") {
		t.Errorf("human output %q (exit %d)", out, code)
	}
}

func TestPrivacyNoise(t *testing.T) {
	code, out, errs := runVeil(t, "", "privacy", "noise", "--sampling-rate", "0.004266666666666667",
		"--steps", "14062", "--epsilon", "2.597", "--delta", "1e-5", "--mechanism", "gaussian", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rep struct {
		NoiseMultiplier float64 `json:"noise_multiplier"`
		Epsilon         float64 `json:"epsilon"`
	}
	_ = json.Unmarshal([]byte(out), &rep)
	if math.Abs(rep.NoiseMultiplier-1.1) > 0.002 || rep.Epsilon > 2.597 {
		t.Errorf("noise: %s", out)
	}
}

func TestPrivacyBadInput(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"q above one", []string{"privacy", "epsilon", "--sampling-rate", "1.5", "--noise-multiplier", "1", "--steps", "3"}, "--sampling-rate"},
		{"q zero", []string{"privacy", "epsilon", "--sampling-rate", "0", "--noise-multiplier", "1", "--steps", "3"}, "--sampling-rate"},
		{"sigma zero", []string{"privacy", "epsilon", "--sampling-rate", "0.1", "--noise-multiplier", "0", "--steps", "3"}, "--noise-multiplier"},
		{"sigma NaN", []string{"privacy", "epsilon", "--sampling-rate", "0.1", "--noise-multiplier", "NaN", "--steps", "3"}, "--noise-multiplier"},
		{"negative steps", []string{"privacy", "epsilon", "--sampling-rate", "0.1", "--noise-multiplier", "1", "--steps", "-4"}, "--steps must be at least 1"},
		{"delta one", []string{"privacy", "epsilon", "--sampling-rate", "0.1", "--noise-multiplier", "1", "--steps", "3", "--delta", "1"}, "delta"},
		{"pld delta", []string{"privacy", "epsilon", "--sampling-rate", "0.1", "--noise-multiplier", "1", "--steps", "3", "--delta", "2", "--accountant", "pld"}, "delta"},
		{"accountant", []string{"privacy", "epsilon", "--sampling-rate", "0.1", "--noise-multiplier", "1", "--steps", "3", "--accountant", "moments"}, "accountant"},
		{"missing flags", []string{"privacy", "epsilon"}, "required"},
		{"noise target", []string{"privacy", "noise", "--sampling-rate", "0.1", "--steps", "3", "--epsilon", "-1"}, "epsilon"},
		{"dplc missing file", []string{"privacy", "dplc", "/nonexistent/centres.json"}, "cannot open /nonexistent/centres.json"},
		{"dplc bad margin", []string{"privacy", "dplc", "--margin", "0", "-"}, "margin"},
		{"pate bad gamma", []string{"privacy", "pate", "--gamma", "0", "-"}, "--gamma must be a positive number"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errs := runVeil(t, "[[1,0],[0,1]]", tc.args...)
			if code == 0 {
				t.Fatal("exit 0")
			}
			if !strings.Contains(errs, tc.want) {
				t.Errorf("stderr %q does not mention %q", errs, tc.want)
			}
		})
	}
}

func TestPrivacyDPLC(t *testing.T) {
	// Two tight groups of 2-d unit vectors around (1,0) and (0,1).
	var rows [][]float64
	for i := range 30 {
		a := 0.01 * float64(i%5)
		rows = append(rows, []float64{math.Cos(a), math.Sin(a)})
	}
	for i := range 10 {
		a := math.Pi/2 + 0.01*float64(i%5)
		rows = append(rows, []float64{math.Cos(a), math.Sin(a)})
	}
	data, _ := json.Marshal(rows)
	dir := t.TempDir()
	path := filepath.Join(dir, "centres.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	ledgers := filepath.Join(dir, "ledgers")
	ledger := filepath.Join(ledgers, "faces.identity.ledger")
	type report struct {
		PrivacyUnit string `json:"privacy_unit"`
		Centres     int
		Clusters    []struct {
			Center []float64
			Mass   float64
			Size   int
		}
		Epsilon           float64
		Delta             float64
		AccountantEpsilon float64 `json:"accountant_epsilon"`
		Ledger            struct {
			File          string
			Dataset       string
			SpentEpsilon  float64 `json:"spent_epsilon"`
			BudgetEpsilon float64 `json:"budget_epsilon"`
		}
	}
	dplc := func(stdin string, args ...string) (int, string, string) {
		t.Helper()
		return runVeil(t, stdin, append([]string{"privacy", "dplc", "--margin", "0.3", "--clusters", "2", "--dataset", "faces", "--ledger-dir", ledgers}, args...)...)
	}
	code, out, errs := dplc("", "--epsilon", "1", "--delta", "1e-5", "--budget-epsilon", "2.5", "--budget-delta", "1e-5", "--diagnostics", "--json", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rep report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if rep.PrivacyUnit != "identity" || rep.Centres != 40 || len(rep.Clusters) != 2 || rep.Epsilon != 1 || rep.Delta != 1e-5 || !(rep.AccountantEpsilon <= 1) {
		t.Fatalf("report: %s", out)
	}
	for _, c := range rep.Clusters {
		if n := math.Hypot(c.Center[0], c.Center[1]); math.Abs(n-1) > 1e-5 || !(c.Mass > 0) {
			t.Errorf("centre %v, mass %g", c.Center, c.Mass)
		}
	}
	if rep.Ledger.Dataset != "faces" || rep.Ledger.File != ledger || !(rep.Ledger.SpentEpsilon > 0.9 && rep.Ledger.SpentEpsilon <= 1) || rep.Ledger.BudgetEpsilon != 2.5 {
		t.Errorf("ledger after one run: %+v", rep.Ledger)
	}
	if st, err := os.Stat(ledger); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("ledger file: %v %v", st, err)
	}
	first := rep.Ledger.SpentEpsilon

	// Second run from standard input, same data set: charged on top; without
	// --diagnostics nothing computed from the data without noise is printed.
	code, out, errs = dplc(string(data), "--json", "-")
	if code != 0 {
		t.Fatalf("stdin: exit %d: %s", code, errs)
	}
	if strings.Contains(out, `"size"`) || strings.Contains(out, `"centres"`) || strings.Contains(out, "cosine") {
		t.Errorf("private diagnostics printed without --diagnostics: %s", out)
	}
	rep = report{}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if !(rep.Ledger.SpentEpsilon > first && rep.Ledger.SpentEpsilon <= 2*first) {
		t.Errorf("second run: spent %g after %g", rep.Ledger.SpentEpsilon, first)
	}

	// A run past the budget is refused: nothing released, ledger unchanged.
	before, _ := os.ReadFile(ledger)
	code, out, errs = dplc("", "--epsilon", "2", "--json", path)
	if code == 0 || out != "" || !strings.Contains(errs, "refusing to release") || !strings.Contains(errs, "budget") {
		t.Errorf("over budget: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if after, _ := os.ReadFile(ledger); !bytes.Equal(before, after) {
		t.Error("a refused run changed the ledger")
	}
	// Raising the budget is refused now that the data set has spent (the
	// old code accepted it and released); the owner's reset, with a
	// reason, lets the run through and stays in the history.
	code, out, errs = dplc("", "--epsilon", "2", "--budget-epsilon", "10", "--budget-delta", "1e-5", path)
	if code == 0 || out != "" || !strings.Contains(errs, "veil privacy ledger reset") {
		t.Errorf("raising the budget after spending: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if after, _ := os.ReadFile(ledger); !bytes.Equal(before, after) {
		t.Error("a refused raise changed the ledger")
	}
	if code, _, errs := runVeil(t, "", "privacy", "ledger", "reset", "faces", "--ledger-dir", ledgers, "--budget-epsilon", "10", "--budget-delta", "1e-5"); code == 0 || !strings.Contains(errs, "--reason") {
		t.Errorf("a reset without a reason: exit %d, %q", code, errs)
	}
	if code, _, errs := runVeil(t, "", "privacy", "ledger", "reset", "faces", "--ledger-dir", ledgers, "--reason", "test: more budget",
		"--budget-epsilon", "10", "--budget-delta", "1e-5", "--keep-charges"); code != 0 {
		t.Fatalf("reset: exit %d: %s", code, errs)
	}
	code, _, errs = dplc("", "--epsilon", "2", path)
	if code != 0 {
		t.Errorf("after the reset: exit %d: %s", code, errs)
	}
	code, out, errs = runVeil(t, "", "privacy", "ledger", "show", "faces", "--ledger-dir", ledgers, "--json")
	if code != 0 {
		t.Fatalf("ledger show: exit %d: %s", code, errs)
	}
	var shown struct {
		Ledgers []struct {
			Budget       struct{ Epsilon float64 }
			WorstEpsilon float64 `json:"worst_epsilon"`
			History      []struct {
				Kind, Note string
				Members    int
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &shown); err != nil || len(shown.Ledgers) != 1 {
		t.Fatalf("ledger show: %v: %s", err, out)
	}
	var kinds []string
	for _, h := range shown.Ledgers[0].History {
		kinds = append(kinds, h.Kind+":"+h.Note)
	}
	if got := strings.Join(kinds, ","); got != "budget:,charge:veil privacy dplc,charge:veil privacy dplc,reset:test: more budget,charge:veil privacy dplc" ||
		shown.Ledgers[0].Budget.Epsilon != 10 || !(shown.Ledgers[0].WorstEpsilon > 2*first) {
		t.Errorf("ledger show: history %s, %s", got, out)
	}

	for _, tc := range []struct {
		name, stdin string
		args        []string
		want        string
	}{
		{"no data set", "", []string{path}, "--dataset is required"},
		{"old --ledger", "", []string{"--dataset", "faces", "--ledger", filepath.Join(dir, "ledger.json"), path}, "--ledger FILE is gone"},
		{"bad data set name", "", []string{"--dataset", "../x", path}, "--dataset"},
		{"no budget", "", []string{"--ledger-dir", ledgers, "--dataset", "other", path}, "no budget"},
		{"half a budget", "", []string{"--ledger-dir", ledgers, "--dataset", "other", "--budget-epsilon", "3", path}, "--budget-delta"},
		{"ragged", `[[1,0],[0]]`, []string{"--ledger-dir", ledgers, "--dataset", "x", "-"}, "centre 1"},
		{"too many clusters", "", []string{"--ledger-dir", ledgers, "--dataset", "faces", "--clusters", "17", path}, "clusters"},
		{"members not one per centre", "", []string{"--ledger-dir", ledgers, "--dataset", "faces", "--members", path, path}, "one name per centre"},
	} {
		code, _, errs := runVeil(t, tc.stdin, append([]string{"privacy", "dplc"}, tc.args...)...)
		if code == 0 || !strings.Contains(errs, tc.want) {
			t.Errorf("%s: exit %d, stderr %q does not mention %q", tc.name, code, errs, tc.want)
		}
	}
	// A tampered ledger is refused, naming the reason.
	b, _ := os.ReadFile(ledger)
	if err := os.WriteFile(ledger, bytes.Replace(b, []byte(`"epsilon":10`), []byte(`"epsilon":99`), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := dplc("", path); code == 0 || !strings.Contains(errs, "MAC") {
		t.Errorf("tampered ledger: exit %d, %q", code, errs)
	}
}

func TestPrivacyPATE(t *testing.T) {
	hists := `[[45,3,2],[40,5,5],[30,10,10],[17,16,17]]`
	code, out, errs := runVeil(t, hists, "privacy", "pate", "--gamma", "0.2", "--delta", "1e-5", "--labels", "--json", "-")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rep struct {
		Answers                  int     `json:"answers"`
		Epsilon                  float64 `json:"epsilon"`
		DataIndependentEpsilon   float64 `json:"data_independent_epsilon"`
		StrongCompositionEpsilon float64 `json:"strong_composition_epsilon"`
		Labels                   []int   `json:"labels"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if rep.Answers != 4 || len(rep.Labels) != 4 || !(rep.Epsilon <= rep.DataIndependentEpsilon) {
		t.Errorf("pate: %s", out)
	}
	// Strong composition: 4Tγ² + 2γ√(2T ln(1/δ)) with T = 4, γ = 0.2.
	if want := 4*4*0.04 + 0.4*math.Sqrt(8*math.Log(1e5)); math.Abs(rep.StrongCompositionEpsilon-want) > 1e-9 {
		t.Errorf("strong composition %g, want %g", rep.StrongCompositionEpsilon, want)
	}
	code, out, _ = runVeil(t, hists, "privacy", "pate", "-")
	if code != 0 || !strings.Contains(out, "data-dependent") {
		t.Errorf("human output %q", out)
	}
	code, _, errs = runVeil(t, `[[1]]`, "privacy", "pate", "-")
	if code == 0 || !strings.Contains(errs, "histogram 0") {
		t.Errorf("one-class histogram: exit %d, %q", code, errs)
	}
}

// TestPrivacyMessagesAndUnits: help shows no "(default NaN)", errors name
// flags that exist and no internal identifiers, small ε works, an
// unreachable ε is explained, and every ε report names its privacy unit.
func TestPrivacyMessagesAndUnits(t *testing.T) {
	for _, sub := range []string{"epsilon", "noise"} {
		code, out, errs := runVeil(t, "", "privacy", sub, "--help")
		if code != 0 {
			t.Fatalf("%s --help: exit %d: %s", sub, code, errs)
		}
		if strings.Contains(out, "NaN") || !strings.Contains(out, "(required)") || !strings.Contains(out, "--unit") {
			t.Errorf("%s --help:\n%s", sub, out)
		}
	}
	internal := []string{"subsampled_gaussian", "count (steps)", "raise the interval", "lower the tail mass", "dp: dp:"}
	errCases := []struct {
		name string
		args []string
		want string
	}{
		{"zero steps", []string{"epsilon", "--sampling-rate", "0.1", "--noise-multiplier", "1", "--steps", "0"}, "--steps must be at least 1"},
		{"noise zero steps", []string{"noise", "--sampling-rate", "0.1", "--epsilon", "1", "--steps", "0"}, "--steps must be at least 1"},
		{"pld too fine", []string{"epsilon", "--sampling-rate", "0.5", "--noise-multiplier", "0.3", "--steps", "3", "--mechanism", "gaussian", "--accountant", "pld", "--pld-interval", "1e-6"}, "--pld-interval"},
		{"unreachable ε", []string{"noise", "--sampling-rate", "0.01", "--steps", "1000", "--epsilon", "0.0001"}, "cannot be reached"},
		{"δ of one", []string{"noise", "--sampling-rate", "0.01", "--steps", "1000", "--epsilon", "1", "--delta", "1"}, "between 0 and 1"},
		{"bad unit", []string{"epsilon", "--sampling-rate", "0.1", "--noise-multiplier", "1", "--steps", "3", "--unit", "face"}, "--unit must be identity or example"},
		{"not a number", []string{"epsilon", "--sampling-rate", "ten", "--noise-multiplier", "1", "--steps", "3"}, "not a number"},
	}
	for _, tc := range errCases {
		code, _, errs := runVeil(t, "", append([]string{"privacy"}, tc.args...)...)
		if code == 0 || !strings.Contains(errs, tc.want) {
			t.Errorf("%s: exit %d, stderr %q does not mention %q", tc.name, code, errs, tc.want)
		}
		for _, bad := range internal {
			if strings.Contains(errs, bad) {
				t.Errorf("%s: stderr %q contains %q", tc.name, errs, bad)
			}
		}
	}
	// Small ε is a normal request.
	for _, target := range []string{"0.1", "0.05", "0.01"} {
		code, out, errs := runVeil(t, "", "privacy", "noise", "--sampling-rate", "0.01", "--steps", "1000", "--epsilon", target, "--json")
		if code != 0 {
			t.Fatalf("ε = %s: exit %d: %s", target, code, errs)
		}
		var rep struct {
			Epsilon       float64 `json:"epsilon"`
			TargetEpsilon float64 `json:"target_epsilon"`
			PrivacyUnit   string  `json:"privacy_unit"`
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Epsilon > rep.TargetEpsilon || rep.Epsilon < 0.99*rep.TargetEpsilon || rep.PrivacyUnit != "identity" {
			t.Errorf("ε = %s: %s", target, out)
		}
	}
	// Every ε report states its unit; --unit example is reported as such.
	units := []struct {
		args  []string
		stdin string
		want  string
	}{
		{[]string{"epsilon", "--sampling-rate", "0.01", "--noise-multiplier", "1", "--steps", "10", "--json"}, "", "identity"},
		{[]string{"epsilon", "--sampling-rate", "0.01", "--noise-multiplier", "1", "--steps", "10", "--mechanism", "gaussian", "--accountant", "pld", "--unit", "example", "--json"}, "", "example"},
		{[]string{"noise", "--sampling-rate", "0.01", "--steps", "10", "--epsilon", "2", "--unit", "example", "--json"}, "", "example"},
		{[]string{"pate", "--json", "-"}, `[[5,1],[3,3]]`, "identity"},
	}
	for _, u := range units {
		code, out, errs := runVeil(t, u.stdin, append([]string{"privacy"}, u.args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", u.args, code, errs)
		}
		var rep struct {
			PrivacyUnit *string `json:"privacy_unit"`
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		if rep.PrivacyUnit == nil || *rep.PrivacyUnit != u.want {
			t.Errorf("%v: privacy_unit missing or wrong: %s", u.args, out)
		}
	}
	code, out, _ := runVeil(t, "", "privacy", "epsilon", "--sampling-rate", "0.01", "--noise-multiplier", "1", "--steps", "10", "--unit", "example")
	if code != 0 || !strings.Contains(out, "per example") {
		t.Errorf("human output %q", out)
	}
}
