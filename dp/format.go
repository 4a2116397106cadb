package dp

import (
	"math"
	"strconv"
)

// epsilonDigits is the number of significant digits FormatEpsilon keeps.
const epsilonDigits = 4

// FormatEpsilon formats ε for people: four significant digits, rounded up
// so the printed figure never understates the privacy loss ("8.000",
// "0.0005361", "1.235e+04"), "0" for 0, "∞" for +Inf and "NaN" for NaN.
// A fixed number of decimals would print a small ε such as 0.00054 as
// 0.0005 or 0.0000; every command prints ε through this function.
func FormatEpsilon(eps float64) string {
	switch {
	case math.IsNaN(eps):
		return "NaN"
	case math.IsInf(eps, 1):
		return "∞"
	case math.IsInf(eps, -1):
		return "-∞"
	case eps == 0:
		return "0"
	}
	v := roundUpSignificant(eps, epsilonDigits)
	exp := int(math.Floor(math.Log10(math.Abs(v))))
	if exp < -4 || exp >= epsilonDigits {
		return strconv.FormatFloat(v, 'e', epsilonDigits-1, 64)
	}
	return strconv.FormatFloat(v, 'f', max(epsilonDigits-1-exp, 0), 64)
}

// roundUpSignificant returns the smallest number of n significant digits
// (in decimal) at or above x, as the nearest float64.
func roundUpSignificant(x float64, n int) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'e', n-1, 64), 64)
	if v >= x {
		return v
	}
	// One unit in the n-th significant digit of v, added in decimal.
	exp := int(math.Floor(math.Log10(math.Abs(v))))
	step, _ := strconv.ParseFloat("1e"+strconv.Itoa(exp-n+1), 64)
	u, _ := strconv.ParseFloat(strconv.FormatFloat(v+step, 'e', n-1, 64), 64)
	return u
}
