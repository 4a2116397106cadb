package tagging

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/veil-privacy/veil/face"
	"github.com/veil-privacy/veil/imaging"
)

// TestConcurrentIndexTakesTurns: two veil library add on one library at
// once both analysed every photo and called each other's photos copies.
// Two runs on two handles of one library (as two processes have) now take
// turns: the second waits, is told the first's pid, and finds every photo
// unchanged.
func TestConcurrentIndexTakesTurns(t *testing.T) {
	l1 := indexTestLibrary(t)
	l2, err := Open(l1.Dir(), []byte("index test"))
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	dir := t.TempDir()
	const n = 6
	for i := range n {
		writePhoto(t, filepath.Join(dir, fmt.Sprintf("p%d.jpg", i)), 200, 150, uint8(20*i))
	}
	// Slow analysis, so that the runs overlap.
	slow := func(img *imaging.RGB) ([]face.Face, error) {
		time.Sleep(30 * time.Millisecond)
		return fakeRun(img)
	}
	var mu sync.Mutex
	var waited []int
	reports := make([]*IndexReport, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	begin := make(chan struct{})
	for k, l := range []*Library{l1, l2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-begin
			opt := IndexOptions{Workers: 1, run: slow, Waiting: func(pid int) {
				mu.Lock()
				waited = append(waited, pid)
				mu.Unlock()
			}}
			reports[k], errs[k] = l.Index(context.Background(), []string{dir}, opt)
		}()
	}
	close(begin)
	wg.Wait()
	for k, err := range errs {
		if err != nil {
			t.Fatalf("run %d: %v", k, err)
		}
	}
	added := reports[0].Added + reports[1].Added
	dups := reports[0].Duplicates + reports[1].Duplicates
	unchanged := reports[0].Unchanged + reports[1].Unchanged
	if added != n || dups != 0 || unchanged != n {
		t.Errorf("added %d, copies %d, unchanged %d in all; want %d, 0, %d (reports %+v / %+v)", added, dups, unchanged, n, n, countsOf(reports[0]), countsOf(reports[1]))
	}
	if len(waited) != 1 || waited[0] != os.Getpid() {
		t.Errorf("told of waiting %v, want once, with this process's pid %d", waited, os.Getpid())
	}
	st, err := l1.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Photos != n {
		t.Errorf("%d photos recorded, want %d", st.Photos, n)
	}
}

// TestIndexWaitStopsWithItsContext: a run waiting for the lock stops when
// its context ends, having done nothing.
func TestIndexWaitStopsWithItsContext(t *testing.T) {
	l1 := indexTestLibrary(t)
	l2, err := Open(l1.Dir(), []byte("index test"))
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	unlock, err := l1.lockIndexing(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	dir := t.TempDir()
	writePhoto(t, filepath.Join(dir, "a.jpg"), 200, 150, 10)
	ctx, cancel := context.WithCancel(context.Background())
	rep, err := l2.Index(ctx, []string{dir}, IndexOptions{run: fakeRun, Waiting: func(int) { cancel() }})
	if !errors.Is(err, context.Canceled) || rep != nil {
		t.Fatalf("waiting, cancelled: report %v, err %v", rep, err)
	}
	if st, err := l2.Status(context.Background()); err != nil || st.Photos != 0 {
		t.Errorf("photos %v, err %v; want none recorded", st, err)
	}
	// Once released, the lock is free again.
	unlock()
	if rep := fakeIndex(t, l2, IndexOptions{}, dir); rep.Added != 1 {
		t.Errorf("after the release: %+v", countsOf(rep))
	}
}
