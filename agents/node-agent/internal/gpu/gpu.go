// Package gpu decides which PCI functions are NVIDIA GPUs and what they are.
//
// It sits between package pci (raw functions from sysfs) and package labels
// (the node labels kubelet registers): Detect filters and names the GPUs,
// Summarize reduces them to the one product and generation a node advertises.
// The product table is in catalog.go.
package gpu

import "nvkr.dev/node-agent/internal/pci"

// VendorNVIDIA is NVIDIA's PCI vendor id.
const VendorNVIDIA = 0x10de

// classDisplay is the PCI base class of display controllers: 0x0300 VGA,
// 0x0302 3D controller (how datacenter GPUs enumerate), 0x0380 other.
const classDisplay = 0x03

// GPU is one NVIDIA GPU found on the PCI bus.
type GPU struct {
	Address  string // sysfs PCI address, e.g. "0000:3b:00.0"
	DeviceID uint16
	Model
}

// IsGPU reports whether a PCI function is an NVIDIA GPU: vendor 0x10de and a
// display-controller class. NVSwitch (class 0x0680, a bridge) and the HD audio
// function of a display GPU (class 0x0403) are NVIDIA functions but not GPUs.
func IsGPU(d pci.Device) bool {
	return d.Vendor == VendorNVIDIA && d.BaseClass() == classDisplay
}

// Detect returns the GPUs among devs, in the order of devs (Scan sorts by
// address). A GPU whose device id is not in the catalog is still a GPU; its
// product and generation are unknown.
func Detect(devs []pci.Device) []GPU {
	var gpus []GPU
	for _, d := range devs {
		if IsGPU(d) {
			gpus = append(gpus, GPU{Address: d.Address, DeviceID: d.Device, Model: Lookup(d.Device)})
		}
	}
	return gpus
}

// Summary is what a node advertises about its GPUs as a whole.
type Summary struct {
	Count int
	// Product is the product name shared by every GPU, MixedProduct if
	// they differ, or "" if there is no GPU.
	Product string
	// Generation is the generation shared by every GPU, Mixed if they
	// differ, or "" if there is no GPU.
	Generation Generation
}

// MixedProduct is the Summary product of a node whose GPUs differ in product.
const MixedProduct = "mixed"

// Summarize reduces gpus to one Summary. GPUs compare by product name, so two
// device ids that NVIDIA sells under one name (0x2901 and 0x2909, both
// "NVIDIA B200") are not mixed, and neither are two unknown ids.
func Summarize(gpus []GPU) Summary {
	s := Summary{Count: len(gpus)}
	for i, g := range gpus {
		if i == 0 {
			s.Product, s.Generation = g.Product, g.Generation
			continue
		}
		if g.Product != s.Product {
			s.Product = MixedProduct
		}
		if g.Generation != s.Generation {
			s.Generation = Mixed
		}
	}
	return s
}
