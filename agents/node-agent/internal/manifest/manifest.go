// Package manifest checks the files staged on a node against the digests the
// build recorded for them.
//
// The build stages files into the node image together with a manifest
// (by default /etc/nvkr/manifest.json) listing each with its sha256. At boot the agent
// rehashes them: a node whose files differ from what the release set says was
// built must not join the cluster. The manifest is read strictly (unknown
// fields, duplicate or relative paths and malformed digests are errors), since
// a manifest that parses loosely can silently check less than it claims to.
package manifest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
)

// ErrMalformed marks a manifest that was read but is not valid.
var ErrMalformed = errors.New("malformed manifest")

// File is one staged file and its expected digest.
type File struct {
	// Path is absolute and clean, e.g. "/usr/bin/node-agent".
	Path string `json:"path"`
	// SHA256 is the lowercase hex sha256 of the file's content.
	SHA256 string `json:"sha256"`
}

// Manifest lists the staged files in the order the build wrote them.
type Manifest struct {
	Files []File `json:"files"`
}

// Load reads and validates the manifest in the file name. It returns an
// error wrapping the os error if the file cannot be read, or wrapping
// ErrMalformed if it is not a valid manifest: not a single JSON object, an
// unknown field, no "files", an empty list, a path that is not absolute and
// clean, a duplicate path, or a digest that is not 64 lowercase hex digits.
func Load(name string) (*Manifest, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	m, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return m, nil
}

// Parse validates a manifest held in memory; see Load.
func Parse(data []byte) (*Manifest, error) {
	var raw struct {
		Files *[]File `json:"files"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: data after the JSON object", ErrMalformed)
	}
	if raw.Files == nil {
		return nil, fmt.Errorf("%w: no \"files\" list", ErrMalformed)
	}
	m := &Manifest{Files: *raw.Files}
	if len(m.Files) == 0 {
		return nil, fmt.Errorf("%w: \"files\" is empty", ErrMalformed)
	}
	seen := make(map[string]bool, len(m.Files))
	for i, f := range m.Files {
		if f.Path == "" || !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path {
			return nil, fmt.Errorf("%w: files[%d]: path %q is not absolute and clean", ErrMalformed, i, f.Path)
		}
		if seen[f.Path] {
			return nil, fmt.Errorf("%w: files[%d]: duplicate path %s", ErrMalformed, i, f.Path)
		}
		seen[f.Path] = true
		if !isDigest(f.SHA256) {
			return nil, fmt.Errorf("%w: files[%d] %s: sha256 %q is not 64 lowercase hex digits", ErrMalformed, i, f.Path, f.SHA256)
		}
	}
	return m, nil
}

func isDigest(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Problem kinds.
const (
	KindMismatch   = "mismatch"
	KindMissing    = "missing"
	KindUnreadable = "unreadable"
)

// Problem is one staged file that failed verification.
type Problem struct {
	Kind     string // KindMismatch, KindMissing or KindUnreadable
	Path     string // the manifest path, without the root prefix
	Expected string // sha256 hex from the manifest
	// Actual is the sha256 hex of the file, "missing", or
	// "unreadable (<error>)".
	Actual string
}

func (p Problem) String() string {
	return fmt.Sprintf("%s: %s: expected sha256 %s, actual %s", p.Path, p.Kind, p.Expected, p.Actual)
}

// Verify hashes every file in m, each read at root joined with its manifest
// path, and returns the files that are missing, unreadable or differ, in
// manifest order. It checks every file rather than stopping at the first
// problem, so one boot log shows everything that is wrong.
func Verify(m *Manifest, root string) []Problem {
	var problems []Problem
	for _, f := range m.Files {
		actual, err := hashFile(filepath.Join(root, filepath.FromSlash(f.Path)))
		switch {
		case errors.Is(err, os.ErrNotExist):
			problems = append(problems, Problem{KindMissing, f.Path, f.SHA256, "missing"})
		case err != nil:
			problems = append(problems, Problem{KindUnreadable, f.Path, f.SHA256, "unreadable (" + err.Error() + ")"})
		case actual != f.SHA256:
			problems = append(problems, Problem{KindMismatch, f.Path, f.SHA256, actual})
		}
	}
	return problems
}

func hashFile(name string) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
