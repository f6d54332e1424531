package labels

import (
	"fmt"
	"os"
	"path/filepath"
)

// FileMode is the mode of the label file: kubelet's drop-in runs as root, but
// the labels are no secret and debugging tools may read them.
const FileMode = 0o644

// WriteEnvFile writes s.EnvFile() to path atomically: into a temporary file in
// the same directory, synced, chmod FileMode, then renamed over path, so
// kubelet never reads a half-written file even if the node loses power. The
// directory is created (mode 0755) if missing.
func WriteEnvFile(path string, s Set) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write labels: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write labels: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(s.EnvFile()); err != nil {
		return fmt.Errorf("write labels: %w", err)
	}
	// CreateTemp makes the file 0600; chmod rather than rely on the umask.
	if err := tmp.Chmod(FileMode); err != nil {
		return fmt.Errorf("write labels: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("write labels: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write labels: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write labels: %w", err)
	}
	// Persist the rename itself. Best effort: some filesystems refuse to
	// sync a directory, and the file is already complete either way.
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
