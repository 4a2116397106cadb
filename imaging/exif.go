package imaging

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// jpegOrientation walks the JPEG marker segments before the first scan and
// returns the orientation from the first APP1 Exif segment, or 1 when there
// is none or it is malformed (browsers likewise ignore a broken EXIF block).
func jpegOrientation(data []byte) int {
	if len(data) < 2 || data[0] != 0xFF || data[1] != 0xD8 {
		return 1
	}
	pos := 2
	for pos+4 <= len(data) {
		if data[pos] != 0xFF {
			return 1
		}
		marker := data[pos+1]
		switch {
		case marker == 0xFF: // fill byte
			pos++
			continue
		case marker == 0x01 || (marker >= 0xD0 && marker <= 0xD8): // standalone markers
			pos += 2
			continue
		case marker == 0xDA || marker == 0xD9: // start of scan, end of image
			return 1
		}
		n := int(binary.BigEndian.Uint16(data[pos+2:]))
		if n < 2 || pos+2+n > len(data) {
			return 1
		}
		if marker == 0xE1 {
			payload := data[pos+4 : pos+2+n]
			if bytes.HasPrefix(payload, exifHeader) {
				o, err := ParseExifOrientation(payload)
				if err != nil {
					return 1
				}
				return o
			}
		}
		pos += 2 + n
	}
	return 1
}

var exifHeader = []byte("Exif\x00\x00")

// errNoOrientation reports an EXIF block without an orientation tag.
var errNoOrientation = errors.New("imaging: exif: no orientation tag in IFD0")

// ParseExifOrientation parses the payload of a JPEG APP1 segment (the bytes
// after the segment length, starting with "Exif\0\0") and returns the value
// of the Orientation tag (0x0112) of IFD0, which must be 1..8. Every offset
// is bounds-checked: the payload is untrusted.
func ParseExifOrientation(payload []byte) (int, error) {
	if !bytes.HasPrefix(payload, exifHeader) {
		return 0, errors.New("imaging: exif: missing \"Exif\\0\\0\" header")
	}
	tiff := payload[len(exifHeader):]
	if len(tiff) < 8 {
		return 0, fmt.Errorf("imaging: exif: TIFF header truncated (%d bytes)", len(tiff))
	}
	var bo binary.ByteOrder
	switch string(tiff[:2]) {
	case "II":
		bo = binary.LittleEndian
	case "MM":
		bo = binary.BigEndian
	default:
		return 0, fmt.Errorf("imaging: exif: bad byte-order mark %q", tiff[:2])
	}
	if m := bo.Uint16(tiff[2:]); m != 42 {
		return 0, fmt.Errorf("imaging: exif: bad TIFF magic %d", m)
	}
	off := uint64(bo.Uint32(tiff[4:]))
	if off < 8 || off+2 > uint64(len(tiff)) {
		return 0, fmt.Errorf("imaging: exif: IFD0 offset %d outside the %d-byte block", off, len(tiff))
	}
	count := uint64(bo.Uint16(tiff[off:]))
	for i := uint64(0); i < count; i++ {
		e := off + 2 + 12*i
		if e+12 > uint64(len(tiff)) {
			return 0, fmt.Errorf("imaging: exif: IFD0 entry %d of %d truncated", i, count)
		}
		ent := tiff[e : e+12]
		if bo.Uint16(ent) != 0x0112 {
			continue
		}
		typ, n := bo.Uint16(ent[2:]), bo.Uint32(ent[4:])
		var v uint32
		switch {
		case typ == 3 && n >= 1: // SHORT, stored in the first two value bytes
			v = uint32(bo.Uint16(ent[8:]))
		case typ == 4 && n >= 1: // LONG, tolerated
			v = bo.Uint32(ent[8:])
		default:
			return 0, fmt.Errorf("imaging: exif: orientation tag has type %d count %d, want SHORT×1", typ, n)
		}
		if v < 1 || v > 8 {
			return 0, fmt.Errorf("imaging: exif: orientation %d outside 1..8", v)
		}
		return int(v), nil
	}
	return 0, errNoOrientation
}
