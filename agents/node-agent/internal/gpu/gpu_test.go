package gpu_test

import (
	"reflect"
	"testing"

	"nvkr.dev/node-agent/internal/gpu"
	"nvkr.dev/node-agent/internal/pci"
	"nvkr.dev/node-agent/internal/pci/pcitest"
)

func TestLookup(t *testing.T) {
	tests := []struct {
		id   uint16
		want gpu.Model
	}{
		{0x20B0, gpu.Model{Product: "NVIDIA A100-SXM4-40GB", Generation: gpu.Ampere}},
		{0x20B2, gpu.Model{Product: "NVIDIA A100-SXM4-80GB", Generation: gpu.Ampere}},
		{0x20B5, gpu.Model{Product: "NVIDIA A100 80GB PCIe", Generation: gpu.Ampere}},
		{0x20F1, gpu.Model{Product: "NVIDIA A100-PCIE-40GB", Generation: gpu.Ampere}},
		{0x2330, gpu.Model{Product: "NVIDIA H100 80GB HBM3", Generation: gpu.Hopper}},
		{0x2331, gpu.Model{Product: "NVIDIA H100 PCIe", Generation: gpu.Hopper}},
		{0x2321, gpu.Model{Product: "NVIDIA H100 NVL", Generation: gpu.Hopper}},
		{0x2324, gpu.Model{Product: "NVIDIA H800", Generation: gpu.Hopper}},
		{0x2335, gpu.Model{Product: "NVIDIA H200", Generation: gpu.Hopper}},
		{0x233B, gpu.Model{Product: "NVIDIA H200 NVL", Generation: gpu.Hopper}},
		{0x2901, gpu.Model{Product: "NVIDIA B200", Generation: gpu.Blackwell}},
		{0x2941, gpu.Model{Product: "NVIDIA GB200", Generation: gpu.Blackwell}},
		// NVSwitch, GH200 and an id nobody assigned: never guessed.
		{0x22A3, gpu.Model{Product: gpu.UnknownProduct, Generation: gpu.Unknown}},
		{0x2342, gpu.Model{Product: gpu.UnknownProduct, Generation: gpu.Unknown}},
		{0xFFFF, gpu.Model{Product: gpu.UnknownProduct, Generation: gpu.Unknown}},
	}
	for _, tt := range tests {
		if got := gpu.Lookup(tt.id); got != tt.want {
			t.Errorf("Lookup(%#04x) = %+v, want %+v", tt.id, got, tt.want)
		}
	}
}

func TestIsGPU(t *testing.T) {
	tests := []struct {
		name string
		dev  pci.Device
		want bool
	}{
		{"H100 3D controller", pci.Device{Vendor: 0x10de, Device: 0x2330, Class: 0x030200}, true},
		{"NVIDIA VGA controller", pci.Device{Vendor: 0x10de, Device: 0x20b0, Class: 0x030000}, true},
		{"unknown NVIDIA display device", pci.Device{Vendor: 0x10de, Device: 0x1234, Class: 0x030200}, true},
		{"NVSwitch bridge", pci.Device{Vendor: 0x10de, Device: 0x22a3, Class: 0x068000}, false},
		{"NVIDIA HD audio function", pci.Device{Vendor: 0x10de, Device: 0x22e8, Class: 0x040300}, false},
		{"Matrox BMC VGA", pci.Device{Vendor: 0x102b, Device: 0x0536, Class: 0x030000}, false},
		{"Intel NIC", pci.Device{Vendor: 0x8086, Device: 0x1593, Class: 0x020000}, false},
	}
	for _, tt := range tests {
		if got := gpu.IsGPU(tt.dev); got != tt.want {
			t.Errorf("%s: IsGPU = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestDetectOnFakeSysfs runs pci.Scan and Detect over fake trees, one per kind
// of node the agent must label correctly.
func TestDetectOnFakeSysfs(t *testing.T) {
	const nv = pcitest.VendorNVIDIA
	tests := []struct {
		name string
		fns  []pcitest.Function
		want gpu.Summary
	}{
		{"no PCI functions", nil, gpu.Summary{}},
		{"no GPU", []pcitest.Function{
			{Address: "0000:00:00.0", Vendor: pcitest.VendorIntel, Device: 0x09a2, Class: 0x060000},
			{Address: "0000:02:00.0", Vendor: 0x102b, Device: 0x0536, Class: pcitest.ClassVGA},
		}, gpu.Summary{}},
		{"1 A100", pcitest.GPUs(1, nv, 0x20b2, pcitest.Class3D), gpu.Summary{Count: 1, Product: "NVIDIA A100-SXM4-80GB", Generation: gpu.Ampere}},
		{"8 A100", pcitest.GPUs(8, nv, 0x20b0, pcitest.Class3D), gpu.Summary{Count: 8, Product: "NVIDIA A100-SXM4-40GB", Generation: gpu.Ampere}},
		{"1 H100", pcitest.GPUs(1, nv, 0x2331, pcitest.Class3D), gpu.Summary{Count: 1, Product: "NVIDIA H100 PCIe", Generation: gpu.Hopper}},
		{"8 H100", pcitest.GPUs(8, nv, 0x2330, pcitest.Class3D), gpu.Summary{Count: 8, Product: "NVIDIA H100 80GB HBM3", Generation: gpu.Hopper}},
		{"8 H200", pcitest.GPUs(8, nv, 0x2335, pcitest.Class3D), gpu.Summary{Count: 8, Product: "NVIDIA H200", Generation: gpu.Hopper}},
		{"1 B200", pcitest.GPUs(1, nv, 0x2901, pcitest.Class3D), gpu.Summary{Count: 1, Product: "NVIDIA B200", Generation: gpu.Blackwell}},
		{"8 B200", pcitest.GPUs(8, nv, 0x2901, pcitest.Class3D), gpu.Summary{Count: 8, Product: "NVIDIA B200", Generation: gpu.Blackwell}},
		{"4 GB200", pcitest.GPUs(4, nv, 0x2941, pcitest.Class3D), gpu.Summary{Count: 4, Product: "NVIDIA GB200", Generation: gpu.Blackwell}},
		{"two B200 device ids, one product", []pcitest.Function{
			{Address: "0000:10:00.0", Vendor: nv, Device: 0x2901, Class: pcitest.Class3D},
			{Address: "0000:20:00.0", Vendor: nv, Device: 0x2909, Class: pcitest.Class3D},
		}, gpu.Summary{Count: 2, Product: "NVIDIA B200", Generation: gpu.Blackwell}},
		{"H100 and H200: mixed product, one generation", []pcitest.Function{
			{Address: "0000:10:00.0", Vendor: nv, Device: 0x2330, Class: pcitest.Class3D},
			{Address: "0000:20:00.0", Vendor: nv, Device: 0x2335, Class: pcitest.Class3D},
		}, gpu.Summary{Count: 2, Product: gpu.MixedProduct, Generation: gpu.Hopper}},
		{"A100 and H100: mixed box", []pcitest.Function{
			{Address: "0000:10:00.0", Vendor: nv, Device: 0x20b2, Class: pcitest.Class3D},
			{Address: "0000:20:00.0", Vendor: nv, Device: 0x2330, Class: pcitest.Class3D},
			{Address: "0000:30:00.0", Vendor: nv, Device: 0x2330, Class: pcitest.Class3D},
		}, gpu.Summary{Count: 3, Product: gpu.MixedProduct, Generation: gpu.Mixed}},
		{"8 H100 with NVSwitches and an audio function", append(pcitest.GPUs(8, nv, 0x2330, pcitest.Class3D),
			pcitest.Function{Address: "0000:05:00.0", Vendor: nv, Device: 0x22a3, Class: pcitest.ClassBridge},
			pcitest.Function{Address: "0000:06:00.0", Vendor: nv, Device: 0x22a3, Class: pcitest.ClassBridge},
			pcitest.Function{Address: "0000:10:00.1", Vendor: nv, Device: 0x22e8, Class: pcitest.ClassAudio},
		), gpu.Summary{Count: 8, Product: "NVIDIA H100 80GB HBM3", Generation: gpu.Hopper}},
		{"unknown NVIDIA device id", []pcitest.Function{
			{Address: "0000:10:00.0", Vendor: nv, Device: 0x1234, Class: pcitest.Class3D},
		}, gpu.Summary{Count: 1, Product: gpu.UnknownProduct, Generation: gpu.Unknown}},
		{"known and unknown: mixed", []pcitest.Function{
			{Address: "0000:10:00.0", Vendor: nv, Device: 0x2330, Class: pcitest.Class3D},
			{Address: "0000:20:00.0", Vendor: nv, Device: 0x1234, Class: pcitest.Class3D},
		}, gpu.Summary{Count: 2, Product: gpu.MixedProduct, Generation: gpu.Mixed}},
		{"non-NVIDIA device with an NVIDIA device id", []pcitest.Function{
			{Address: "0000:10:00.0", Vendor: 0x1002, Device: 0x2330, Class: pcitest.Class3D},
			{Address: "0000:20:00.0", Vendor: pcitest.VendorIntel, Device: 0x1593, Class: pcitest.ClassNIC},
		}, gpu.Summary{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			devs, err := pci.Scan(pcitest.Tree(t, tt.fns...))
			if err != nil {
				t.Fatalf("Scan: %v", err)
			}
			gpus := gpu.Detect(devs)
			if got := gpu.Summarize(gpus); got != tt.want {
				t.Errorf("Summarize = %+v, want %+v", got, tt.want)
			}
			for i := 1; i < len(gpus); i++ {
				if gpus[i-1].Address >= gpus[i].Address {
					t.Errorf("GPUs not in address order: %s before %s", gpus[i-1].Address, gpus[i].Address)
				}
			}
		})
	}
}

func TestDetectKeepsAddressAndID(t *testing.T) {
	devs := []pci.Device{
		{Address: "0000:0f:00.0", Vendor: 0x10de, Device: 0x22a3, Class: 0x068000},
		{Address: "0000:10:00.0", Vendor: 0x10de, Device: 0x2901, Class: 0x030200},
		{Address: "0000:10:00.1", Vendor: 0x10de, Device: 0x22e8, Class: 0x040300},
	}
	want := []gpu.GPU{{
		Address:  "0000:10:00.0",
		DeviceID: 0x2901,
		Model:    gpu.Model{Product: "NVIDIA B200", Generation: gpu.Blackwell},
	}}
	if got := gpu.Detect(devs); !reflect.DeepEqual(got, want) {
		t.Errorf("Detect = %+v, want %+v", got, want)
	}
}
