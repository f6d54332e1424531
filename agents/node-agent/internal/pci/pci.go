// Package pci enumerates PCI functions from a sysfs tree.
//
// It is the node agent's only view of the hardware: it reads
// <sysfs>/bus/pci/devices/*/{vendor,device,class} and nothing else, so a test
// can hand it a fake tree (see package pcitest) instead of /sys. It knows
// nothing about GPUs; package gpu decides which functions are GPUs.
package pci

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Device is one PCI function as sysfs describes it.
type Device struct {
	// Address is the sysfs directory name, e.g. "0000:3b:00.0"
	// (domain:bus:device.function).
	Address string
	// Vendor is the PCI vendor id, e.g. 0x10de for NVIDIA.
	Vendor uint16
	// Device is the PCI device id, e.g. 0x2330.
	Device uint16
	// Class is the 24-bit class code: base class, subclass, programming
	// interface, e.g. 0x030200 for a 3D controller.
	Class uint32
}

// BaseClass returns the top byte of the class code, e.g. 0x03 for display
// controllers.
func (d Device) BaseClass() uint8 {
	return uint8(d.Class >> 16)
}

// DevicesDir returns the directory that lists PCI functions under the sysfs
// mount point sysfsRoot.
func DevicesDir(sysfsRoot string) string {
	return filepath.Join(sysfsRoot, "bus", "pci", "devices")
}

// Scan reads every PCI function under sysfsRoot (normally "/sys") and returns
// them sorted by address (domain, bus, device, function, compared as numbers),
// so the result does not depend on directory order.
//
// It fails if the devices directory cannot be read, if an entry's name is not
// a PCI address, or if an entry's vendor, device or class file is missing or
// malformed: an agent that cannot see the whole bus must not report a GPU
// count.
func Scan(sysfsRoot string) ([]Device, error) {
	dir := DevicesDir(sysfsRoot)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read PCI devices: %w", err)
	}
	type keyed struct {
		key [4]uint64
		dev Device
	}
	found := make([]keyed, 0, len(entries))
	for _, e := range entries {
		key, err := parseAddress(e.Name())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, e.Name()), err)
		}
		dev, err := readDevice(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		dev.Address = e.Name()
		found = append(found, keyed{key: key, dev: dev})
	}
	sort.Slice(found, func(i, j int) bool {
		a, b := found[i].key, found[j].key
		for n := range a {
			if a[n] != b[n] {
				return a[n] < b[n]
			}
		}
		return false
	})
	devices := make([]Device, len(found))
	for i, k := range found {
		devices[i] = k.dev
	}
	return devices, nil
}

func readDevice(dir string) (Device, error) {
	vendor, err := readHex(dir, "vendor", 16)
	if err != nil {
		return Device{}, err
	}
	device, err := readHex(dir, "device", 16)
	if err != nil {
		return Device{}, err
	}
	class, err := readHex(dir, "class", 24)
	if err != nil {
		return Device{}, err
	}
	return Device{Vendor: uint16(vendor), Device: uint16(device), Class: uint32(class)}, nil
}

// readHex parses a sysfs attribute such as "0x10de\n" that holds a value of at
// most bits bits.
func readHex(dir, name string, bits int) (uint64, error) {
	path := filepath.Join(dir, name)
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	text := strings.TrimSpace(string(raw))
	digits, ok := strings.CutPrefix(text, "0x")
	if !ok || digits == "" {
		return 0, fmt.Errorf("%s: %q is not a 0x-prefixed hex number", path, text)
	}
	v, err := strconv.ParseUint(digits, 16, bits)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a %d-bit hex number", path, text, bits)
	}
	return v, nil
}

// parseAddress splits "dddd:bb:dd.f" into numbers for sorting. Domains may be
// wider than four digits (Intel VMD uses "10000:").
func parseAddress(addr string) ([4]uint64, error) {
	var key [4]uint64
	rest, fn, ok := strings.Cut(addr, ".")
	if !ok {
		return key, fmt.Errorf("%q is not a PCI address", addr)
	}
	parts := strings.Split(rest, ":")
	if len(parts) != 3 {
		return key, fmt.Errorf("%q is not a PCI address", addr)
	}
	fields := [4]struct {
		text string
		bits int
	}{{parts[0], 32}, {parts[1], 8}, {parts[2], 5}, {fn, 3}}
	for i, f := range fields {
		v, err := strconv.ParseUint(f.text, 16, f.bits)
		if err != nil || f.text == "" {
			return key, fmt.Errorf("%q is not a PCI address", addr)
		}
		key[i] = v
	}
	return key, nil
}
