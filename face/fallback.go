package face

import (
	"errors"

	"github.com/veil-privacy/veil/imaging"
)

// Fallback detects faces with a pipeline and, on a photo where its
// detector finds none, with the same options and Detector Both (Options.Rule:
// either network alone at the same minimum score, or both at lower scores).
// A detector's miss is often the other's find: on LFW's Zach_Safrin_0001
// the tiny detector scores the face 0.499, SSD 0.81; and on greyscale
// photos neither may reach 0.5 where both see the face (a grey copy of
// LFW's Barbara_Bach_0001: tiny 0.465, SSD 0.178). The pipeline's own
// detector is tried first because a comparison's threshold was measured
// with its faces. The second pipeline is built when first needed. A
// Fallback is not safe for concurrent use.
type Fallback struct {
	primary, both *Pipeline
}

// NewFallback returns a Fallback over p.
func NewFallback(p *Pipeline) (*Fallback, error) {
	if p == nil {
		return nil, errors.New("face: fallback over a nil pipeline")
	}
	return &Fallback{primary: p}, nil
}

// Primary returns the pipeline the Fallback tries first.
func (f *Fallback) Primary() *Pipeline { return f.primary }

// Detect returns the faces the primary pipeline finds in img or, when it
// finds none, those Detector Both finds, with the pipeline that found
// them. A primary pipeline whose detector is Both already ran both
// networks: its empty result is returned as is.
func (f *Fallback) Detect(img *imaging.RGB) (*Pipeline, []Face, error) {
	faces, err := f.primary.Detect(img)
	if err != nil || len(faces) > 0 {
		return f.primary, faces, err
	}
	o := f.primary.Options()
	if o.Detector == Both {
		return f.primary, faces, nil
	}
	if f.both == nil {
		o.Detector = Both
		if f.both, err = NewPipeline(o); err != nil {
			return nil, nil, err
		}
	}
	faces, err = f.both.Detect(img)
	return f.both, faces, err
}
