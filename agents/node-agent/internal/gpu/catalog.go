package gpu

// Generation is a GPU architecture generation as the recipe matrix names it
// (the `gpu` axis): "ampere", "hopper", "blackwell".
type Generation string

// Generations the catalog knows, plus the two summary values.
const (
	Ampere    Generation = "ampere"
	Hopper    Generation = "hopper"
	Blackwell Generation = "blackwell"

	// Unknown is reported for an NVIDIA display-class function whose device
	// id is not in the catalog. The agent never guesses from id ranges.
	Unknown Generation = "unknown"
	// Mixed is the summary of a node whose GPUs differ in generation.
	Mixed Generation = "mixed"
)

// UnknownProduct is the product name of a device id not in the catalog.
const UnknownProduct = "unknown"

// Model is what the catalog knows about one PCI device id.
type Model struct {
	// Product is NVIDIA's product name for the device id, spelled as the
	// driver (NVML) reports it, e.g. "NVIDIA H100 80GB HBM3".
	Product    string
	Generation Generation
}

// catalog maps NVIDIA (vendor 0x10de) PCI device ids to products.
//
// Only ids confirmed in at least two independent sources are listed; anything
// else is reported as unknown. Product names are the ones in NVIDIA's driver
// README table (which is also what NVML and hence nvidia-smi and GPU Feature
// Discovery report). Sources, all checked 2026:
//
//   - [pciids] pciutils/pciids pci.ids, version 2026.05.24, vendor 10de
//     (github.com/pciutils/pciids, commit 006181e2c5d5b9a3b57d252aa5b3d827971d41a9).
//   - [readme] "Compatible GPUs" table of the NVIDIA Linux open GPU kernel
//     module README (NVIDIA/open-gpu-kernel-modules README.md). Ampere and
//     Hopper rows read from the upstream repository; the B200, GB200 and
//     H200 NVL rows from a fork carrying the table of a newer release
//     (aikitoria/open-gpu-kernel-modules, commit
//     08dc34555bf8cdacdd89237da42419e6ce5efdc4); the 20B1 row, which newer
//     releases dropped, from the 2022 (515) table as quoted in
//     sndirsch/sndirsch.github.io _posts/2022-06-07-nvidia-opengpu.markdown.
//   - [admin] NVIDIA/gpu-admin-tools gpu/devid_names.py (H100/H200/H800 ids)
//     and gpu/devid_chips.py (0x2900-0x297F is Blackwell GB100).
//
// A device id can carry more than one product name, told apart by the PCI
// subsystem id (0x20B0 is also sold as "A100-PG509-200"); the agent keys on
// the device id alone and uses the name of the main product.
//
// Left out on purpose: GH200 (0x2342: the driver names it "GH200 120GB" or
// "GH200 480GB" depending on the subsystem id), A800 and H20 (not part of the
// product line nvkr builds for), and B300/GB300 (not asked for yet).
var catalog = map[uint16]Model{
	// Ampere (GA100).
	0x20B0: {"NVIDIA A100-SXM4-40GB", Ampere}, // pciids "A100 SXM4 40GB"; readme
	0x20B1: {"NVIDIA A100-PCIE-40GB", Ampere}, // pciids "A100 PCIe 40GB"; readme (2022)
	0x20B2: {"NVIDIA A100-SXM4-80GB", Ampere}, // pciids "A100 SXM4 80GB"; readme
	0x20B3: {"NVIDIA A100-SXM-64GB", Ampere},  // pciids "A100-SXM-64GB"; readme
	0x20B5: {"NVIDIA A100 80GB PCIe", Ampere}, // pciids "A100 PCIe 80GB"; readme
	0x20F1: {"NVIDIA A100-PCIE-40GB", Ampere}, // pciids "A100 PCIe 40GB"; readme

	// Hopper (GH100).
	0x2321: {"NVIDIA H100 NVL", Hopper},       // pciids "H100L 94GB"; readme; admin
	0x2322: {"NVIDIA H800 PCIe", Hopper},      // pciids "H800 PCIe"; readme; admin
	0x2324: {"NVIDIA H800", Hopper},           // pciids "H800"; readme; admin
	0x2330: {"NVIDIA H100 80GB HBM3", Hopper}, // pciids "H100 SXM5 80GB"; readme; admin
	0x2331: {"NVIDIA H100 PCIe", Hopper},      // pciids "H100 PCIe"; readme; admin
	0x2335: {"NVIDIA H200", Hopper},           // pciids "H200 SXM 141GB"; readme; admin
	0x2339: {"NVIDIA H100", Hopper},           // pciids "H100 SXM5 94GB"; readme; admin
	0x233A: {"NVIDIA H800 NVL", Hopper},       // pciids "H800L 94GB"; readme; admin
	0x233B: {"NVIDIA H200 NVL", Hopper},       // pciids "H200 NVL"; readme; admin

	// Blackwell (GB100).
	0x2901: {"NVIDIA B200", Blackwell},  // pciids "B200"; readme; admin range
	0x2909: {"NVIDIA B200", Blackwell},  // pciids "HGX B200 168GB"; readme; admin range
	0x2941: {"NVIDIA GB200", Blackwell}, // pciids "HGX GB200"; readme; admin range
}

// Lookup returns the catalog entry for an NVIDIA device id, or a Model with
// UnknownProduct and Unknown generation if the id is not in the catalog.
func Lookup(deviceID uint16) Model {
	if m, ok := catalog[deviceID]; ok {
		return m
	}
	return Model{Product: UnknownProduct, Generation: Unknown}
}
