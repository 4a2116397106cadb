// Package dataset reads the face datasets Veil trains and evaluates on:
// LFW (deep-funnelled images, people and pairs lists of the development
// view) and ORL (PGM files), splits identities so that no training identity
// appears in evaluated pairs, and serves batches with flips and random crops.
package dataset

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"

	"github.com/veil-privacy/veil/imaging"
)

// Image is one face image with its identity.
type Image struct {
	// Path is the file the image came from.
	Path string
	// Identity is the person's name (LFW) or subject folder (ORL).
	Identity string
	// Points, if set, are the face's five points in the image; Load then
	// warps the image so that they land on LFWFivePoints in an LFW-sized
	// frame before cropping (MTFL's faces, framed unlike LFW's).
	Points *FivePoints
}

// Set is a labelled set of square RGB face crops held as bytes: each image
// is Stored×Stored×3, and batches are Side×Side crops of it (random when
// augmenting, centred otherwise) scaled to about [-1, 1].
type Set struct {
	// Side is the network input side; Stored ≥ Side is the stored side.
	Side, Stored int
	// Pix holds the images back to back.
	Pix []uint8
	// Labels are dense class indices; Names[label] is the identity.
	Labels []int32
	Names  []string
	// Paths are the source files, for pairs lookup.
	Paths []string
}

// Len is the number of images.
func (s *Set) Len() int { return len(s.Labels) }

// Classes is the number of identities.
func (s *Set) Classes() int { return len(s.Names) }

// LoadOptions says how images become network inputs.
type LoadOptions struct {
	// Side is the network input side (e.g. 64 or 112).
	Side int
	// Crop is the side of the centred square cut from the source image
	// before resizing (LFW deep-funnelled 250×250: 128 keeps the face).
	// 0 uses the whole image's shorter side.
	Crop int
	// Augment stores a margin of Side/8 around the crop for random crops.
	Augment bool
}

// Load decodes, crops and resizes images; labels follow the sorted
// identity names. It fails on an empty list or an unreadable image.
func Load(images []Image, o LoadOptions) (*Set, error) {
	if len(images) == 0 {
		return nil, errors.New("dataset: no images to load (empty identity split?)")
	}
	if o.Side < 8 || o.Side > 1024 {
		return nil, fmt.Errorf("dataset: input side %d outside [8, 1024]", o.Side)
	}
	stored := o.Side
	if o.Augment {
		stored = o.Side + o.Side/8
	}
	names, sorted := identityLabels(images)
	s := &Set{Side: o.Side, Stored: stored, Names: sorted, Pix: make([]uint8, 0, len(images)*stored*stored*3)}
	for _, im := range images {
		m, err := readImage(im.Path)
		if err != nil {
			return nil, err
		}
		if im.Points != nil {
			if m, err = toLFWFrame(m, *im.Points); err != nil {
				return nil, fmt.Errorf("dataset: %s: %w", im.Path, err)
			}
		}
		crop := o.Crop
		if crop <= 0 || crop > min(m.W, m.H) {
			crop = min(m.W, m.H)
		}
		// Widen the crop in proportion to the augmentation margin.
		c := min(crop*stored/o.Side, min(m.W, m.H))
		sub, err := m.Crop((m.W-c)/2, (m.H-c)/2, c, c)
		if err != nil {
			return nil, fmt.Errorf("dataset: cropping %s: %w", im.Path, err)
		}
		s.Pix = append(s.Pix, resizeArea(sub, stored).Pix...)
		s.Labels = append(s.Labels, names[im.Identity])
		s.Paths = append(s.Paths, im.Path)
	}
	return s, nil
}

// toLFWFrame warps m by the similarity that best maps pts onto
// LFWFivePoints, into an LFWFrame×LFWFrame image.
func toLFWFrame(m *imaging.RGB, pts FivePoints) (*imaging.RGB, error) {
	from, to := make([][2]float64, 5), make([][2]float64, 5)
	for k := range pts {
		from[k], to[k] = LFWFivePoints[k], pts[k]
	}
	dstToSrc, err := imaging.EstimateSimilarity(from, to)
	if err != nil {
		return nil, fmt.Errorf("aligning five points: %w", err)
	}
	return imaging.WarpAffine(m, dstToSrc, LFWFrame, LFWFrame), nil
}

func readImage(path string) (*imaging.RGB, error) {
	if filepath.Ext(path) == ".pgm" {
		return readPGMFile(path)
	}
	m, _, err := imaging.DecodeFile(path, imaging.DefaultLimits())
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	return m, nil
}

// resizeArea scales a square image to side×side by averaging the source
// pixels each output pixel covers (box filter; for downscaling).
func resizeArea(m *imaging.RGB, side int) *imaging.RGB {
	out := imaging.NewRGB(side, side)
	for oy := 0; oy < side; oy++ {
		y0, y1 := oy*m.H/side, max((oy+1)*m.H/side, oy*m.H/side+1)
		for ox := 0; ox < side; ox++ {
			x0, x1 := ox*m.W/side, max((ox+1)*m.W/side, ox*m.W/side+1)
			var r, g, b, n int
			for y := y0; y < y1; y++ {
				for x := x0; x < x1; x++ {
					i := 3 * (y*m.W + x)
					r += int(m.Pix[i])
					g += int(m.Pix[i+1])
					b += int(m.Pix[i+2])
					n++
				}
			}
			o := 3 * (oy*side + ox)
			out.Pix[o], out.Pix[o+1], out.Pix[o+2] = uint8((r+n/2)/n), uint8((g+n/2)/n), uint8((b+n/2)/n)
		}
	}
	return out
}

// Batch writes the images idx as network input (NHWC, (v−127.5)/128) and
// their labels. With rng non-nil each image gets a random crop and a
// horizontal flip with probability ½; otherwise the centre crop.
func (s *Set) Batch(idx []int, rng *rand.Rand) ([]float32, []int32, error) {
	side, st := s.Side, s.Stored
	x := make([]float32, len(idx)*side*side*3)
	l := make([]int32, len(idx))
	for k, i := range idx {
		if i < 0 || i >= s.Len() {
			return nil, nil, fmt.Errorf("dataset: image index %d outside [0, %d)", i, s.Len())
		}
		l[k] = s.Labels[i]
		ox, oy := (st-side)/2, (st-side)/2
		flip := false
		if rng != nil {
			ox, oy = rng.IntN(st-side+1), rng.IntN(st-side+1)
			flip = rng.IntN(2) == 1
		}
		src := s.Pix[i*st*st*3 : (i+1)*st*st*3]
		dst := x[k*side*side*3 : (k+1)*side*side*3]
		for y := 0; y < side; y++ {
			for xx := 0; xx < side; xx++ {
				sx := ox + xx
				if flip {
					sx = ox + side - 1 - xx
				}
				si := 3 * ((oy+y)*st + sx)
				di := 3 * (y*side + xx)
				for c := 0; c < 3; c++ {
					dst[di+c] = (float32(src[si+c]) - 127.5) / 128
				}
			}
		}
	}
	return x, l, nil
}
