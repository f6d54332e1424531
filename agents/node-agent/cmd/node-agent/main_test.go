package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"nvkr.dev/node-agent/internal/pci/pcitest"
)

// node is a fake machine: a sysfs tree, a root with staged files, a manifest
// and a place for the label file, all under t.TempDir().
type node struct {
	sysfs, root, manifest, labelsFile string
}

const agentBinary = "#!node-agent\n"

func newNode(t *testing.T, fns ...pcitest.Function) node {
	t.Helper()
	n := node{sysfs: pcitest.Tree(t, fns...), root: t.TempDir()}
	etc := t.TempDir()
	n.manifest = filepath.Join(etc, "manifest.json")
	n.labelsFile = filepath.Join(etc, "nvkr", "node-labels.env")
	staged := []struct{ path, content string }{
		{"/usr/bin/node-agent", agentBinary},
		{"/etc/kubernetes/kubelet-config.yaml", "kind: KubeletConfiguration\n"},
		{"/etc/systemd/system/kubelet.service.d/10-nvkr.conf", "[Service]\nEnvironmentFile=/etc/nvkr/node-labels.env\n"},
	}
	type entry struct {
		Path   string `json:"path"`
		SHA256 string `json:"sha256"`
	}
	var entries []entry
	for _, f := range staged {
		n.write(t, f.path, f.content)
		entries = append(entries, entry{f.path, sha(f.content)})
	}
	data, err := json.Marshal(map[string]any{"files": entries})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(n.manifest, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return n
}

// write stages content at manifest path p under the node's root.
func (n node) write(t *testing.T, p, content string) {
	t.Helper()
	full := filepath.Join(n.root, filepath.FromSlash(p))
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (n node) args(extra ...string) []string {
	return append([]string{
		"--sysfs", n.sysfs,
		"--root", n.root,
		"--manifest", n.manifest,
		"--labels-file", n.labelsFile,
	}, extra...)
}

func TestRun(t *testing.T) {
	const nv = pcitest.VendorNVIDIA
	nvswitches := []pcitest.Function{
		{Address: "0000:05:00.0", Vendor: nv, Device: 0x22a3, Class: pcitest.ClassBridge},
		{Address: "0000:06:00.0", Vendor: nv, Device: 0x22a3, Class: pcitest.ClassBridge},
	}
	tests := []struct {
		name       string
		fns        []pcitest.Function
		setup      func(t *testing.T, n *node) // breaks the node, if the case needs it
		extraArgs  []string
		wantStatus int
		wantStdout string // "{labels}" is replaced by the label file path
		wantStderr []string
		wantLabels string // "" means the label file must not exist
	}{
		{
			name:       "8 H100 with NVSwitches",
			fns:        append(pcitest.GPUs(8, nv, 0x2330, pcitest.Class3D), nvswitches...),
			wantStatus: 0,
			wantStdout: "nvkr-node-agent: ready gpus=8 product=NVIDIA-H100-80GB-HBM3 generation=hopper manifest=ok(3 files) labels={labels}\n",
			wantLabels: "NVKR_NODE_LABELS=nvidia.com/gpu.count=8,nvidia.com/gpu.present=true,nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3,nvkr.dev/gpu-generation=hopper\n",
		},
		{
			name:       "8 A100",
			fns:        pcitest.GPUs(8, nv, 0x20b2, pcitest.Class3D),
			wantStdout: "nvkr-node-agent: ready gpus=8 product=NVIDIA-A100-SXM4-80GB generation=ampere manifest=ok(3 files) labels={labels}\n",
			wantLabels: "NVKR_NODE_LABELS=nvidia.com/gpu.count=8,nvidia.com/gpu.present=true,nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB,nvkr.dev/gpu-generation=ampere\n",
		},
		{
			name:       "1 B200",
			fns:        pcitest.GPUs(1, nv, 0x2901, pcitest.Class3D),
			wantStdout: "nvkr-node-agent: ready gpus=1 product=NVIDIA-B200 generation=blackwell manifest=ok(3 files) labels={labels}\n",
			wantLabels: "NVKR_NODE_LABELS=nvidia.com/gpu.count=1,nvidia.com/gpu.present=true,nvidia.com/gpu.product=NVIDIA-B200,nvkr.dev/gpu-generation=blackwell\n",
		},
		{
			name: "mixed box",
			fns: []pcitest.Function{
				{Address: "0000:10:00.0", Vendor: nv, Device: 0x20b2, Class: pcitest.Class3D},
				{Address: "0000:20:00.0", Vendor: nv, Device: 0x2335, Class: pcitest.Class3D},
			},
			wantStdout: "nvkr-node-agent: ready gpus=2 product=mixed generation=mixed manifest=ok(3 files) labels={labels}\n",
			wantLabels: "NVKR_NODE_LABELS=nvidia.com/gpu.count=2,nvidia.com/gpu.present=true,nvidia.com/gpu.product=mixed,nvkr.dev/gpu-generation=mixed\n",
		},
		{
			name:       "unknown NVIDIA device",
			fns:        []pcitest.Function{{Address: "0000:10:00.0", Vendor: nv, Device: 0x1234, Class: pcitest.Class3D}},
			wantStdout: "nvkr-node-agent: ready gpus=1 product=unknown generation=unknown manifest=ok(3 files) labels={labels}\n",
			wantLabels: "NVKR_NODE_LABELS=nvidia.com/gpu.count=1,nvidia.com/gpu.present=true,nvidia.com/gpu.product=unknown,nvkr.dev/gpu-generation=unknown\n",
		},
		{
			name:       "CPU node: no GPU is not a failure",
			fns:        []pcitest.Function{{Address: "0000:00:00.0", Vendor: pcitest.VendorIntel, Device: 0x1593, Class: pcitest.ClassNIC}},
			wantStdout: "nvkr-node-agent: ready gpus=0 product=none generation=none manifest=ok(3 files) labels={labels}\n",
			wantLabels: "NVKR_NODE_LABELS=nvidia.com/gpu.count=0,nvidia.com/gpu.present=false\n",
		},
		{
			name:       "manifest disabled",
			fns:        pcitest.GPUs(1, nv, 0x2331, pcitest.Class3D),
			setup:      func(t *testing.T, n *node) { n.manifest = "" },
			wantStdout: "nvkr-node-agent: ready gpus=1 product=NVIDIA-H100-PCIe generation=hopper manifest=disabled labels={labels}\n",
			wantLabels: "NVKR_NODE_LABELS=nvidia.com/gpu.count=1,nvidia.com/gpu.present=true,nvidia.com/gpu.product=NVIDIA-H100-PCIe,nvkr.dev/gpu-generation=hopper\n",
		},
		{
			name:       "staged file tampered",
			fns:        pcitest.GPUs(8, nv, 0x2330, pcitest.Class3D),
			setup:      func(t *testing.T, n *node) { n.write(t, "/usr/bin/node-agent", "evil\n") },
			wantStatus: 1,
			wantStdout: "nvkr-node-agent: not-ready reason=file-mismatch path=/usr/bin/node-agent failed=1/3\n",
			wantStderr: []string{"/usr/bin/node-agent: mismatch: expected sha256 " + sha(agentBinary) + ", actual " + sha("evil\n")},
		},
		{
			name: "staged file missing",
			fns:  pcitest.GPUs(1, nv, 0x2330, pcitest.Class3D),
			setup: func(t *testing.T, n *node) {
				if err := os.Remove(filepath.Join(n.root, "usr", "bin", "node-agent")); err != nil {
					t.Fatal(err)
				}
			},
			wantStatus: 1,
			wantStdout: "nvkr-node-agent: not-ready reason=file-missing path=/usr/bin/node-agent failed=1/3\n",
			wantStderr: []string{"/usr/bin/node-agent: missing: expected sha256 " + sha(agentBinary) + ", actual missing"},
		},
		{
			name: "staged file unreadable",
			fns:  pcitest.GPUs(1, nv, 0x2330, pcitest.Class3D),
			setup: func(t *testing.T, n *node) {
				p := filepath.Join(n.root, "etc", "kubernetes", "kubelet-config.yaml")
				if err := os.Remove(p); err != nil {
					t.Fatal(err)
				}
				if err := os.Mkdir(p, 0o755); err != nil {
					t.Fatal(err)
				}
			},
			wantStatus: 1,
			wantStdout: "nvkr-node-agent: not-ready reason=file-unreadable path=/etc/kubernetes/kubelet-config.yaml failed=1/3\n",
			wantStderr: []string{"/etc/kubernetes/kubelet-config.yaml: unreadable: expected sha256 " + sha("kind: KubeletConfiguration\n") + ", actual unreadable ("},
		},
		{
			name: "malformed manifest",
			fns:  pcitest.GPUs(1, nv, 0x2330, pcitest.Class3D),
			setup: func(t *testing.T, n *node) {
				if err := os.WriteFile(n.manifest, []byte(`{"files": [`), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			wantStatus: 1,
			wantStdout: "nvkr-node-agent: not-ready reason=manifest-malformed manifest={manifest}\n",
			wantStderr: []string{"malformed manifest"},
		},
		{
			name: "manifest absent",
			fns:  pcitest.GPUs(1, nv, 0x2330, pcitest.Class3D),
			setup: func(t *testing.T, n *node) {
				if err := os.Remove(n.manifest); err != nil {
					t.Fatal(err)
				}
			},
			wantStatus: 1,
			wantStdout: "nvkr-node-agent: not-ready reason=manifest-unreadable manifest={manifest}\n",
			wantStderr: []string{"read manifest", "no such file or directory"},
		},
		{
			name: "sysfs unreadable",
			fns:  pcitest.GPUs(1, nv, 0x2330, pcitest.Class3D),
			setup: func(t *testing.T, n *node) {
				n.sysfs = filepath.Join(n.sysfs, "absent")
			},
			wantStatus: 1,
			wantStdout: "nvkr-node-agent: not-ready reason=pci-scan-failed\n",
			wantStderr: []string{"read PCI devices"},
		},
		{
			name: "label file cannot be written",
			fns:  pcitest.GPUs(1, nv, 0x2330, pcitest.Class3D),
			setup: func(t *testing.T, n *node) {
				blocker := filepath.Join(t.TempDir(), "file")
				if err := os.WriteFile(blocker, nil, 0o644); err != nil {
					t.Fatal(err)
				}
				n.labelsFile = filepath.Join(blocker, "node-labels.env")
			},
			wantStatus: 1,
			wantStdout: "nvkr-node-agent: not-ready reason=labels-write-failed\n",
			wantStderr: []string{"write labels"},
		},
		{
			name:       "unknown flag",
			extraArgs:  []string{"--frobnicate"},
			wantStatus: 2,
			wantStdout: "nvkr-node-agent: not-ready reason=usage\n",
			wantStderr: []string{"flag provided but not defined: -frobnicate", "usage: nvkr-node-agent"},
		},
		{
			name:       "positional argument",
			extraArgs:  []string{"extra"},
			wantStatus: 2,
			wantStdout: "nvkr-node-agent: not-ready reason=usage\n",
			wantStderr: []string{`unexpected argument "extra"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNode(t, tt.fns...)
			if tt.setup != nil {
				tt.setup(t, &n)
			}
			var stdout, stderr bytes.Buffer
			status := run(n.args(tt.extraArgs...), &stdout, &stderr)
			if status != tt.wantStatus {
				t.Errorf("status = %d, want %d\nstderr:\n%s", status, tt.wantStatus, stderr.String())
			}
			wantStdout := strings.NewReplacer("{labels}", n.labelsFile, "{manifest}", n.manifest).Replace(tt.wantStdout)
			if stdout.String() != wantStdout {
				t.Errorf("stdout =\n%q\nwant\n%q", stdout.String(), wantStdout)
			}
			for _, want := range tt.wantStderr {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr does not contain %q:\n%s", want, stderr.String())
				}
			}
			if tt.wantStatus == 0 && stderr.Len() > 0 {
				t.Errorf("stderr not empty on success:\n%s", stderr.String())
			}
			got, err := os.ReadFile(n.labelsFile)
			switch {
			case tt.wantLabels == "" && err == nil:
				t.Errorf("label file written on failure: %q", got)
			case tt.wantLabels != "" && err != nil:
				t.Errorf("label file: %v", err)
			case tt.wantLabels != "" && string(got) != tt.wantLabels:
				t.Errorf("label file =\n%q\nwant\n%q", got, tt.wantLabels)
			}
		})
	}
}

func TestRunPrintLabels(t *testing.T) {
	n := newNode(t, pcitest.GPUs(8, pcitest.VendorNVIDIA, 0x2901, pcitest.Class3D)...)
	// A broken manifest proves --print-labels does not verify.
	if err := os.WriteFile(n.manifest, []byte("not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if status := run(n.args("--print-labels"), &stdout, &stderr); status != 0 {
		t.Fatalf("status = %d, stderr:\n%s", status, stderr.String())
	}
	want := `{
  "nvidia.com/gpu.count": "8",
  "nvidia.com/gpu.present": "true",
  "nvidia.com/gpu.product": "NVIDIA-B200",
  "nvkr.dev/gpu-generation": "blackwell"
}
`
	if stdout.String() != want {
		t.Errorf("stdout =\n%s\nwant\n%s", stdout.String(), want)
	}
	if _, err := os.Stat(n.labelsFile); !os.IsNotExist(err) {
		t.Errorf("--print-labels wrote %s (stat error %v)", n.labelsFile, err)
	}

	// A scan failure in this mode keeps stdout clean for JSON readers.
	stdout.Reset()
	stderr.Reset()
	if status := run([]string{"--sysfs", filepath.Join(n.sysfs, "absent"), "--print-labels"}, &stdout, &stderr); status != 1 {
		t.Errorf("status = %d, want 1", status)
	}
	if stdout.Len() != 0 || !strings.Contains(stderr.String(), "read PCI devices") {
		t.Errorf("stdout = %q, stderr = %q", stdout.String(), stderr.String())
	}
}

func TestRunVersion(t *testing.T) {
	old := version
	t.Cleanup(func() { version = old })
	for _, v := range []string{"dev", "1.36.0-nvkr.1"} {
		version = v
		var stdout, stderr bytes.Buffer
		if status := run([]string{"--version"}, &stdout, &stderr); status != 0 {
			t.Errorf("status = %d", status)
		}
		if want := "nvkr-node-agent " + v + "\n"; stdout.String() != want {
			t.Errorf("stdout = %q, want %q", stdout.String(), want)
		}
	}
}

func TestRunHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if status := run([]string{"-h"}, &stdout, &stderr); status != 0 {
		t.Errorf("status = %d, want 0", status)
	}
	if stdout.Len() != 0 || !strings.Contains(stderr.String(), "-labels-file") {
		t.Errorf("stdout = %q, stderr = %q", stdout.String(), stderr.String())
	}
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
