package face

import (
	"fmt"
	"math"

	"github.com/veil-privacy/veil/imaging"
)

// centroid returns the mean of landmarks[from:to].
func centroid(l *Landmarks, from, to int) (x, y float64) {
	for i := from; i < to; i++ {
		x += l[i][0]
		y += l[i][1]
	}
	n := float64(to - from)
	return x / n, y / n
}

// FaceAPIAlignBox returns face-api's descriptor crop (FaceLandmarks.alignDlib
// in face-api's sources, despite the name it does not rotate): from the
// centres of the eyes (points 36–41, 42–47) and the mouth (48–67), size =
// floor(mean eye-to-mouth distance / 0.45), left = floor(max(0, cx − 0.5·size)),
// top = floor(max(0, cy − 0.43·size)), where (cx, cy) is the mean of the three
// centres; the box is then clipped to the image and floored as face-api's
// extractFaceTensors does. It returns x, y, width, height for RGB.Crop.
func FaceAPIAlignBox(l *Landmarks, imgW, imgH int) (x, y, w, h int) {
	lx, ly := centroid(l, 36, 42)
	rx, ry := centroid(l, 42, 48)
	mx, my := centroid(l, 48, 68)
	dist := (math.Hypot(mx-lx, my-ly) + math.Hypot(mx-rx, my-ry)) / 2
	size := math.Floor(dist / 0.45)
	cx, cy := (lx+rx+mx)/3, (ly+ry+my)/3
	bx := math.Floor(math.Max(0, cx-0.5*size))
	by := math.Floor(math.Max(0, cy-0.43*size))
	// clipAtImageBorders then floor.
	right, bottom := bx+size, by+size
	cw := math.Min(right-bx, float64(imgW)-bx)
	ch := math.Min(bottom-by, float64(imgH)-by)
	return int(bx), int(by), int(math.Floor(cw)), int(math.Floor(ch))
}

// dlibMeanFace is dlib's mean face for points 17–67 of the 68-point markup
// (dlib's get_face_chip_details), in the unit square of the aligned chip.
var dlibMeanFace = [51][2]float64{
	{0.000213256, 0.106454}, {0.0752622, 0.038915}, {0.18113, 0.0187482}, {0.29077, 0.0344891}, {0.393397, 0.0773906},
	{0.586856, 0.0773906}, {0.689483, 0.0344891}, {0.799124, 0.0187482}, {0.904991, 0.038915}, {0.98004, 0.106454},
	{0.490127, 0.203352}, {0.490127, 0.307009}, {0.490127, 0.409805}, {0.490127, 0.515625}, {0.36688, 0.587326},
	{0.426036, 0.609345}, {0.490127, 0.628106}, {0.554217, 0.609345}, {0.613373, 0.587326}, {0.121737, 0.216423},
	{0.187122, 0.178758}, {0.265825, 0.179852}, {0.334606, 0.231733}, {0.260918, 0.245099}, {0.182743, 0.244077},
	{0.645647, 0.231733}, {0.714428, 0.179852}, {0.793132, 0.178758}, {0.858516, 0.216423}, {0.79751, 0.244077},
	{0.719335, 0.245099}, {0.254149, 0.780233}, {0.340985, 0.745405}, {0.428858, 0.727388}, {0.490127, 0.742578},
	{0.551395, 0.727388}, {0.639268, 0.745405}, {0.726104, 0.780233}, {0.642159, 0.864805}, {0.556721, 0.902192},
	{0.490127, 0.909281}, {0.423532, 0.902192}, {0.338094, 0.864805}, {0.290379, 0.784792}, {0.428096, 0.778746},
	{0.490127, 0.785343}, {0.552157, 0.778746}, {0.689874, 0.784792}, {0.553364, 0.824182}, {0.490127, 0.831803},
	{0.42689, 0.824182},
}

// dlibTemplatePoints lists the 68-point indices dlib aligns on: the nose,
// eyes and upper lip (17–67 without the eyebrows 17–26 and the lower lip
// 55–59, 65–67), which move least with expression.
func dlibTemplatePoints() []int {
	var idx []int
	for i := 27; i < 68; i++ {
		if (55 <= i && i <= 59) || (65 <= i && i <= 67) {
			continue
		}
		idx = append(idx, i)
	}
	return idx
}

// alignmentPairs returns dlib's mean-face positions (unit square) of the
// alignment landmarks and the corresponding landmarks of l.
func alignmentPairs(l *Landmarks) (tmpl, lm [][2]float64) {
	idx := dlibTemplatePoints()
	tmpl = make([][2]float64, len(idx))
	lm = make([][2]float64, len(idx))
	for i, k := range idx {
		tmpl[i] = dlibMeanFace[k-17]
		lm[i] = l[k]
	}
	return tmpl, lm
}

// dlibPadding is the margin dlib's get_face_chip_details adds around the
// template (0.25 for the face-recognition chips).
const dlibPadding = 0.25

// DlibChip cuts dlib's aligned face chip of size×size pixels, as dlib's
// get_face_chip_details and extract_image_chip do for a 68-point shape: the
// least-squares similarity transform taking 33 landmarks (nose, eyes, upper
// lip) onto dlib's mean face padded by 0.25, p' = (0.25 + p)/1.5·size,
// sampled bilinearly. This is the alignment dlib's face-recognition ResNet
// was trained with (its 5-point model reproduces the same chips).
func DlibChip(img *imaging.RGB, l *Landmarks, size int) (*imaging.RGB, error) {
	tmpl, lm := alignmentPairs(l)
	for i, m := range tmpl {
		tmpl[i] = [2]float64{
			(dlibPadding + m[0]) / (1 + 2*dlibPadding) * float64(size),
			(dlibPadding + m[1]) / (1 + 2*dlibPadding) * float64(size),
		}
	}
	// The transform maps chip pixels to image pixels, as WarpAffine wants.
	chipToImage, err := imaging.EstimateSimilarity(tmpl, lm)
	if err != nil {
		return nil, fmt.Errorf("face: dlib alignment: %w", err)
	}
	return imaging.WarpAffine(img, chipToImage, size, size), nil
}

// LandmarkFit is the root-mean-square distance between the 33 alignment
// landmarks (those DlibChip uses) and dlib's mean face after the
// least-squares similarity transform between them, in units of the mean
// face (outer eye corners 0.74 apart). A face the landmark network read
// well fits to about 0.03 (median on LFW's development images; 99% below
// 0.09); landmarks that collapsed on a box the network could not read fit
// far worse. It is +Inf for degenerate landmarks (all at one point).
func LandmarkFit(l *Landmarks) float64 {
	to, from := alignmentPairs(l)
	a, err := imaging.EstimateSimilarity(from, to)
	if err != nil {
		return math.Inf(1)
	}
	var s float64
	for i := range from {
		x, y := a.Apply(from[i][0], from[i][1])
		s += (x-to[i][0])*(x-to[i][0]) + (y-to[i][1])*(y-to[i][1])
	}
	r := math.Sqrt(s / float64(len(from)))
	if math.IsNaN(r) {
		return math.Inf(1)
	}
	return r
}
