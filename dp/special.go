package dp

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// logAdd returns log(exp(a) + exp(b)) without overflow.
func logAdd(a, b float64) float64 {
	if a < b {
		a, b = b, a
	}
	if math.IsInf(b, -1) {
		return a
	}
	return a + math.Log1p(math.Exp(b-a))
}

// logSub returns log(exp(a) - exp(b)) for a >= b; -Inf when equal.
func logSub(a, b float64) float64 {
	if math.IsInf(b, -1) {
		return a
	}
	if a <= b {
		return math.Inf(-1)
	}
	d := a - b
	if d > 700 {
		return a
	}
	return math.Log(math.Expm1(d)) + b
}

// logNdtr returns log Φ(x), the log of the standard normal CDF, accurately
// also far in the lower tail.
func logNdtr(x float64) float64 {
	if x > -20 {
		return math.Log(0.5 * math.Erfc(-x/math.Sqrt2))
	}
	// Asymptotic series: Φ(x) = φ(x)/(-x) · (1 - 1/x² + 3/x⁴ - 15/x⁶ + 105/x⁸).
	x2 := x * x
	s := 1 - 1/x2 + 3/(x2*x2) - 15/(x2*x2*x2) + 105/(x2*x2*x2*x2)
	return -x2/2 - math.Log(-x) - 0.5*math.Log(2*math.Pi) + math.Log(s)
}

// logErfc returns log erfc(x), accurate for large positive x.
func logErfc(x float64) float64 {
	return math.Ln2 + logNdtr(-x*math.Sqrt2)
}

// normCDF returns Φ(x).
func normCDF(x float64) float64 { return 0.5 * math.Erfc(-x/math.Sqrt2) }

// normSF returns 1 - Φ(x) accurately in the upper tail.
func normSF(x float64) float64 { return 0.5 * math.Erfc(x/math.Sqrt2) }

// RegIncBeta returns the regularised incomplete beta function I_x(a, b)
// for a, b > 0 and x in [0, 1], by the continued fraction of Lentz's method.
func RegIncBeta(x, a, b float64) (float64, error) {
	switch {
	case math.IsNaN(x) || math.IsNaN(a) || math.IsNaN(b):
		return 0, errors.New("dp: incomplete beta: NaN argument")
	case a <= 0 || b <= 0:
		return 0, fmt.Errorf("dp: incomplete beta: shape parameters must be positive, got a=%g b=%g", a, b)
	case x < 0 || x > 1:
		return 0, fmt.Errorf("dp: incomplete beta: x=%g outside [0, 1]", x)
	case x == 0:
		return 0, nil
	case x == 1:
		return 1, nil
	}
	la, _ := math.Lgamma(a)
	lb, _ := math.Lgamma(b)
	lab, _ := math.Lgamma(a + b)
	front := math.Exp(lab - la - lb + a*math.Log(x) + b*math.Log1p(-x))
	if x < (a+1)/(a+b+2) {
		cf, err := betaCF(x, a, b)
		return front * cf / a, err
	}
	cf, err := betaCF(1-x, b, a)
	return 1 - front*cf/b, err
}

// betaCF evaluates the continued fraction of the incomplete beta function.
func betaCF(x, a, b float64) (float64, error) {
	const tiny = 1e-300
	const eps = 1e-15
	qab, qap, qam := a+b, a+1, a-1
	c, d := 1.0, 1-qab*x/qap
	if math.Abs(d) < tiny {
		d = tiny
	}
	d = 1 / d
	h := d
	for m := 1; m <= 10000; m++ {
		fm := float64(m)
		m2 := 2 * fm
		aa := fm * (b - fm) * x / ((qam + m2) * (a + m2))
		d = 1 + aa*d
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = 1 + aa/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		h *= d * c
		aa = -(a + fm) * (qab + fm) * x / ((a + m2) * (qap + m2))
		d = 1 + aa*d
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = 1 + aa/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		del := d * c
		h *= del
		if math.Abs(del-1) < eps {
			return h, nil
		}
	}
	return h, errors.New("dp: incomplete beta: continued fraction did not converge")
}

// checkFinite returns an error naming the parameter if v is NaN or infinite.
func checkFinite(name string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Errorf("dp: %s must be a finite number, got %g", name, v)
	}
	return nil
}

// checkDelta validates δ in (0, 1).
func checkDelta(delta float64) error {
	if math.IsNaN(delta) || delta <= 0 || delta >= 1 {
		return fmt.Errorf("dp: δ must be strictly between 0 and 1 (it is the probability that the ε guarantee fails; 1e-5 or below is usual), got %g", delta)
	}
	return nil
}

// checkEpsilon validates ε > 0 and finite.
func checkEpsilon(eps float64) error {
	if err := checkFinite("epsilon", eps); err != nil {
		return err
	}
	if eps <= 0 {
		return fmt.Errorf("dp: epsilon must be positive, got %g", eps)
	}
	return nil
}

// checkPositive validates a finite, strictly positive parameter.
func checkPositive(name string, v float64) error {
	if err := checkFinite(name, v); err != nil {
		return err
	}
	if v <= 0 {
		return fmt.Errorf("dp: %s must be positive, got %g", name, v)
	}
	return nil
}

// contextError adds context to an error of this package without repeating
// its "dp: " prefix ("dp: ledger: principal "a": sampling rate must be …"
// rather than "dp: ledger: …: dp: sampling rate …"). It unwraps to err.
type contextError struct {
	ctx string
	err error
}

func (e *contextError) Error() string {
	return "dp: " + e.ctx + ": " + strings.TrimPrefix(e.err.Error(), "dp: ")
}

func (e *contextError) Unwrap() error { return e.err }

// inContext returns err with the context ctx (nil stays nil).
func inContext(ctx string, err error) error {
	if err == nil {
		return nil
	}
	return &contextError{ctx: ctx, err: err}
}
