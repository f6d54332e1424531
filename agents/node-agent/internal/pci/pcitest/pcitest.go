// Package pcitest builds fake sysfs trees for tests of the node agent.
//
// The layout mirrors Linux: each function's attributes live under
// <root>/devices/pci<domain>:<bus>/<address>/ and
// <root>/bus/pci/devices/<address> is a relative symlink to that directory,
// so code under test follows symlinks exactly as it does on a real node.
package pcitest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Function describes one fake PCI function.
type Function struct {
	Address string // e.g. "0000:3b:00.0"
	Vendor  uint16
	Device  uint16
	Class   uint32
}

// Common vendor ids and class codes, for readable test tables.
const (
	VendorNVIDIA = 0x10de
	VendorIntel  = 0x8086

	Class3D     = 0x030200 // 3D controller: how datacenter GPUs enumerate
	ClassVGA    = 0x030000 // VGA compatible controller
	ClassBridge = 0x068000 // "other bridge": how NVSwitch enumerates
	ClassAudio  = 0x040300 // HD audio function next to a display GPU
	ClassNIC    = 0x020000 // Ethernet controller
)

// Tree creates a fake sysfs root in a fresh t.TempDir() holding fns and
// returns its path. The bus/pci/devices directory always exists, so an empty
// fns gives a machine with no PCI functions at all.
func Tree(t testing.TB, fns ...Function) string {
	t.Helper()
	root := t.TempDir()
	Add(t, root, fns...)
	return root
}

// Add writes fns into the fake sysfs tree at root.
func Add(t testing.TB, root string, fns ...Function) {
	t.Helper()
	devices := filepath.Join(root, "bus", "pci", "devices")
	if err := os.MkdirAll(devices, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, fn := range fns {
		domainBus := fn.Address
		if i := strings.LastIndex(fn.Address, ":"); i > 0 {
			domainBus = fn.Address[:i]
		}
		dir := filepath.Join(root, "devices", "pci"+domainBus, fn.Address)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		attrs := map[string]string{
			"vendor": fmt.Sprintf("0x%04x\n", fn.Vendor),
			"device": fmt.Sprintf("0x%04x\n", fn.Device),
			"class":  fmt.Sprintf("0x%06x\n", fn.Class),
		}
		for name, value := range attrs {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(value), 0o444); err != nil {
				t.Fatal(err)
			}
		}
		target, err := filepath.Rel(devices, dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(devices, fn.Address)); err != nil {
			t.Fatal(err)
		}
	}
}

// GPUs returns n functions with the same vendor, device and class at
// consecutive buses starting at 0000:10:00.0, listed in reverse address order
// so tests also check that Scan sorts. n must be at most 15.
func GPUs(n int, vendor, device uint16, class uint32) []Function {
	if n > 15 {
		panic("pcitest.GPUs: at most 15 functions")
	}
	fns := make([]Function, 0, n)
	for i := n - 1; i >= 0; i-- {
		fns = append(fns, Function{
			Address: fmt.Sprintf("0000:%02x:00.0", 0x10+i*0x10),
			Vendor:  vendor,
			Device:  device,
			Class:   class,
		})
	}
	return fns
}
