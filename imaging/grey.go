package imaging

// Grey returns a greyscale copy of m: every pixel's ITU-R BT.601 luma,
//
//	Y = (299·R + 587·G + 114·B + 500) / 1000   (integer division),
//
// that is 0.299 R + 0.587 G + 0.114 B rounded half up, replicated into R, G
// and B. The integer form is exact, so another implementation (the face-api
// reference script in scripts/faceapi-ref) produces the same bytes; Go's
// color.GrayModel uses the same weights but 16-bit fixed point and can
// differ by one level.
func (m *RGB) Grey() *RGB {
	out := &RGB{W: m.W, H: m.H, Pix: make([]uint8, len(m.Pix))}
	for i := 0; i+2 < len(m.Pix); i += 3 {
		y := uint8((299*uint32(m.Pix[i]) + 587*uint32(m.Pix[i+1]) + 114*uint32(m.Pix[i+2]) + 500) / 1000)
		out.Pix[i], out.Pix[i+1], out.Pix[i+2] = y, y, y
	}
	return out
}

// IsGrey reports whether every pixel of m has R = G = B.
func (m *RGB) IsGrey() bool {
	for i := 0; i+2 < len(m.Pix); i += 3 {
		if m.Pix[i] != m.Pix[i+1] || m.Pix[i] != m.Pix[i+2] {
			return false
		}
	}
	return true
}
