package dataset

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Pair is one line of an LFW pairs file: two image references (a person's
// folder name and a 1-based image number) and whether they show the same
// person. It is the one pair type of the project: eval scores these pairs.
type Pair struct {
	Name1 string
	Num1  int
	Name2 string
	Num2  int
	Same  bool
}

// ImagePath returns the path of the pair's first or second image under an
// LFW-style folder (DIR/Name/Name_0001.jpg).
func (p Pair) ImagePath(dir string, second bool) string {
	name, num := p.Name1, p.Num1
	if second {
		name, num = p.Name2, p.Num2
	}
	return filepath.Join(dir, name, fmt.Sprintf("%s_%04d.jpg", name, num))
}

// PairsFile is a parsed pairs file. Folds is 1 for a single-set file such
// as pairsDevTest.txt, and the fold count for a file whose header gives
// folds (`10 300`). Pairs are grouped by fold: Fold[i] holds the fold of
// Pairs[i].
type PairsFile struct {
	Folds int
	Pairs []Pair
	Fold  []int
}

// ErrPairs is wrapped by every pairs-file format error.
var ErrPairs = errors.New("malformed pairs file")

// maxPairs bounds the number of pairs a header may announce.
const maxPairs = 10_000_000

// ReadPairsFile reads a pairs file in LFW's format.
func ReadPairsFile(path string) (*PairsFile, error) {
	f, err := os.Open(path)
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return nil, fmt.Errorf("cannot read pairs file %s: %w", path, pe.Err) // the path once
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return nil, fmt.Errorf("%s is a folder, not a pairs file", path)
	}
	pf, err := ParsePairs(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return pf, nil
}

// ParsePairs parses LFW's pairs format, the project's one parser of it. The header is either `N` (one set of
// N matched pairs then N mismatched pairs) or `F N` (F folds, each of N
// matched then N mismatched pairs). A matched pair line is `name i j`; a
// mismatched one `name1 i name2 j`.
func ParsePairs(r io.Reader) (*PairsFile, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 64*1024)
	line := 0
	next := func() ([]string, error) {
		for sc.Scan() {
			line++
			f := strings.Fields(sc.Text())
			if len(f) > 0 {
				return f, nil
			}
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("%w: line %d: %w", ErrPairs, line+1, err)
		}
		return nil, io.EOF
	}
	head, err := next()
	if err != nil {
		return nil, fmt.Errorf("%w: empty file", ErrPairs)
	}
	folds, per := 1, 0
	switch len(head) {
	case 1:
		per, err = strconv.Atoi(head[0])
	case 2:
		folds, err = strconv.Atoi(head[0])
		if err == nil {
			per, err = strconv.Atoi(head[1])
		}
	default:
		err = errors.New("want `N` or `FOLDS N`")
	}
	if err != nil || folds < 1 || per < 1 || folds > maxPairs/per/2 {
		return nil, fmt.Errorf("%w: line %d: bad header %q", ErrPairs, line, strings.Join(head, " "))
	}
	pf := &PairsFile{Folds: folds}
	for fold := 0; fold < folds; fold++ {
		for k := 0; k < 2*per; k++ {
			f, err := next()
			if err == io.EOF {
				return nil, fmt.Errorf("%w: file ends after %d pairs, header promises %d", ErrPairs, len(pf.Pairs), 2*per*folds)
			}
			if err != nil {
				return nil, err
			}
			same := k < per
			p, err := parsePair(f, same)
			if err != nil {
				return nil, fmt.Errorf("%w: line %d: %w", ErrPairs, line, err)
			}
			pf.Pairs = append(pf.Pairs, p)
			pf.Fold = append(pf.Fold, fold)
		}
	}
	if f, err := next(); err == nil {
		return nil, fmt.Errorf("%w: line %d: unexpected extra line %q", ErrPairs, line, strings.Join(f, " "))
	}
	return pf, nil
}

func parsePair(f []string, same bool) (Pair, error) {
	num := func(s string) (int, error) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 9999 {
			return 0, fmt.Errorf("image number %q is not in 1..9999", s)
		}
		return n, nil
	}
	name := func(s string) (string, error) {
		if s == "." || s == ".." || strings.ContainsAny(s, "/\\\x00") {
			return "", fmt.Errorf("name %q is not a plain folder name", s)
		}
		return s, nil
	}
	var p Pair
	var err error
	switch {
	case same && len(f) == 3:
		if p.Name1, err = name(f[0]); err != nil {
			return p, err
		}
		p.Name2 = p.Name1
		if p.Num1, err = num(f[1]); err != nil {
			return p, err
		}
		p.Num2, err = num(f[2])
		p.Same = true
		return p, err
	case !same && len(f) == 4:
		if p.Name1, err = name(f[0]); err != nil {
			return p, err
		}
		if p.Num1, err = num(f[1]); err != nil {
			return p, err
		}
		if p.Name2, err = name(f[2]); err != nil {
			return p, err
		}
		p.Num2, err = num(f[3])
		return p, err
	case same:
		return p, fmt.Errorf("matched pair wants `name i j`, got %d fields", len(f))
	default:
		return p, fmt.Errorf("mismatched pair wants `name1 i name2 j`, got %d fields", len(f))
	}
}
