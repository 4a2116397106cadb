package dp

import (
	"math"
	"strconv"
	"testing"
)

func TestFormatEpsilon(t *testing.T) {
	for _, c := range []struct {
		in   float64
		want string
	}{
		{8, "8.000"},
		{7.999972223019207, "8.000"},
		{7.799460560622491, "7.800"},
		{0.0005360882487176327, "0.0005361"},
		{0.00054, "0.0005400"},
		{0.1234, "0.1234"},
		{0.12341, "0.1235"}, // rounded up, never down
		{1.0001, "1.001"},
		{9.9999, "10.00"},
		{12.5, "12.50"},
		{123.4, "123.4"},
		{1234, "1234"},
		{12345, "1.235e+04"},
		{3e-7, "3.000e-07"},
		{0, "0"},
		{math.Inf(1), "∞"},
		{math.NaN(), "NaN"},
	} {
		if got := FormatEpsilon(c.in); got != c.want {
			t.Errorf("FormatEpsilon(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestFormatEpsilonNeverBelow checks that the printed ε is never below
// the true one, over many values of every magnitude.
func TestFormatEpsilonNeverBelow(t *testing.T) {
	src := NewSeededSource([32]byte{7})
	for range 20000 {
		x := math.Exp(40*src.Float64() - 20)
		s := FormatEpsilon(x)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("FormatEpsilon(%v) = %q: %v", x, s, err)
		}
		if v < x || v > x*(1+1.01e-3) {
			t.Fatalf("FormatEpsilon(%v) = %q: not the 4-digit round-up", x, s)
		}
	}
}
