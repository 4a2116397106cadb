package face

import (
	"fmt"
	"math"

	"github.com/veil-privacy/veil/face/nets"
	"github.com/veil-privacy/veil/imaging"
)

// clipFloor is face-api's Box.clipAtImageBorders: clip to the image, then
// floor every coordinate. It returns x, y, width, height for RGB.Crop.
func clipFloor(b Box, imgW, imgH int) (x, y, w, h int) {
	cx, cy := math.Max(b.X, 0), math.Max(b.Y, 0)
	cw := math.Min(b.X+b.Width-cx, float64(imgW)-cx)
	ch := math.Min(b.Y+b.Height-cy, float64(imgH)-cy)
	return int(math.Floor(cx)), int(math.Floor(cy)), int(math.Floor(cw)), int(math.Floor(ch))
}

// fillLandmarks runs the 68-point network on each face's box crop and
// stores the landmarks in image pixels, as face-api does.
func (p *Pipeline) fillLandmarks(img *imaging.RGB, faces []Face) error {
	inputs := make([]*imaging.Float, len(faces))
	crops := make([]nets.LandmarkCrop, len(faces))
	for i := range faces {
		crop, err := img.Crop(clipFloor(faces[i].Box, img.W, img.H))
		if err != nil {
			return fmt.Errorf("face: landmark crop of face %d: %w", i, err)
		}
		inputs[i], crops[i] = nets.LandmarkInput(crop)
	}
	raw, err := p.landmarks.Compute(inputs)
	if err != nil {
		return fmt.Errorf("face: landmarks: %w", err)
	}
	for i := range faces {
		faces[i].Landmarks = nets.LandmarksToImage(raw[i], crops[i], faces[i].Box.X, faces[i].Box.Y)
	}
	return nil
}

// AgeGenderBox is face-api's crop for the age/gender network: the
// landmarks' bounding box padded by 20% of its size (10% on each side).
func AgeGenderBox(l *Landmarks) Box {
	minX, minY := math.Inf(1), math.Inf(1)
	maxX, maxY := math.Inf(-1), math.Inf(-1)
	for _, pt := range l {
		minX, maxX = math.Min(minX, pt[0]), math.Max(maxX, pt[0])
		minY, maxY = math.Min(minY, pt[1]), math.Max(maxY, pt[1])
	}
	w, h := maxX-minX, maxY-minY
	return Box{X: minX - 0.1*w, Y: minY - 0.1*h, Width: 1.2 * w, Height: 1.2 * h}
}

// fillAgeGender runs the age/gender network on each face's landmark box.
func (p *Pipeline) fillAgeGender(img *imaging.RGB, faces []Face) error {
	inputs := make([]*imaging.Float, len(faces))
	for i := range faces {
		crop, err := img.Crop(clipFloor(AgeGenderBox(&faces[i].Landmarks), img.W, img.H))
		if err != nil {
			return fmt.Errorf("face: age/gender crop of face %d: %w", i, err)
		}
		inputs[i], _ = nets.LandmarkInput(crop)
	}
	res, err := p.ageGender.Compute(inputs)
	if err != nil {
		return fmt.Errorf("face: age/gender: %w", err)
	}
	for i, r := range res {
		faces[i].Age = float64(r.Age)
		if r.MaleProb >= r.FemaleProb {
			faces[i].Gender, faces[i].GenderProb = "male", float64(r.MaleProb)
		} else {
			faces[i].Gender, faces[i].GenderProb = "female", float64(r.FemaleProb)
		}
	}
	return nil
}
