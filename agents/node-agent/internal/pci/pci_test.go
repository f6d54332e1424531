package pci_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"nvkr.dev/node-agent/internal/pci"
	"nvkr.dev/node-agent/internal/pci/pcitest"
)

func TestScan(t *testing.T) {
	tests := []struct {
		name string
		fns  []pcitest.Function
		want []pci.Device
	}{
		{
			name: "empty bus",
			want: []pci.Device{},
		},
		{
			name: "one function",
			fns:  []pcitest.Function{{Address: "0000:3b:00.0", Vendor: 0x10de, Device: 0x2330, Class: 0x030200}},
			want: []pci.Device{{Address: "0000:3b:00.0", Vendor: 0x10de, Device: 0x2330, Class: 0x030200}},
		},
		{
			name: "sorted numerically by domain, bus, device, function",
			fns: []pcitest.Function{
				{Address: "10000:00:00.0", Vendor: 0x8086, Device: 0x0001, Class: 0x060400},
				{Address: "0000:ff:1f.7", Vendor: 0x8086, Device: 0x0002, Class: 0x088000},
				{Address: "0000:3b:00.1", Vendor: 0x10de, Device: 0x22e8, Class: 0x040300},
				{Address: "0000:3b:00.0", Vendor: 0x10de, Device: 0x2330, Class: 0x030200},
				{Address: "0001:00:00.0", Vendor: 0x8086, Device: 0x0003, Class: 0x020000},
			},
			want: []pci.Device{
				{Address: "0000:3b:00.0", Vendor: 0x10de, Device: 0x2330, Class: 0x030200},
				{Address: "0000:3b:00.1", Vendor: 0x10de, Device: 0x22e8, Class: 0x040300},
				{Address: "0000:ff:1f.7", Vendor: 0x8086, Device: 0x0002, Class: 0x088000},
				{Address: "0001:00:00.0", Vendor: 0x8086, Device: 0x0003, Class: 0x020000},
				{Address: "10000:00:00.0", Vendor: 0x8086, Device: 0x0001, Class: 0x060400},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := pcitest.Tree(t, tt.fns...)
			got, err := pci.Scan(root)
			if err != nil {
				t.Fatalf("Scan: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Scan =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

func TestScanErrors(t *testing.T) {
	good := pcitest.Function{Address: "0000:3b:00.0", Vendor: 0x10de, Device: 0x2330, Class: 0x030200}
	tests := []struct {
		name    string
		breakIt func(t *testing.T, root string)
		wantErr string
	}{
		{
			name:    "no devices directory",
			breakIt: func(t *testing.T, root string) { mustRemoveAll(t, filepath.Join(root, "bus")) },
			wantErr: "read PCI devices",
		},
		{
			name:    "missing class file",
			breakIt: func(t *testing.T, root string) { mustRemoveAll(t, attr(root, "class")) },
			wantErr: "class",
		},
		{
			name:    "vendor without 0x prefix",
			breakIt: func(t *testing.T, root string) { mustWrite(t, attr(root, "vendor"), "10de\n") },
			wantErr: "not a 0x-prefixed hex number",
		},
		{
			name:    "device id wider than 16 bits",
			breakIt: func(t *testing.T, root string) { mustWrite(t, attr(root, "device"), "0x12330\n") },
			wantErr: "not a 16-bit hex number",
		},
		{
			name:    "class not hex",
			breakIt: func(t *testing.T, root string) { mustWrite(t, attr(root, "class"), "0x03zz00\n") },
			wantErr: "not a 24-bit hex number",
		},
		{
			name: "entry that is not a PCI address",
			breakIt: func(t *testing.T, root string) {
				if err := os.Mkdir(filepath.Join(pci.DevicesDir(root), "garbage"), 0o755); err != nil {
					t.Fatal(err)
				}
			},
			wantErr: `"garbage" is not a PCI address`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := pcitest.Tree(t, good)
			tt.breakIt(t, root)
			_, err := pci.Scan(root)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Scan error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestBaseClass(t *testing.T) {
	tests := []struct {
		class uint32
		want  uint8
	}{
		{0x030200, 0x03},
		{0x030000, 0x03},
		{0x068000, 0x06},
		{0x040300, 0x04},
	}
	for _, tt := range tests {
		if got := (pci.Device{Class: tt.class}).BaseClass(); got != tt.want {
			t.Errorf("BaseClass(%#06x) = %#02x, want %#02x", tt.class, got, tt.want)
		}
	}
}

// attr is the path of an attribute of the function at 0000:3b:00.0, reached
// through the bus/pci/devices symlink as the agent reaches it.
func attr(root, name string) string {
	return filepath.Join(pci.DevicesDir(root), "0000:3b:00.0", name)
}

func mustRemoveAll(t *testing.T, path string) {
	t.Helper()
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
