package face

import (
	"fmt"
	"math"

	"github.com/veil-privacy/veil/imaging"
)

// Largest returns the index of the face with the largest box, the rule
// veil compare uses to pick the face of a photo that holds several: in a
// portrait, selfie or group photo the person the photo is about is
// usually the nearest and so the largest, wherever the framing puts them
// (LFW's crops put the subject at the centre, which Central relies on;
// everyday photos do not). Equal areas go to the higher score, then to the
// earlier face. It returns -1 when there is no face.
func Largest(faces []Face) int {
	best := -1
	for i, f := range faces {
		if best < 0 {
			best = i
			continue
		}
		a, b := f.Box.Area(), faces[best].Box.Area()
		if a > b || (a == b && f.Score > faces[best].Score) {
			best = i
		}
	}
	return best
}

// RegionBox is the square crop of a face read by embedding heads on the
// age/gender network's region features (arch.HeadAgeGender): AgeGenderBox
// (the 68 landmarks' bounding box with 10% margins) made square about its
// centre with side the longer of its sides. On deep-funnelled LFW images
// this box averages to the fixed one such heads are trained on
// (dataset.LFWAgeGenderBox gives the figures), so the head sees a detected
// face framed as in training.
func RegionBox(l *Landmarks) Box {
	b := AgeGenderBox(l)
	side := math.Max(b.Width, b.Height)
	cx, cy := b.Center()
	return Box{X: cx - side/2, Y: cy - side/2, Width: side, Height: side}
}

// RegionCrop cuts RegionBox out of img, clipped to the image (a face at
// the border gives a narrower crop, which the age/gender network's input
// pads back to a square).
func RegionCrop(img *imaging.RGB, l *Landmarks) (*imaging.RGB, error) {
	c, err := img.Crop(clipFloor(RegionBox(l), img.W, img.H))
	if err != nil {
		return nil, fmt.Errorf("face: region crop: %w", err)
	}
	return c, nil
}
