package tagging

import "github.com/veil-privacy/veil/imaging"

// EXIF is what the library keeps from a photo's EXIF block: when it was
// taken (stored as TakenString) and how it is oriented. Package imaging
// parses it, so the orientation is the one its decoder applies.
type EXIF = imaging.EXIF

// ReadJPEGEXIF reads the EXIF block of a JPEG's bytes with
// imaging.ReadJPEGEXIF: a file that is not a JPEG, or has no EXIF, gives
// orientation 1 and no time; a malformed block gives an error wrapping
// imaging.ErrEXIF (the photo is still usable: the caller may ignore it).
func ReadJPEGEXIF(data []byte) (EXIF, error) { return imaging.ReadJPEGEXIF(data) }
