package manifest_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"nvkr.dev/node-agent/internal/manifest"
)

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// stage writes files (manifest path to content) under a fresh root.
func stage(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		full := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestVerify(t *testing.T) {
	agent, config := "agent binary\n", "kubelet config\n"
	m := &manifest.Manifest{Files: []manifest.File{
		{Path: "/usr/bin/node-agent", SHA256: digest(agent)},
		{Path: "/etc/kubernetes/kubelet.conf", SHA256: digest(config)},
	}}
	tests := []struct {
		name   string
		staged map[string]string
		want   []manifest.Problem
	}{
		{
			name:   "all files match",
			staged: map[string]string{"/usr/bin/node-agent": agent, "/etc/kubernetes/kubelet.conf": config},
		},
		{
			name:   "one file differs",
			staged: map[string]string{"/usr/bin/node-agent": "tampered\n", "/etc/kubernetes/kubelet.conf": config},
			want: []manifest.Problem{{
				Kind: manifest.KindMismatch, Path: "/usr/bin/node-agent",
				Expected: digest(agent), Actual: digest("tampered\n"),
			}},
		},
		{
			name:   "one file missing",
			staged: map[string]string{"/usr/bin/node-agent": agent},
			want: []manifest.Problem{{
				Kind: manifest.KindMissing, Path: "/etc/kubernetes/kubelet.conf",
				Expected: digest(config), Actual: "missing",
			}},
		},
		{
			name:   "every problem reported, in manifest order",
			staged: map[string]string{"/etc/kubernetes/kubelet.conf": ""},
			want: []manifest.Problem{
				{Kind: manifest.KindMissing, Path: "/usr/bin/node-agent", Expected: digest(agent), Actual: "missing"},
				{Kind: manifest.KindMismatch, Path: "/etc/kubernetes/kubelet.conf", Expected: digest(config), Actual: digest("")},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := manifest.Verify(m, stage(t, tt.staged))
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Verify =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

func TestVerifyUnreadable(t *testing.T) {
	// A directory where a file should be: it opens but cannot be read.
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "usr", "bin", "node-agent"), 0o755); err != nil {
		t.Fatal(err)
	}
	m := &manifest.Manifest{Files: []manifest.File{{Path: "/usr/bin/node-agent", SHA256: digest("x")}}}
	got := manifest.Verify(m, root)
	if len(got) != 1 || got[0].Kind != manifest.KindUnreadable || !strings.HasPrefix(got[0].Actual, "unreadable (") {
		t.Fatalf("Verify = %+v, want one unreadable problem", got)
	}
	line := got[0].String()
	for _, want := range []string{"/usr/bin/node-agent", digest("x"), "unreadable"} {
		if !strings.Contains(line, want) {
			t.Errorf("Problem.String() = %q, want it to contain %q", line, want)
		}
	}
}

func TestParse(t *testing.T) {
	d := digest("x")
	tests := []struct {
		name    string
		json    string
		want    *manifest.Manifest
		wantErr string
	}{
		{
			name: "valid",
			json: `{"files": [{"path": "/usr/bin/node-agent", "sha256": "` + d + `"}, {"path": "/etc/a", "sha256": "` + d + `"}]}`,
			want: &manifest.Manifest{Files: []manifest.File{{Path: "/usr/bin/node-agent", SHA256: d}, {Path: "/etc/a", SHA256: d}}},
		},
		{name: "not JSON", json: `files: []`, wantErr: "invalid character"},
		{name: "truncated", json: `{"files": [`, wantErr: "unexpected EOF"},
		{name: "empty input", json: ``, wantErr: "EOF"},
		{name: "array at top level", json: `[]`, wantErr: "cannot unmarshal array"},
		{name: "trailing data", json: `{"files": [{"path": "/a", "sha256": "` + d + `"}]} {}`, wantErr: "data after the JSON object"},
		{name: "unknown top-level field", json: `{"files": [], "version": 1}`, wantErr: `unknown field "version"`},
		{name: "unknown file field", json: `{"files": [{"path": "/a", "sha256": "` + d + `", "mode": 420}]}`, wantErr: `unknown field "mode"`},
		{name: "no files key", json: `{}`, wantErr: `no "files" list`},
		{name: "null files", json: `{"files": null}`, wantErr: `no "files" list`},
		{name: "empty files", json: `{"files": []}`, wantErr: `"files" is empty`},
		{name: "relative path", json: `{"files": [{"path": "usr/bin/x", "sha256": "` + d + `"}]}`, wantErr: "not absolute and clean"},
		{name: "path escaping root", json: `{"files": [{"path": "/../etc/shadow", "sha256": "` + d + `"}]}`, wantErr: "not absolute and clean"},
		{name: "missing path", json: `{"files": [{"sha256": "` + d + `"}]}`, wantErr: "not absolute and clean"},
		{name: "duplicate path", json: `{"files": [{"path": "/a", "sha256": "` + d + `"}, {"path": "/a", "sha256": "` + d + `"}]}`, wantErr: "duplicate path /a"},
		{name: "short digest", json: `{"files": [{"path": "/a", "sha256": "abc"}]}`, wantErr: "not 64 lowercase hex digits"},
		{name: "uppercase digest", json: `{"files": [{"path": "/a", "sha256": "` + strings.ToUpper(d) + `"}]}`, wantErr: "not 64 lowercase hex digits"},
		{name: "prefixed digest", json: `{"files": [{"path": "/a", "sha256": "sha256:` + d[:57] + `"}]}`, wantErr: "not 64 lowercase hex digits"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := manifest.Parse([]byte(tt.json))
			if tt.wantErr != "" {
				if !errors.Is(err, manifest.ErrMalformed) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse error = %v, want ErrMalformed containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Parse = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "manifest.json")
	if err := os.WriteFile(good, []byte(`{"files": [{"path": "/a", "sha256": "`+digest("a")+`"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"files": `), 0o644); err != nil {
		t.Fatal(err)
	}

	if m, err := manifest.Load(good); err != nil || len(m.Files) != 1 {
		t.Errorf("Load(good) = %+v, %v; want one file", m, err)
	}
	if _, err := manifest.Load(filepath.Join(dir, "absent.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(absent) error = %v, want ErrNotExist", err)
	}
	_, err := manifest.Load(bad)
	if !errors.Is(err, manifest.ErrMalformed) || !strings.Contains(err.Error(), bad) {
		t.Errorf("Load(bad) error = %v, want ErrMalformed naming %s", err, bad)
	}
}
