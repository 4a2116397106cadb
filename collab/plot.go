package collab

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// ErrPlotFormat is CheckPlotPath's error: Plot writes only PNG and SVG.
var ErrPlotFormat = errors.New("want a .png or .svg file")

// CheckPlotPath says whether Plot can write path: its extension (in any
// case) must be .png or .svg. A command checks its flag with it before the
// experiment's long run.
func CheckPlotPath(path string) error {
	if ext := strings.ToLower(filepath.Ext(path)); ext != ".png" && ext != ".svg" {
		return ErrPlotFormat
	}
	return nil
}

// Plot draws the held-out users' coverage (bars) per method with 1 and 3
// named photos, at the report's main goal, the strangers' rate of each in
// the legend's second group, and writes it to path (its extension, .png or
// .svg, picks the format).
func Plot(rep *Report, path string) error {
	if err := CheckPlotPath(path); err != nil {
		return fmt.Errorf("collab: plot %s: %w", path, err)
	}
	p := plot.New()
	p.Title.Text = "Held-out users' suggestions (coverage at precision ≥ 99.5%, strangers ≤ plain's)"
	p.Y.Label.Text = "coverage / strangers' rate (%)"
	p.Y.Min, p.Y.Max = 0, 118 // room for the legend above the bars
	w := vg.Points(9)
	series := []struct {
		label    string
		value    func(*MethodReport) float64
		offset   float64
		colorIdx int
	}{
		{"coverage, 1 named", func(r *MethodReport) float64 { return 100 * r.Named1.Coverage }, -1.5, 0},
		{"coverage, 3 named", func(r *MethodReport) float64 { return 100 * r.Named3.Coverage }, -0.5, 1},
		{"strangers, 1 named", func(r *MethodReport) float64 { return 100 * r.Named1.StrangersRate }, 0.5, 2},
		{"strangers, 3 named", func(r *MethodReport) float64 { return 100 * r.Named3.StrangersRate }, 1.5, 3},
	}
	colors := []struct{ r, g, b uint8 }{{0x1f, 0x77, 0xb4}, {0xae, 0xc7, 0xe8}, {0xd6, 0x27, 0x28}, {0xff, 0x98, 0x96}}
	methods := Methods
	for _, m := range PublicMethods {
		if _, ok := rep.Methods[m]; ok {
			methods = append(slices.Clone(methods), m)
		}
	}
	for _, s := range series {
		var v plotter.Values
		for _, m := range methods {
			r, ok := rep.Methods[m]
			if !ok {
				return fmt.Errorf("collab: plot: the report has no method %s", m)
			}
			v = append(v, s.value(r))
		}
		b, err := plotter.NewBarChart(v, w)
		if err != nil {
			return fmt.Errorf("collab: plot: %w", err)
		}
		c := colors[s.colorIdx]
		b.Color = rgb(c.r, c.g, c.b)
		b.LineStyle.Width = 0
		b.Offset = vg.Length(s.offset) * w
		p.Add(b)
		p.Legend.Add(s.label, b)
	}
	p.Legend.Top = true
	p.Legend.Left = false
	p.NominalX(methods...)
	if err := p.Save(vg.Length(1.2+1.4*float64(len(methods)))*vg.Inch, 4.5*vg.Inch, path); err != nil {
		return fmt.Errorf("collab: plot: %w", err)
	}
	return nil
}

func rgb(r, g, b uint8) color.RGBA { return color.RGBA{R: r, G: g, B: b, A: 255} }

// PlotNoisy draws NoisyTags' accuracy against the fraction of wrong tags,
// one line per α (Irene's Fig. 7), the clean-tag accuracy as a dashed
// line, and writes it to path (.png or .svg).
func PlotNoisy(rep *NoisyReport, path string) error {
	if err := CheckPlotPath(path); err != nil {
		return fmt.Errorf("collab: plot %s: %w", path, err)
	}
	p := plot.New()
	p.Title.Text = "Noisy bootstrapping: φ's accuracy on held-out faces of the training identities"
	p.X.Label.Text = "fraction of wrong tags (%)"
	p.Y.Label.Text = "accuracy (%)"
	p.Y.Min, p.Y.Max = 0, 125 // room for the legend above the lines
	var alphas []float64
	byAlpha := map[float64]plotter.XYs{}
	minX, maxX := math.Inf(1), math.Inf(-1)
	for _, c := range rep.Cells {
		if _, ok := byAlpha[c.Alpha]; !ok {
			alphas = append(alphas, c.Alpha)
		}
		byAlpha[c.Alpha] = append(byAlpha[c.Alpha], plotter.XY{X: 100 * c.Fraction, Y: 100 * c.Accuracy})
		minX, maxX = math.Min(minX, 100*c.Fraction), math.Max(maxX, 100*c.Fraction)
	}
	if len(alphas) == 0 {
		return errors.New("collab: plot: the report has no cells")
	}
	for i, a := range alphas {
		l, s, err := plotter.NewLinePoints(byAlpha[a])
		if err != nil {
			return fmt.Errorf("collab: plot: %w", err)
		}
		l.Color = plotutil.Color(i)
		s.Color = plotutil.Color(i)
		s.Shape = plotutil.Shape(i)
		p.Add(l, s)
		p.Legend.Add(fmt.Sprintf("α = %.2f", a), l, s)
	}
	clean, err := plotter.NewLine(plotter.XYs{{X: minX, Y: 100 * rep.CleanAccuracy}, {X: maxX, Y: 100 * rep.CleanAccuracy}})
	if err != nil {
		return fmt.Errorf("collab: plot: %w", err)
	}
	clean.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	clean.Color = rgb(0x80, 0x80, 0x80)
	p.Add(clean)
	p.Legend.Add("clean tags, α = 1", clean)
	p.Legend.Top = true
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	if err := p.Save(7*vg.Inch, 4.5*vg.Inch, path); err != nil {
		return fmt.Errorf("collab: plot: %w", err)
	}
	return nil
}
