package face

import (
	"math"
	"testing"

	"github.com/veil-privacy/veil/face/nets"
	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/internal/datadir"
)

// TestRetryFindsMissedFaces: on two clear frontal LFW photos (Jelena
// Dokic 3 and 4) the first pass of Detector Both finds no face, and the
// second pass, on the photo with a border, finds the labelled one: a box
// containing the centre that overlaps FallbackBox by IoU ≥ 0.3, marked
// Retried. With SinglePass the pipeline finds nothing, as it did before
// the second pass existed.
func TestRetryFindsMissedFaces(t *testing.T) {
	md := datadir.ModelDirForTest(t)
	p, err := NewPipeline(Options{ModelDir: md})
	if err != nil {
		t.Fatal(err)
	}
	single, err := NewPipeline(Options{ModelDir: md, SinglePass: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{3, 4} {
		img := lfwImage(t, "Jelena_Dokic", n)
		if faces, err := single.Detect(img); err != nil || len(faces) != 0 {
			t.Fatalf("Jelena_Dokic_%04d first pass: %d faces, %v; want none (the miss this test is about)", n, len(faces), err)
		}
		faces, err := p.Detect(img)
		if err != nil {
			t.Fatal(err)
		}
		cx, cy := float64(img.W)/2, float64(img.H)/2
		if len(faces) == 0 || !faces[0].Retried || !faces[0].Box.Contains(cx, cy) || faces[0].Box.IoU(FallbackBox(img.W, img.H)) < 0.3 {
			t.Errorf("Jelena_Dokic_%04d: faces %+v, want the central face found on the second pass", n, faces)
		}
	}
}

// TestRetryDoesNotRunWhenFaceFound: a photo whose first pass finds a face
// gets no second pass, and its faces are the first pass's.
func TestRetryDoesNotRunWhenFaceFound(t *testing.T) {
	p, err := NewPipeline(Options{ModelDir: datadir.ModelDirForTest(t)})
	if err != nil {
		t.Fatal(err)
	}
	img := lfwImage(t, "George_W_Bush", 1)
	d, err := p.DetectBoth(img, 0.01, 0.01)
	if err != nil {
		t.Fatal(err)
	}
	if d.Retry != nil || len(p.Options().Rule.Combine(d.SSD, d.Tiny)) == 0 {
		t.Fatalf("second pass ran (%v) on a photo whose first pass finds a face", d.Retry != nil)
	}
	faces, err := p.Detect(img)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range faces {
		if f.Retried {
			t.Errorf("face %+v marked Retried", f)
		}
	}
}

// TestRetryImage: the second pass's image has a border of RetryPad of
// mid-grey, the photo inside unchanged (or box-averaged when large), and a
// box found on it maps back to the photo's pixels.
func TestRetryImage(t *testing.T) {
	for _, tc := range []struct {
		w, h, k int // photo size and the shrink factor expected
	}{{250, 250, 1}, {101, 37, 1}, {3000, 2000, 6}, {1, 1, 1}} { // 3000 px: 1024/(1+2·0.4) = 568 a side at most, so 6
		img := imaging.NewRGB(tc.w, tc.h)
		for i := range img.Pix {
			img.Pix[i] = uint8(i * 7 % 251)
		}
		out, back := retryImage(img)
		w, h := tc.w/tc.k, tc.h/tc.k
		px, py := int(math.Round(RetryPad*float64(w))), int(math.Round(RetryPad*float64(h)))
		if out.W != w+2*px || out.H != h+2*py || max(out.W, out.H) > retryMaxSide {
			t.Fatalf("%dx%d: padded %dx%d, want %dx%d within %d", tc.w, tc.h, out.W, out.H, w+2*px, h+2*py, retryMaxSide)
		}
		if r, g, b := out.At(0, 0); px > 0 && (r != retryFill || g != retryFill || b != retryFill) {
			t.Errorf("%dx%d: corner %d,%d,%d, want the fill", tc.w, tc.h, r, g, b)
		}
		// The inner pixel (x, y) is the mean of the photo's k×k block.
		x, y := w/2, h/2
		var sum int
		for dy := range tc.k {
			for dx := range tc.k {
				r, _, _ := img.At(x*tc.k+dx, y*tc.k+dy)
				sum += int(r)
			}
		}
		if r, _, _ := out.At(x+px, y+py); int(r) != (sum+tc.k*tc.k/2)/(tc.k*tc.k) {
			t.Errorf("%dx%d: inner pixel %d, want the block mean %d", tc.w, tc.h, r, (sum+tc.k*tc.k/2)/(tc.k*tc.k))
		}
		got := back(nets.Detection{X: float64(px) + 10, Y: float64(py) + 4, W: 20, H: 30, Score: 0.7})
		want := nets.Detection{X: 10 * float64(tc.k), Y: 4 * float64(tc.k), W: 20 * float64(tc.k), H: 30 * float64(tc.k), Score: 0.7}
		if got != want {
			t.Errorf("%dx%d: mapped back %+v, want %+v", tc.w, tc.h, got, want)
		}
	}
}

// TestRuleFaces: the second pass counts only when the first gives no face.
func TestRuleFaces(t *testing.T) {
	r := DefaultRule()
	first := det(10, 10, 50, 50, 0.9)
	second := det(100, 100, 40, 40, 0.8)
	d := Detections{SSD: []nets.Detection{first}, Retry: &Detections{SSD: []nets.Detection{second}}}
	if f := r.Faces(&d); len(f) != 1 || f[0].Box.X != 10 || f[0].Retried {
		t.Errorf("with a first-pass face: %+v", f)
	}
	d.SSD = []nets.Detection{det(10, 10, 50, 50, 0.3)}
	if f := r.Faces(&d); len(f) != 1 || f[0].Box.X != 100 || !f[0].Retried {
		t.Errorf("with none in the first pass: %+v", f)
	}
	d.Retry = nil
	if f := r.Faces(&d); len(f) != 0 {
		t.Errorf("no second pass: %+v", f)
	}
}
