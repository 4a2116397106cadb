package tagging

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// IndexLockFile is the file in a library's folder that indexing holds an
// exclusive lock on (flock), so that two runs of veil library add on one
// library take turns instead of both analysing every photo and calling
// each other's photos copies. The lock goes with the process: a run that
// is killed leaves the file but not the lock. The file holds the pid of
// the process indexing.
const IndexLockFile = "index.lock"

// indexLockPoll is how often a run waiting for the lock tries again.
const indexLockPoll = 100 * time.Millisecond

// unknownHolderPolls is how many polls a waiting run gives the holder to
// write its pid before it reports the holder as unknown.
const unknownHolderPolls = 10

// errLocked is what tryLock returns when another holds the lock.
var errLocked = errors.New("locked")

// lockIndexing takes the library's indexing lock, waiting while another
// run (in this or another process) holds it: waiting, if set, is called
// once, with the pid the holder wrote (0 if unknown), before the wait.
// It stops waiting when ctx is done, with ctx's error. The returned
// function releases the lock (calling it again does nothing).
func (l *Library) lockIndexing(ctx context.Context, waiting func(pid int)) (func(), error) {
	path := filepath.Join(l.dir, IndexLockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("indexing: the lock file: %w", err)
	}
	told, polls := false, 0
	for {
		err := tryLock(f)
		if err == nil {
			break
		}
		if !errors.Is(err, errLocked) {
			f.Close()
			return nil, fmt.Errorf("indexing: locking %s: %w", path, err)
		}
		if !told && waiting != nil {
			// The holder writes its pid just after it takes the lock: a
			// file still empty is given up to a second before the holder
			// is reported as unknown.
			if pid := lockHolder(path); pid != 0 || polls >= unknownHolderPolls {
				waiting(pid)
				told = true
			}
		}
		polls++
		t := time.NewTimer(indexLockPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			f.Close()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
	// The holder's pid, for the next run's message.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			unlock(f)
			f.Close()
		})
	}, nil
}

// lockHolder reads the pid a lock file holds (0 if none can be read).
func lockHolder(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid < 0 {
		return 0
	}
	return pid
}
