package dataset

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// FivePoints are a face's left eye, right eye, nose tip, left and right
// mouth corners (left and right as seen in the image), in pixels.
type FivePoints [5][2]float64

// LFWFivePoints are the mean five points of LFW's deep-funnelled images in
// their 250×250 frame: eye centres (mean of the six eye landmarks), nose
// tip (landmark 30) and mouth corners (48, 54) of the face pipeline's 68
// landmarks, over 384 development images with a confident detection (one
// image of every 13th person in name order; medians within 0.4 px). Images
// given with five points are warped onto these before the centred crop, so
// that LightFace sees other datasets' faces framed like LFW's.
var LFWFivePoints = FivePoints{{104.03, 112.39}, {145.47, 111.86}, {125.33, 136.46}, {107.73, 157.76}, {144.25, 157.39}}

// LFWFrame is the side of the deep-funnelled LFW images LFWFivePoints
// refer to.
const LFWFrame = 250

// LFWAgeGenderBox returns the square (left, top, side) in a deep-funnelled LFW
// image that face-api's age/gender network reads: the 68 landmarks'
// bounding box with 10% margins, padded to a square. Over the 384 images
// of LFWFivePoints its centre averages (124.3, 142.9) and its sides 119.2 ×
// 113.6 (medians within 0.5 px), so the deep-funnelled alignment lets one
// fixed 120-px box serve every image.
func LFWAgeGenderBox() (left, top, side int) { return 64, 83, 120 }

// MTFLFace is one line of an MTFL landmark list.
type MTFLFace struct {
	// Path is relative to the MTFL folder, with forward slashes.
	Path string
	// Points are the five annotated landmarks.
	Points FivePoints
	// Gender (1 male, 2 female), Smile (1 yes, 2 no), Glasses (1 yes,
	// 2 no) and Pose (1 left profile … 3 frontal … 5 right profile) are 0
	// when the list has no attribute columns (new_training.txt).
	Gender, Smile, Glasses, Pose int
}

// maxMTFLLines bounds what ParseMTFL accepts from an untrusted list.
const maxMTFLLines = 1 << 20

// ParseMTFL reads an MTFL landmark list: per line an image path, the
// landmarks' x1…x5 then y1…y5, and optionally gender, smile, glasses and
// head pose (MTFL's training.txt; new_training.txt, for the 80×80 crops,
// has no attributes). Backslashes in paths become slashes; absolute paths
// and paths leaving the folder are refused.
func ParseMTFL(r io.Reader) ([]MTFLFace, error) {
	sc := bufio.NewScanner(r)
	var out []MTFLFace
	line := 0
	for sc.Scan() {
		line++
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(out) == maxMTFLLines {
			return nil, fmt.Errorf("dataset: MTFL list longer than %d lines", maxMTFLLines)
		}
		if len(f) != 11 && len(f) != 15 {
			return nil, fmt.Errorf("dataset: MTFL list line %d: want a path, 10 coordinates and optionally 4 attributes, got %d fields", line, len(f))
		}
		p := strings.ReplaceAll(f[0], `\`, "/")
		if !filepath.IsLocal(p) { // also refuses "" and absolute paths
			return nil, fmt.Errorf("dataset: MTFL list line %d: path %q is not inside the folder", line, f[0])
		}
		face := MTFLFace{Path: p}
		for k := 0; k < 10; k++ {
			v, err := strconv.ParseFloat(f[1+k], 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v) > 1e5 {
				return nil, fmt.Errorf("dataset: MTFL list line %d: bad coordinate %q", line, f[1+k])
			}
			face.Points[k%5][k/5] = v
		}
		if len(f) == 15 {
			attrs := []*int{&face.Gender, &face.Smile, &face.Glasses, &face.Pose}
			limits := []int{2, 2, 2, 5}
			for k, a := range attrs {
				v, err := strconv.Atoi(f[11+k])
				if err != nil || v < 1 || v > limits[k] {
					return nil, fmt.Errorf("dataset: MTFL list line %d: attribute %d is %q, want 1…%d", line, k+1, f[11+k], limits[k])
				}
				*a = v
			}
		}
		out = append(out, face)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("dataset: reading MTFL list: %w", err)
	}
	return out, nil
}

// MTFL is an MTFL folder: the 80×80 face crops in lfw_5590/ and
// net_7876/ and their landmark list new_training.txt.
type MTFL struct {
	Dir string
}

// PublicImages returns the net_7876 faces (web photos, none from LFW) as
// images with their five points, each its own identity (MTFL has no
// identity labels). The lfw_5590 part is left out: it is LFW photos, some
// of people in the development test pairs.
func (m MTFL) PublicImages() ([]Image, error) {
	f, err := os.Open(filepath.Join(m.Dir, "new_training.txt"))
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	defer f.Close()
	faces, err := ParseMTFL(f)
	if err != nil {
		return nil, err
	}
	var out []Image
	for _, fc := range faces {
		if !strings.HasPrefix(fc.Path, "net_7876/") {
			continue
		}
		pts := fc.Points
		out = append(out, Image{Path: filepath.Join(m.Dir, filepath.FromSlash(fc.Path)), Identity: fc.Path, Points: &pts})
	}
	if len(out) == 0 {
		return nil, errors.New("dataset: no net_7876 faces in the MTFL list")
	}
	return out, nil
}
