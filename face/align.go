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

// dlibTemplate is dlib's five-point mean face (shape_predictor_5_face_landmarks
// order: image-right eye outer and inner corners, image-left eye outer and
// inner corners, base of the nose) in the unit square of the aligned chip.
var dlibTemplate = [5][2]float64{
	{0.8596, 0.2135}, {0.6461, 0.2290}, {0.1206, 0.2137}, {0.3341, 0.2291}, {0.4901, 0.6278},
}

// dlib68To5 maps the template points to the 68-point markup: outer corner of
// the image-right eye (45), its inner corner (42), outer corner of the
// image-left eye (36), its inner corner (39), and the base of the nose (33).
var dlib68To5 = [5]int{45, 42, 36, 39, 33}

// dlibPadding is the margin dlib's get_face_chip_details adds around the
// template (its default 0.25 for the face-recognition chips).
const dlibPadding = 0.25

// DlibChip cuts dlib's aligned face chip of size×size pixels: the
// least-squares similarity transform taking the five landmark points onto
// the padded mean-face template, p' = (padding + p)/(1 + 2·padding)·size, sampled
// bilinearly. This is how dlib's face-recognition ResNet was trained
// (dlib's get_face_chip_details and extract_image_chip).
func DlibChip(img *imaging.RGB, l *Landmarks, size int) (*imaging.RGB, error) {
	from := make([][2]float64, 5)
	to := make([][2]float64, 5)
	for i, k := range dlib68To5 {
		from[i] = [2]float64{
			(dlibPadding + dlibTemplate[i][0]) / (1 + 2*dlibPadding) * float64(size),
			(dlibPadding + dlibTemplate[i][1]) / (1 + 2*dlibPadding) * float64(size),
		}
		to[i] = l[k]
	}
	// The transform maps chip pixels to image pixels, as WarpAffine wants.
	chipToImage, err := imaging.EstimateSimilarity(from, to)
	if err != nil {
		return nil, fmt.Errorf("face: dlib alignment: %w", err)
	}
	return imaging.WarpAffine(img, chipToImage, size, size), nil
}
