package eval

import (
	"fmt"
	"math"

	"github.com/veil-privacy/veil/face"
	"github.com/veil-privacy/veil/imaging"
)

// PhotoKindNames are the kinds of photo the detection benchmark reports
// its misses by, in report order. A photo may be of several kinds; "plain"
// is a photo of none of the others; "sides" marks the crops of
// SideCrops.
var PhotoKindNames = []string{"plain", "grey-photo", "dark", "bright", "low-contrast", "blurred", "small", "tilted", "turned", SideSet}

// The kinds' thresholds. The pixel measures are taken in the face's box as
// LFW places it (face.FallbackBox), on BT.601 luma; the pose measures on
// the 68 landmarks the landmark network puts in that box (the network
// finds the face's points in a box about the face's size, whether or not a
// detector found it). The thresholds were set on LFW's development
// training photos (every 6th, 574) at about the 5th or 95th percentile of
// each measure (on those photos: luma mean p5 92.9, p95 157.9; luma
// standard deviation p5 28.6; Laplacian p5 4.33; eye distance p5 0.144;
// |roll| p95 5.7°; |nose - 0.5| p95 0.208), so that each kind holds the
// few most extreme photos of that measure; they were not changed after
// the test photos were measured. Greyscale photos are rare in LFW (2 of
// the 574 at chroma below 4; the 2nd percentile is 16.6), hence the grey
// copies.
const (
	// kindGreyChroma: mean of max(R,G,B) - min(R,G,B) over the photo
	// below this is a greyscale (or toned monochrome) photo.
	kindGreyChroma = 4.0
	// kindDark, kindBright: mean luma of the face box below / above.
	kindDark   = 90.0
	kindBright = 160.0
	// kindLowContrast: standard deviation of the face box's luma below.
	kindLowContrast = 28.0
	// kindBlurred: mean absolute 4-neighbour Laplacian of the face box's
	// luma below.
	kindBlurred = 4.3
	// kindSmall: distance between the eye centres below this fraction of
	// the photo's shorter side.
	kindSmall = 0.145
	// kindTilted: the eye line's angle above this many degrees.
	kindTilted = 5.5
	// kindTurned: the nose tip's position between the eye centres (0 at
	// the left eye, 1 at the right; 0.5 frontal) further than this from
	// 0.5.
	kindTurned = 0.2
)

// PhotoMeasures are the quantities PhotoKinds compares with its
// thresholds.
type PhotoMeasures struct {
	Chroma, Mean, Std, Laplacian float64
	EyeDist, Roll, Nose          float64
}

// MeasurePhoto takes PhotoKinds' measures of img, running p's landmark
// network on face.FallbackBox (p.Complete: with descriptors or age/gender
// configured, those run too).
func MeasurePhoto(p *face.Pipeline, img *imaging.RGB) (PhotoMeasures, error) {
	var m PhotoMeasures
	if img.W < 3 || img.H < 3 {
		return m, fmt.Errorf("eval: photo of %dx%d pixels is too small to measure", img.W, img.H)
	}
	var chroma float64
	for i := 0; i+2 < len(img.Pix); i += 3 {
		r, g, b := img.Pix[i], img.Pix[i+1], img.Pix[i+2]
		chroma += float64(max(r, g, b) - min(r, g, b))
	}
	m.Chroma = chroma / float64(img.W*img.H)
	box := face.FallbackBox(img.W, img.H)
	x0, y0 := max(int(box.X), 1), max(int(box.Y), 1)
	x1, y1 := min(int(box.X+box.Width), img.W-1), min(int(box.Y+box.Height), img.H-1)
	luma := func(x, y int) float64 {
		r, g, b := img.At(x, y)
		return 0.299*float64(r) + 0.587*float64(g) + 0.114*float64(b)
	}
	var n, sum, sum2, lap float64
	for y := y0; y < y1; y++ {
		for x := x0; x < x1; x++ {
			v := luma(x, y)
			sum += v
			sum2 += v * v
			lap += math.Abs(4*v - luma(x-1, y) - luma(x+1, y) - luma(x, y-1) - luma(x, y+1))
			n++
		}
	}
	if n == 0 {
		return m, fmt.Errorf("eval: photo of %dx%d pixels has an empty face box", img.W, img.H)
	}
	m.Mean = sum / n
	m.Std = math.Sqrt(max(sum2/n-m.Mean*m.Mean, 0))
	m.Laplacian = lap / n
	faces := []face.Face{{Box: box}}
	if _, err := p.Complete(img, faces); err != nil {
		return m, err
	}
	lm := &faces[0].Landmarks
	centre := func(from, to int) (x, y float64) {
		for i := from; i <= to; i++ {
			x += lm[i][0]
			y += lm[i][1]
		}
		k := float64(to - from + 1)
		return x / k, y / k
	}
	lx, ly := centre(36, 41)
	rx, ry := centre(42, 47)
	m.EyeDist = math.Hypot(rx-lx, ry-ly) / float64(min(img.W, img.H))
	m.Roll = math.Atan2(ry-ly, rx-lx) * 180 / math.Pi
	if dx := rx - lx; dx != 0 {
		m.Nose = (lm[30][0] - lx) / dx
	}
	return m, nil
}

// Kinds are the kinds (PhotoKindNames) of a photo with these measures.
func (m PhotoMeasures) Kinds() []string {
	var k []string
	add := func(cond bool, name string) {
		if cond {
			k = append(k, name)
		}
	}
	add(m.Chroma < kindGreyChroma, "grey-photo")
	add(m.Mean < kindDark, "dark")
	add(m.Mean > kindBright, "bright")
	add(m.Std < kindLowContrast, "low-contrast")
	add(m.Laplacian < kindBlurred, "blurred")
	add(m.EyeDist < kindSmall, "small")
	add(math.Abs(m.Roll) > kindTilted, "tilted")
	add(math.Abs(m.Nose-0.5) > kindTurned, "turned")
	if len(k) == 0 {
		k = []string{"plain"}
	}
	return k
}

// PhotoKinds returns the kinds of an LFW-style photo (one face, centred):
// what may make its face hard to find. See PhotoKindNames and the
// thresholds above.
func PhotoKinds(p *face.Pipeline, img *imaging.RGB) ([]string, error) {
	m, err := MeasurePhoto(p, img)
	if err != nil {
		return nil, err
	}
	return m.Kinds(), nil
}
