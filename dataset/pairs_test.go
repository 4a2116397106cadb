package dataset

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParsePairs(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		folds     int
		pairs     int
		wantErr   string
		firstSame bool
	}{
		{"single set", "2\nA 1 2\nB 3 4\nA 1 C 2\nB 2 D 5\n", 1, 4, "", true},
		{"folds", "2 1\nA 1 2\nA 1 C 2\nB 1 2\nB 1 D 1\n", 2, 4, "", true},
		{"blank lines ok", "\n1\n\nA 1 2\nA 1 B 1\n\n", 1, 2, "", true},
		{"empty", "", 0, 0, "empty file", false},
		{"bad header", "x\n", 0, 0, "bad header", false},
		{"zero header", "0\n", 0, 0, "bad header", false},
		{"short", "2\nA 1 2\n", 0, 0, "file ends after 1 pairs", false},
		{"bad matched", "1\nA 1\nA 1 B 1\n", 0, 0, "matched pair wants", false},
		{"bad mismatched", "1\nA 1 2\nA 1 B\n", 0, 0, "mismatched pair wants", false},
		{"bad number", "1\nA x 2\nA 1 B 1\n", 0, 0, "image number", false},
		{"path escape", "1\n../etc 1 2\nA 1 B 1\n", 0, 0, "plain folder name", false},
		{"extra line", "1\nA 1 2\nA 1 B 1\nC 1 2\n", 0, 0, "extra line", false},
		{"huge header", "100000 100000\n", 0, 0, "bad header", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pf, err := ParsePairs(strings.NewReader(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrPairs) {
					t.Fatalf("err = %v, want ErrPairs mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if pf.Folds != tc.folds || len(pf.Pairs) != tc.pairs || pf.Pairs[0].Same != tc.firstSame {
				t.Fatalf("got folds %d pairs %d first %+v", pf.Folds, len(pf.Pairs), pf.Pairs[0])
			}
		})
	}
}

func TestReadLFWDevPairs(t *testing.T) {
	pf, err := ReadPairsFile(filepath.Join("testdata", "pairs_10fold.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if pf.Folds != 10 || len(pf.Pairs) != 40 || pf.Fold[39] != 9 || pf.Pairs[2].Same || !pf.Pairs[0].Same {
		t.Fatalf("unexpected parse: folds %d pairs %d", pf.Folds, len(pf.Pairs))
	}
	p := Pair{Name1: "Aaron_Peirsol", Num1: 1, Name2: "Aaron_Peirsol", Num2: 12}
	if got := p.ImagePath("/d", true); got != "/d/Aaron_Peirsol/Aaron_Peirsol_0012.jpg" {
		t.Fatalf("ImagePath = %s", got)
	}
}

func FuzzParsePairs(f *testing.F) {
	seed, err := os.ReadFile(filepath.Join("testdata", "pairs_10fold.txt"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte("1\nA 1 2\nA 1 B 1\n"))
	f.Add([]byte("3 1000000\n"))
	f.Add([]byte("1\nAlice_A\t1\t2\nAlice_A\t1\tBob_B\t1\n"))
	f.Add([]byte("0\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		pf, err := ParsePairs(strings.NewReader(string(b)))
		if err != nil {
			return
		}
		if len(pf.Pairs) != len(pf.Fold) || len(pf.Pairs) == 0 {
			t.Fatalf("inconsistent parse: %d pairs %d folds", len(pf.Pairs), len(pf.Fold))
		}
		for _, x := range pf.Pairs {
			if x.Num1 < 1 || x.Num1 > 9999 || x.Num2 < 1 || x.Num2 > 9999 || checkName(x.Name1) != nil || checkName(x.Name2) != nil {
				t.Fatalf("accepted bad pair %+v", x)
			}
			if x.Same && x.Name1 != x.Name2 {
				t.Fatalf("matched pair of two people %+v", x)
			}
		}
	})
}
