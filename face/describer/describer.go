// Package describer turns image files into the vectors that evaluation
// (eval.Verify) and training (package training's Describers) read: the
// face pipeline's descriptor of an image's central face, or the age/gender
// network's region features of LFW's fixed face box, each through the
// on-disk descriptor cache (face/desccache) when one is open. Every
// command, experiment or service that describes images with the same
// settings shares the same cache entries: the cache's settings string
// (CacheSettings) names the pipeline's version, detector, alignment,
// minimum score and the networks' pinned digest.
package describer

import (
	"fmt"

	"github.com/veil-privacy/veil/dataset"
	"github.com/veil-privacy/veil/eval"
	"github.com/veil-privacy/veil/face"
	"github.com/veil-privacy/veil/face/desccache"
	"github.com/veil-privacy/veil/face/nets"
	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/internal/engine"
)

// PipelineVersion changes whenever the code computing descriptors changes
// (detection, alignment, the descriptor network or the fallback rule), so
// that stale cache entries are not reused.
const PipelineVersion = "veil-faces-4"

// ageGenderVersion changes whenever the code computing age/gender
// features changes, so that stale cache entries are not reused.
const ageGenderVersion = "veil-agegender-regions-1"

// Features names what a head reads: the pipeline's 128-d descriptors, or
// the age/gender network's region features (nn/arch.HeadAgeGender names
// the same; this package knows no model code).
const (
	FeaturesDescriptor = "descriptor"
	FeaturesAgeGender  = "agegender"
)

// Options configure the describers.
type Options struct {
	// Models is the folder of face-api's weight files (default:
	// nets.DefaultModelDir).
	Models string
	// Detector, Align and MinScore configure the face pipeline
	// (face.Options).
	Detector, Align string
	MinScore        float64
	// CacheDir is the descriptor cache's folder (default:
	// desccache.DefaultDir); NoCache reads and writes no cache.
	CacheDir string
	NoCache  bool
	// Engine runs the pipeline's SSD layers (nil: a private default one).
	Engine *engine.Engine
}

// CacheSettings is the cache settings string of a descriptor pipeline.
func CacheSettings(opt face.Options) string {
	return fmt.Sprintf("%s|%s|%s|%g|second=%v|%s", PipelineVersion, opt.Detector, opt.Align, opt.MinScore, opt.SecondDetector, nets.PinnedDigest())
}

// OpenCache opens the cache folder for the given settings, or returns nil
// with NoCache.
func (o Options) OpenCache(settings string) (*desccache.Cache, error) {
	if o.NoCache {
		return nil, nil
	}
	dir := o.CacheDir
	if dir == "" {
		var err error
		if dir, err = desccache.DefaultDir(); err != nil {
			return nil, err
		}
	}
	return desccache.Open(dir, settings)
}

// Descriptors builds the descriptor pipeline (the second detector
// consulted for doubtful faces) and its cache, and returns the describer
// of an image's central face.
func (o Options) Descriptors() (eval.Describer, error) {
	p, err := face.NewPipeline(face.Options{ModelDir: o.Models, Detector: face.Detector(o.Detector), Align: face.Align(o.Align),
		MinScore: o.MinScore, MaxFaces: 100, Descriptors: true, SecondDetector: true, Engine: o.Engine})
	if err != nil {
		return nil, err
	}
	cache, err := o.OpenCache(CacheSettings(p.Options()))
	if err != nil {
		return nil, err
	}
	return Pipeline(p, cache), nil
}

// AgeGender returns a describer whose "descriptor" is the age/gender
// network's region features (nets.AgeGender.RegionFeatures) of the fixed
// face box of a deep-funnelled LFW image (dataset.LFWAgeGenderBox),
// cached like the pipeline's descriptors but under its own settings. Other
// images are refused.
func (o Options) AgeGender() (eval.Describer, error) {
	dir := o.Models
	if dir == "" {
		dir = nets.DefaultModelDir()
	}
	a, err := nets.NewAgeGenderOn(dir, o.Engine)
	if err != nil {
		return nil, err
	}
	left, top, side := dataset.LFWAgeGenderBox()
	cache, err := o.OpenCache(fmt.Sprintf("%s|box=[%d %d %d]|%s", ageGenderVersion, left, top, side, nets.PinnedDigest()))
	if err != nil {
		return nil, err
	}
	return Cached(cache, func(img *imaging.RGB) (eval.Described, error) {
		if img.W != dataset.LFWFrame || img.H != dataset.LFWFrame {
			return eval.Described{}, fmt.Errorf("image is %d×%d, not a %d×%d deep-funnelled LFW image", img.W, img.H, dataset.LFWFrame, dataset.LFWFrame)
		}
		crop, err := img.Crop(left, top, side, side)
		if err != nil {
			return eval.Described{}, err
		}
		v, err := a.RegionFeatures([]*imaging.Float{nets.AgeGenderInput(crop)})
		if err != nil {
			return eval.Described{}, err
		}
		return eval.Described{Descriptor: v[0]}, nil
	}), nil
}

// Inputs returns the describer of a head's input vectors for features
// (FeaturesDescriptor or FeaturesAgeGender) and their length.
func (o Options) Inputs(features string) (eval.Describer, int, error) {
	switch features {
	case FeaturesDescriptor:
		d, err := o.Descriptors()
		return d, 128, err
	case FeaturesAgeGender:
		d, err := o.AgeGender()
		return d, nets.AgeGenderRegionFeatures, err
	}
	return nil, 0, fmt.Errorf("train: unknown --features %q (want %s or %s)", features, FeaturesDescriptor, FeaturesAgeGender)
}

// Pipeline returns the describer of an image's central face (p.Central),
// through the cache when there is one (nil: none).
func Pipeline(p *face.Pipeline, cache *desccache.Cache) eval.Describer {
	return Cached(cache, func(img *imaging.RGB) (eval.Described, error) {
		f, err := p.Central(img)
		if err != nil {
			return eval.Described{}, err
		}
		return eval.Described{Descriptor: f.Descriptor, Fallback: f.Fallback, LowScore: f.LowScore, SecondDetector: f.SecondDetector}, nil
	})
}

// Cached reads and decodes an image file (within the default size limits)
// and returns describe's result for it, looked up in and stored to cache
// (nil: no cache) by the file's bytes.
func Cached(cache *desccache.Cache, describe func(img *imaging.RGB) (eval.Described, error)) eval.Describer {
	lim := imaging.DefaultLimits()
	return func(path string) (eval.Described, error) {
		data, err := imaging.ReadFile(path, lim.MaxBytes)
		if err != nil {
			return eval.Described{}, err
		}
		var key string
		if cache != nil {
			key = cache.Key(data)
			if e, ok := cache.Get(key); ok {
				return eval.Described{Descriptor: e.Descriptor, Fallback: e.Fallback, LowScore: e.LowScore, SecondDetector: e.SecondDetector}, nil
			}
		}
		img, _, err := imaging.Decode(data, lim)
		if err != nil {
			return eval.Described{}, err
		}
		d, err := describe(img)
		if err != nil {
			return eval.Described{}, err
		}
		if cache != nil {
			if err := cache.Put(key, desccache.Entry{Descriptor: d.Descriptor, Fallback: d.Fallback, LowScore: d.LowScore, SecondDetector: d.SecondDetector}); err != nil {
				return eval.Described{}, err
			}
		}
		return d, nil
	}
}
