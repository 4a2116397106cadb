package tagging

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/veil-privacy/veil/internal/digest"
)

// FileError is a file the library could not read, with the reason in
// words for the user. The reason never holds a descriptor or a name: only
// what went wrong reading or decoding the file.
type FileError struct {
	Path string `json:"path"`
	Err  string `json:"error"`
}

// ScanResult is what Scan found under its roots.
type ScanResult struct {
	// Files are the photos found, as absolute clean paths through any
	// symbolic links followed (not the links' targets), each once, in
	// the order of the roots and then by name.
	Files []string
	// Errors are the folders and files that could not be listed or are
	// photos in a format the library does not read.
	Errors []FileError
}

// photoExtensions are the extensions of the formats package imaging
// decodes: Scan takes files with these from folders.
var photoExtensions = map[string]bool{".jpg": true, ".jpeg": true, ".jpe": true, ".jfif": true, ".png": true}

// unsupportedPhotos are photo formats a camera or phone may write as the
// only copy of a photo that imaging cannot decode: Scan lists them as
// errors so the user learns they were not indexed. Camera raw files are
// not listed: cameras write them beside a JPEG, which is indexed.
var unsupportedPhotos = map[string]string{
	".heic": "HEIC", ".heif": "HEIF", ".avif": "AVIF", ".webp": "WebP",
	".gif": "GIF", ".tif": "TIFF", ".tiff": "TIFF", ".bmp": "BMP",
}

// IsPhotoName reports whether a file name has the extension of a format
// the library reads (JPEG or PNG), in any letter case.
func IsPhotoName(name string) bool {
	return photoExtensions[strings.ToLower(filepath.Ext(name))]
}

// Scan lists the photos under roots. A root that is a file is taken
// whatever its name (the indexer reports it if it is not a photo); a root
// that is a folder is walked recursively, taking the files whose extension
// IsPhotoName accepts. Symbolic links are followed, to files and to
// folders; a folder reached twice, through a link loop or two links to
// it, is walked once (folders are identified by their real path). Names
// starting with "." (hidden files and folders such as .git or
// .thumbnails) are skipped inside folders. A root that does not exist is
// an error; everything else that cannot be read is listed in Errors and
// the walk goes on. Scan stops with ctx's error when ctx is done.
func Scan(ctx context.Context, roots []string) (*ScanResult, error) {
	s := &scanner{ctx: ctx, res: &ScanResult{}, seenDirs: map[string]bool{}, seenFiles: map[string]bool{}}
	for _, root := range roots {
		abs, err := filepath.Abs(root)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", root, err)
		}
		st, err := os.Stat(abs)
		if err != nil {
			return nil, fmt.Errorf("cannot read %s: %w", root, unwrapPath(err))
		}
		if st.IsDir() {
			if err := s.dir(abs); err != nil {
				return nil, err
			}
		} else {
			s.file(abs)
		}
	}
	return s.res, nil
}

type scanner struct {
	ctx       context.Context
	res       *ScanResult
	seenDirs  map[string]bool // real paths of the folders walked
	seenFiles map[string]bool
}

func (s *scanner) fail(path string, err error) {
	s.res.Errors = append(s.res.Errors, FileError{Path: path, Err: err.Error()})
}

func (s *scanner) file(path string) {
	if !s.seenFiles[path] {
		s.seenFiles[path] = true
		s.res.Files = append(s.res.Files, path)
	}
}

// dir walks the folder at path (absolute, clean).
func (s *scanner) dir(path string) error {
	if err := s.ctx.Err(); err != nil {
		return err
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		s.fail(path, unwrapPath(err))
		return nil
	}
	if s.seenDirs[real] {
		return nil
	}
	s.seenDirs[real] = true
	entries, err := os.ReadDir(path)
	if err != nil && len(entries) == 0 {
		s.fail(path, fmt.Errorf("cannot list the folder: %w", unwrapPath(err)))
		return nil
	}
	if err != nil { // some entries were read: take them, report the rest
		s.fail(path, fmt.Errorf("folder listed only in part: %w", unwrapPath(err)))
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		p := filepath.Join(path, name)
		typ := e.Type()
		if typ&fs.ModeSymlink != 0 {
			st, err := os.Stat(p)
			if err != nil {
				if IsPhotoName(name) || errors.Is(err, fs.ErrNotExist) {
					s.fail(p, fmt.Errorf("broken symbolic link: %w", unwrapPath(err)))
				}
				continue
			}
			typ = st.Mode().Type()
		}
		switch {
		case typ.IsDir():
			if err := s.dir(p); err != nil {
				return err
			}
		case !typ.IsRegular():
			// sockets, devices, pipes: never photos
		case IsPhotoName(name):
			s.file(p)
		default:
			if f, ok := unsupportedPhotos[strings.ToLower(filepath.Ext(name))]; ok {
				s.fail(p, fmt.Errorf("%s photos are not supported (JPEG and PNG are)", f))
			}
		}
	}
	return nil
}

// unwrapPath drops an *fs.PathError's operation and path, which the
// FileError names already, keeping the reason ("permission denied").
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Content is a photo file's bytes with their SHA-256 and size.
type Content struct {
	Data   []byte
	SHA256 [sha256.Size]byte
	Size   int64

	// stamp is the file's stamp, taken before it was read (see fileStamp).
	stamp fileStamp
}

// ReadContent reads a photo file of at most maxBytes bytes and hashes it.
// A larger file is refused from its size before it is read (and if it
// grows while being read). Errors say what went wrong without the path,
// which the caller records beside them.
func ReadContent(path string, maxBytes int64) (*Content, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, unwrapPath(err)
	}
	defer f.Close()
	now := time.Now()
	st, err := f.Stat()
	if err != nil {
		return nil, unwrapPath(err)
	}
	if !st.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	if st.Size() > maxBytes {
		return nil, fmt.Errorf("file is %d bytes, over the %d-byte limit", st.Size(), maxBytes)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxBytes+1))
	if err != nil {
		return nil, unwrapPath(err)
	}
	if int64(len(data)) > maxBytes {
		return nil, fmt.Errorf("file grew past the %d-byte limit while being read", maxBytes)
	}
	c := &Content{Data: data, SHA256: digest.Sum256(data), Size: int64(len(data))}
	if c.Size == st.Size() {
		c.stamp = stampOf(st, now)
	}
	return c, nil
}
