package main

import "github.com/difctl/difctl/dif"

// imageSpec is what a command takes from --interleaved, --dix/--format and
// the PI flags when its image carries its own protection information; it
// is the zero value for a store-backed image.
type imageSpec struct {
	// SelfContained: the image carries its PI (interleaved or DIX) in
	// Format, checked with Params. Otherwise its tuples are in a store.
	SelfContained bool
	Meta          string // the metadata file of a DIX pair; "" otherwise
	Format        dif.Format
	Params        dif.Params
}

// resolve fills s from the image flags and the PI flags when they name a
// self-contained image, and leaves it alone otherwise.
func (s *imageSpec) resolve(img *imageFlags, pf *piFlags) error {
	if !img.selfContained() {
		return nil
	}
	text, meta, err := img.spec()
	if err != nil {
		return err
	}
	if s.Format, err = pf.resolveFormat(text); err != nil {
		return err
	}
	if s.Params, err = pf.params(s.Format); err != nil {
		return err
	}
	s.SelfContained, s.Meta = true, meta
	return nil
}
