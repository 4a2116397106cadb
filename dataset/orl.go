package dataset

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/veil-privacy/veil/imaging"
)

// ParsePGM decodes a binary (P5) 8-bit PGM image into grey RGB.
func ParsePGM(r io.Reader) (*imaging.RGB, error) {
	br := bufio.NewReader(r)
	var fields []int
	magic, err := pgmToken(br)
	if err != nil {
		return nil, err
	}
	if magic != "P5" {
		return nil, fmt.Errorf("dataset: PGM: magic %q, want P5", magic)
	}
	for len(fields) < 3 {
		tok, err := pgmToken(br)
		if err != nil {
			return nil, err
		}
		v, err := strconv.Atoi(tok)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("dataset: PGM: bad header value %q", tok)
		}
		fields = append(fields, v)
	}
	w, h, maxv := fields[0], fields[1], fields[2]
	if w > 8192 || h > 8192 {
		return nil, fmt.Errorf("dataset: PGM: %d×%d too large", w, h)
	}
	if maxv > 255 {
		return nil, fmt.Errorf("dataset: PGM: 16-bit samples (max %d) not supported", maxv)
	}
	pix := make([]byte, w*h)
	if _, err := io.ReadFull(br, pix); err != nil {
		return nil, fmt.Errorf("dataset: PGM: truncated pixel data: %w", err)
	}
	m := imaging.NewRGB(w, h)
	for i, v := range pix {
		g := uint8(int(v) * 255 / maxv)
		m.Pix[3*i], m.Pix[3*i+1], m.Pix[3*i+2] = g, g, g
	}
	return m, nil
}

// pgmToken reads one whitespace-separated header token, skipping comments;
// it consumes exactly one whitespace byte after the token.
func pgmToken(br *bufio.Reader) (string, error) {
	var tok bytes.Buffer
	for {
		c, err := br.ReadByte()
		if err != nil {
			return "", fmt.Errorf("dataset: PGM: truncated header: %w", err)
		}
		switch {
		case c == '#' && tok.Len() == 0:
			if _, err := br.ReadString('\n'); err != nil {
				return "", fmt.Errorf("dataset: PGM: truncated comment: %w", err)
			}
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			if tok.Len() > 0 {
				return tok.String(), nil
			}
		default:
			if tok.Len() > 16 {
				return "", fmt.Errorf("dataset: PGM: header token too long")
			}
			tok.WriteByte(c)
		}
	}
}

func readPGMFile(path string) (*imaging.RGB, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	defer f.Close()
	m, err := ParsePGM(f)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return m, nil
}

// ORLImages lists the ORL database (s1..s40/1..10.pgm) in dir, subjects
// from first to last inclusive (1-based).
func ORLImages(dir string, first, last int) ([]Image, error) {
	if first < 1 || last < first {
		return nil, fmt.Errorf("dataset: ORL subjects %d..%d: empty identity split", first, last)
	}
	var out []Image
	for s := first; s <= last; s++ {
		for i := 1; i <= 10; i++ {
			p := filepath.Join(dir, fmt.Sprintf("s%d", s), fmt.Sprintf("%d.pgm", i))
			if _, err := os.Stat(p); err != nil {
				return nil, fmt.Errorf("dataset: ORL: %w", err)
			}
			out = append(out, Image{Path: p, Identity: fmt.Sprintf("s%d", s)})
		}
	}
	return out, nil
}
