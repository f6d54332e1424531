package labels_test

import (
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"nvkr.dev/node-agent/internal/gpu"
	"nvkr.dev/node-agent/internal/labels"
)

func TestEnvFileContent(t *testing.T) {
	tests := []struct {
		name    string
		summary gpu.Summary
		want    string
	}{
		{
			name:    "no GPU",
			summary: gpu.Summary{},
			want:    "NVKR_NODE_LABELS=nvidia.com/gpu.count=0,nvidia.com/gpu.present=false\n",
		},
		{
			name:    "8 H100",
			summary: gpu.Summary{Count: 8, Product: "NVIDIA H100 80GB HBM3", Generation: gpu.Hopper},
			want: "NVKR_NODE_LABELS=nvidia.com/gpu.count=8,nvidia.com/gpu.present=true," +
				"nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3,nvkr.dev/gpu-generation=hopper\n",
		},
		{
			name:    "1 A100 80GB PCIe",
			summary: gpu.Summary{Count: 1, Product: "NVIDIA A100 80GB PCIe", Generation: gpu.Ampere},
			want: "NVKR_NODE_LABELS=nvidia.com/gpu.count=1,nvidia.com/gpu.present=true," +
				"nvidia.com/gpu.product=NVIDIA-A100-80GB-PCIe,nvkr.dev/gpu-generation=ampere\n",
		},
		{
			name:    "16 B200",
			summary: gpu.Summary{Count: 16, Product: "NVIDIA B200", Generation: gpu.Blackwell},
			want: "NVKR_NODE_LABELS=nvidia.com/gpu.count=16,nvidia.com/gpu.present=true," +
				"nvidia.com/gpu.product=NVIDIA-B200,nvkr.dev/gpu-generation=blackwell\n",
		},
		{
			name:    "mixed",
			summary: gpu.Summary{Count: 3, Product: gpu.MixedProduct, Generation: gpu.Mixed},
			want: "NVKR_NODE_LABELS=nvidia.com/gpu.count=3,nvidia.com/gpu.present=true," +
				"nvidia.com/gpu.product=mixed,nvkr.dev/gpu-generation=mixed\n",
		},
		{
			name:    "unknown",
			summary: gpu.Summary{Count: 1, Product: gpu.UnknownProduct, Generation: gpu.Unknown},
			want: "NVKR_NODE_LABELS=nvidia.com/gpu.count=1,nvidia.com/gpu.present=true," +
				"nvidia.com/gpu.product=unknown,nvkr.dev/gpu-generation=unknown\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set := labels.FromSummary(tt.summary)
			if got := string(set.EnvFile()); got != tt.want {
				t.Errorf("EnvFile =\n%q\nwant\n%q", got, tt.want)
			}
			path := filepath.Join(t.TempDir(), "etc", "nvkr", "node-labels.env")
			if err := labels.WriteEnvFile(path, set); err != nil {
				t.Fatalf("WriteEnvFile: %v", err)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("file content =\n%q\nwant\n%q", got, tt.want)
			}
			for _, k := range set.Keys() {
				if !labels.ValidValue(set[k]) {
					t.Errorf("label %s=%q is not a valid label value", k, set[k])
				}
			}
		})
	}
}

func TestWriteEnvFileReplacesAtomically(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "node-labels.env")
	if err := os.WriteFile(path, []byte("stale\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	set := labels.FromSummary(gpu.Summary{Count: 2, Product: "NVIDIA H200", Generation: gpu.Hopper})
	if err := labels.WriteEnvFile(path, set); err != nil {
		t.Fatalf("WriteEnvFile: %v", err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if mode := info.Mode().Perm(); mode != labels.FileMode {
		t.Errorf("mode = %v, want %v", mode, os.FileMode(labels.FileMode))
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(set.EnvFile()) {
		t.Errorf("content = %q, want %q", got, set.EnvFile())
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %v, want only node-labels.env (temp file left behind?)", names)
	}
}

func TestWriteEnvFileFails(t *testing.T) {
	// The parent "directory" is a regular file, so nothing can be created.
	parent := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(parent, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err := labels.WriteEnvFile(filepath.Join(parent, "node-labels.env"), labels.Set{})
	if err == nil || !strings.Contains(err.Error(), "write labels") {
		t.Fatalf("WriteEnvFile error = %v, want a write labels error", err)
	}
}

func TestJSON(t *testing.T) {
	set := labels.FromSummary(gpu.Summary{Count: 8, Product: "NVIDIA B200", Generation: gpu.Blackwell})
	want := `{
  "nvidia.com/gpu.count": "8",
  "nvidia.com/gpu.present": "true",
  "nvidia.com/gpu.product": "NVIDIA-B200",
  "nvkr.dev/gpu-generation": "blackwell"
}
`
	if got := string(set.JSON()); got != want {
		t.Errorf("JSON =\n%s\nwant\n%s", got, want)
	}
}

func TestValue(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"},
		{"NVIDIA A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB"},
		{"NVIDIA A100 80GB PCIe", "NVIDIA-A100-80GB-PCIe"},
		{"hopper", "hopper"},
		{"GH100 [H100 SXM5 80GB]", "GH100--H100-SXM5-80GB"},
		{"  padded  ", "padded"},
		{"a/b:c", "a-b-c"},
		{"naïve", "na--ve"},
		{"---", "unknown"},
		{"", "unknown"},
		{strings.Repeat("x", 70), strings.Repeat("x", 63)},
		{strings.Repeat("x", 62) + " y", strings.Repeat("x", 62)},
	}
	for _, tt := range tests {
		got := labels.Value(tt.in)
		if got != tt.want {
			t.Errorf("Value(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if !labels.ValidValue(got) {
			t.Errorf("Value(%q) = %q is not a valid label value", tt.in, got)
		}
	}
}

func TestValidValue(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{"NVIDIA-H100-80GB-HBM3", true},
		{"a.b_c-d", true},
		{"x", true},
		{"", false},
		{"-leading", false},
		{"trailing.", false},
		{"has space", false},
		{strings.Repeat("x", 63), true},
		{strings.Repeat("x", 64), false},
	}
	for _, tt := range tests {
		if got := labels.ValidValue(tt.in); got != tt.want {
			t.Errorf("ValidValue(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestOwnedKeysAndMissing(t *testing.T) {
	owned := labels.OwnedKeys()
	if !sort.StringsAreSorted(owned) || len(owned) != 4 {
		t.Errorf("OwnedKeys = %q, want the four keys sorted", owned)
	}
	tests := []struct {
		name    string
		summary gpu.Summary
		missing []string
	}{
		{"no GPU", gpu.Summary{}, []string{labels.KeyProduct, labels.KeyGeneration}},
		{"8 H100", gpu.Summary{Count: 8, Product: "NVIDIA H100 80GB HBM3", Generation: gpu.Hopper}, nil},
	}
	for _, tt := range tests {
		set := labels.FromSummary(tt.summary)
		if got := set.Missing(); !reflect.DeepEqual(got, tt.missing) {
			t.Errorf("%s: Missing = %q, want %q", tt.name, got, tt.missing)
		}
		// Set and Missing partition the owned keys: every key FromSummary
		// returns is owned, so the agent never writes a foreign label.
		all := append(set.Keys(), set.Missing()...)
		sort.Strings(all)
		if !reflect.DeepEqual(all, owned) {
			t.Errorf("%s: keys %q plus missing %q are not the owned keys %q", tt.name, set.Keys(), set.Missing(), owned)
		}
	}
}
