package dp

import (
	"math"
	"testing"
)

// TestScheduleAccountsEachMechanism: a Schedule gives what the
// accountant of its mechanism gives (the continuous Gaussian, the
// discrete one, the discrete one on DP-SGD's grid), its noise multiplier
// meets the target, and bad settings are refused.
func TestScheduleAccountsEachMechanism(t *testing.T) {
	const q, sigma, steps, delta = 0.1268, 1.3242, 160, 1e-5
	grid := SGDConfig{ClipNorm: 1, NoiseMultiplier: sigma, SamplingRate: q, ExpectedBatchSize: 1, Dimension: 557824}
	wantGrid, _, err := SGDEpsilon(grid, steps, delta)
	if err != nil {
		t.Fatal(err)
	}
	wantGauss, _, err := ScheduleEpsilon(q, sigma, steps, delta)
	if err != nil {
		t.Fatal(err)
	}
	wantDisc, _, err := DiscreteScheduleEpsilon(q, sigma, steps, delta)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		s    Schedule
		want float64
	}{
		{Schedule{Mechanism: MechanismGaussian}, wantGauss},
		{Schedule{Mechanism: MechanismDiscrete}, wantDisc},
		{Schedule{Mechanism: MechanismDiscrete, Dimension: 557824, Clip: 1}, wantGrid},
	} {
		eps, order, mu, err := tc.s.Epsilon(q, sigma, steps, delta)
		if err != nil || eps != tc.want || !(order > 1) || (tc.s.Dimension > 0) != (mu > 0) {
			t.Errorf("%+v: ε %g (order %g, effective σ %g), %v; want ε %g", tc.s, eps, order, mu, err, tc.want)
		}
		// The noise for ε = 8 meets it, within the calibration's relative 1e-4.
		n, err := tc.s.NoiseMultiplier(q, steps, 8, delta)
		if err != nil {
			t.Fatal(err)
		}
		got, _, _, err := tc.s.Epsilon(q, n, steps, delta)
		if err != nil || got > 8 || math.Abs(got-8) > 0.01 {
			t.Errorf("%+v: σ %g gives ε %g, want just at most 8 (%v)", tc.s, n, got, err)
		}
	}
	for _, bad := range []Schedule{{Mechanism: "laplace"}, {Mechanism: MechanismGaussian, Dimension: 10, Clip: 1},
		{Mechanism: MechanismDiscrete, Dimension: 10}, {Mechanism: MechanismDiscrete, Dimension: -1}} {
		if _, _, _, err := bad.Epsilon(q, sigma, steps, delta); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}
