package asyncsim

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Plot draws Simulate's accuracy against simulated time (left) and
// against bytes exchanged (right), one line per strategy (Irene's
// Fig. 10), and writes a PNG to path.
func Plot(rep *Report, path string) error {
	if ext := strings.ToLower(filepath.Ext(path)); ext != ".png" {
		return fmt.Errorf("asyncsim: plot %s: want a .png file", path)
	}
	if len(rep.Runs) == 0 {
		return errors.New("asyncsim: plot: the report has no runs")
	}
	byTime, byBytes := plot.New(), plot.New()
	byTime.Title.Text = fmt.Sprintf("accuracy against simulated time (client 0 %g× slower)", rep.Slowdown)
	byTime.X.Label.Text = "simulated time (fast client's steps)"
	byBytes.Title.Text = "accuracy against bytes exchanged"
	byBytes.X.Label.Text = "bytes sent and received, all clients (MB)"
	for _, p := range []*plot.Plot{byTime, byBytes} {
		p.Y.Label.Text = "accuracy on held-out faces (%)"
		p.Y.Min = 0
		p.Add(plotter.NewGrid())
	}
	byTime.Legend.Top, byTime.Legend.Left = true, true
	byTime.Legend.XOffs = vg.Points(10)
	for i, r := range rep.Runs {
		var t, b plotter.XYs
		for _, pt := range r.Curve {
			t = append(t, plotter.XY{X: pt.Time, Y: 100 * pt.Accuracy})
			b = append(b, plotter.XY{X: float64(pt.Bytes) / 1e6, Y: 100 * pt.Accuracy})
		}
		for _, d := range []struct {
			p   *plot.Plot
			xys plotter.XYs
		}{{byTime, t}, {byBytes, b}} {
			l, err := plotter.NewLine(d.xys)
			if err != nil {
				return fmt.Errorf("asyncsim: plot: %w", err)
			}
			l.Color = plotutil.Color(i)
			l.Dashes = plotutil.Dashes(i / 7)
			l.Width = vg.Points(1.2)
			d.p.Add(l)
			if d.p == byTime {
				d.p.Legend.Add(r.Name, l)
			}
		}
	}
	img := vgimg.New(12*vg.Inch, 4.5*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 2, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	cs := plot.Align([][]*plot.Plot{{byTime, byBytes}}, tiles, dc)
	byTime.Draw(cs[0][0])
	byBytes.Draw(cs[0][1])
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("asyncsim: plot: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("asyncsim: plot: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("asyncsim: plot: %w", err)
	}
	return nil
}
