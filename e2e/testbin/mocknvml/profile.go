package main

// The profile model: a YAML description of one machine (GPUs, PCIe paths, NVSwitches, direct
// NVLink bridges, fabric state) plus injected faults. Everything NVML answers is derived from it,
// unless the profile names one of NVIDIA's go-nvml mock machines (`nvidia-mock:`, nvidia.go).

// #include <stdlib.h>
import "C"

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"unsafe"

	"gopkg.in/yaml.v3"
)

type nvlinkSpec struct {
	Links     int    `yaml:"links"`      // physical links per GPU; 0 = NVLink not supported
	Version   uint32 `yaml:"version"`    // nvmlNvlinkVersion_t enum, not the generation
	SpeedMBps uint32 `yaml:"speed_mbps"` // per link, per direction
}

type fabricSpec struct {
	State       uint32 `yaml:"state"`  // NVML_GPU_FABRIC_STATE_*
	Status      uint32 `yaml:"status"` // an nvmlReturn_t
	ClusterUUID string `yaml:"cluster_uuid"`
	CliqueID    uint32 `yaml:"clique_id"`
}

type gpuDefaults struct {
	Name       string      `yaml:"name"`
	Arch       uint32      `yaml:"architecture"`
	CC         [2]int32    `yaml:"compute_capability"`
	MemoryMiB  uint64      `yaml:"memory_mib"`
	MIG        string      `yaml:"mig"` // unsupported | disabled | enabled
	MIGDevices int         `yaml:"mig_devices"`
	NVLink     nvlinkSpec  `yaml:"nvlink"`
	Fabric     *fabricSpec `yaml:"fabric"`
}

type gpuSpec struct {
	BusID   string   `yaml:"bus_id"`
	NUMA    int      `yaml:"numa"`     // CPU-side NUMA node (drives NODE vs SYS)
	GPUNUMA *int32   `yaml:"gpu_numa"` // the GPU's own NUMA id (Grace systems)
	CPUs    [2]int   `yaml:"cpus"`     // first and last CPU of the affine range
	PCIPath []string `yaml:"pci_path"` // [host bridge, switch, switch...] below the NUMA node
}

type linkFault struct {
	GPU     int    `yaml:"gpu"`
	Link    int    `yaml:"link"`
	Counter uint32 `yaml:"counter"` // NVML_NVLINK_ERROR_DL_*
	Value   uint64 `yaml:"value"`
	Step    uint64 `yaml:"step"` // added on every read: a counter that keeps rising
	reads   atomic.Uint64
}

type fabricFault struct {
	GPU        int `yaml:"gpu"`
	fabricSpec `yaml:",inline"`
}

type faults struct {
	NVLinkDown   []*linkFault  `yaml:"nvlink_down"`
	LinkErrors   []*linkFault  `yaml:"nvlink_errors"`
	Fabric       []fabricFault `yaml:"fabric"`
	P2PDisabled  [][2]int      `yaml:"p2p_disabled"`
	GPULost      []int         `yaml:"gpu_lost"`
	Hidden       int           `yaml:"hidden_gpus"`   // the last N GPUs vanish from the bus
	Unsupported  []string      `yaml:"unsupported"`   // NVML function names answering NOT_SUPPORTED
	ECC          []eccFault    `yaml:"ecc_errors"`    // health.go
	RemappedRows []remapFault  `yaml:"remapped_rows"` // health.go
	PCIeReplay   []replayFault `yaml:"pcie_replay"`   // health.go
}

type profile struct {
	NvidiaMock  string      `yaml:"nvidia-mock"` // answer from go-nvml's mock of this machine
	NUMANodes   []int       `yaml:"numa_nodes"`  // per GPU, for nvidia-mock machines (health.go)
	Driver      string      `yaml:"driver_version"`
	UUIDPrefix  string      `yaml:"uuid_prefix"`
	Defaults    gpuDefaults `yaml:"defaults"`
	GPUs        []gpuSpec   `yaml:"gpus"`
	Switches    []string    `yaml:"switches"`     // NVSwitch PCI bus ids; empty = no NVSwitch
	SwitchLinks []int       `yaml:"switch_links"` // links from every GPU to each switch
	Direct      [][3]int    `yaml:"direct_links"` // [gpu a, gpu b, links]: bridges, no switch
	Faults      faults      `yaml:"faults"`

	links [][]linkEnd // per GPU, per link
	nv    *nvidiaMock // set when NvidiaMock names one of go-nvml's machines
}

// linkEnd is what one physical link of a GPU is cabled to.
type linkEnd struct {
	peerGPU  int // -1 when the far end is a switch
	switchID int // -1 when the far end is a GPU
}

// getenv reads the C environment: a c-shared Go library sees only the environment the process
// started with, not variables its host set later (os.environ in Python before nvmlInit).
func getenv(name string) string {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	if v := C.getenv(cname); v != nil {
		return C.GoString(v)
	}
	return ""
}

func loadProfile() (*profile, error) {
	path := getenv("MOCK_NVML_CONFIG")
	if path == "" {
		return nil, fmt.Errorf("MOCK_NVML_CONFIG is not set")
	}
	p := &profile{}
	if err := readYAML(path, p); err != nil {
		return nil, err
	}
	// Faults may also come from a separate file so that tests reuse a stock profile.
	if fp := getenv("MOCK_NVML_FAULTS"); fp != "" {
		if err := readYAML(fp, &p.Faults); err != nil {
			return nil, err
		}
	}
	if p.NvidiaMock != "" {
		nv, err := newNvidiaMock(p.NvidiaMock, &p.Faults)
		if err != nil {
			return nil, err
		}
		p.nv = nv
		return p, nil
	}
	if p.Faults.Hidden > 0 && p.Faults.Hidden <= len(p.GPUs) {
		p.GPUs = p.GPUs[:len(p.GPUs)-p.Faults.Hidden]
	}
	p.cable()
	return p, nil
}

func readYAML(path string, into any) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return yaml.Unmarshal(raw, into)
}

// cable numbers the links: switch links first, in switch order, then direct bridges in the
// order they are listed. Links left over are present but uncabled (inactive).
func (p *profile) cable() {
	n := p.Defaults.NVLink.Links
	p.links = make([][]linkEnd, len(p.GPUs))
	next := make([]int, len(p.GPUs))
	for g := range p.GPUs {
		p.links[g] = make([]linkEnd, n)
		for l := range p.links[g] {
			p.links[g][l] = linkEnd{peerGPU: -1, switchID: -1}
		}
		for sw, count := range p.SwitchLinks {
			for i := 0; i < count && next[g] < n; i++ {
				p.links[g][next[g]] = linkEnd{peerGPU: -1, switchID: sw}
				next[g]++
			}
		}
	}
	for _, d := range p.Direct {
		a, b, count := d[0], d[1], d[2]
		if a >= len(p.GPUs) || b >= len(p.GPUs) {
			continue
		}
		for i := 0; i < count && next[a] < n && next[b] < n; i++ {
			p.links[a][next[a]] = linkEnd{peerGPU: b, switchID: -1}
			p.links[b][next[b]] = linkEnd{peerGPU: a, switchID: -1}
			next[a]++
			next[b]++
		}
	}
}

func (p *profile) linkActive(gpu, link int) bool {
	end := p.links[gpu][link]
	if end.peerGPU < 0 && end.switchID < 0 {
		return false
	}
	return !p.linkDown(gpu, link)
}

// count is the number of GPUs on the bus.
func (p *profile) count() int {
	if p.nv != nil {
		return len(p.nv.devs)
	}
	return len(p.GPUs)
}

// nvlinkCount is the number of active links joining two GPUs: direct bridges, or for a switch
// fabric the links both GPUs have up into the same switches.
func (p *profile) nvlinkCount(a, b int) int {
	direct := 0
	up := [2]map[int]int{{}, {}}
	for i, g := range [2]int{a, b} {
		for l, end := range p.links[g] {
			if !p.linkActive(g, l) {
				continue
			}
			if end.switchID >= 0 {
				up[i][end.switchID]++
			} else if i == 0 && end.peerGPU == b {
				direct++
			}
		}
	}
	shared := 0
	for sw, n := range up[0] {
		shared += min(n, up[1][sw])
	}
	return direct + shared
}

func (p *profile) lost(gpu int) bool {
	for _, g := range p.Faults.GPULost {
		if g == gpu {
			return true
		}
	}
	return false
}

func (p *profile) unsupported(fn string) bool {
	for _, f := range p.Faults.Unsupported {
		if f == fn {
			return true
		}
	}
	return false
}

// commonAncestor follows nvmlGpuTopologyLevel_t. A pci_path lists the bridges above a GPU, host
// bridge first: no shared element is NODE, only the host bridge is HOSTBRIDGE, the same parent
// switch is SINGLE, and a shared switch higher up is MULTIPLE.
func (p *profile) commonAncestor(a, b int) uint32 {
	if a == b {
		return 0
	}
	ga, gb := p.GPUs[a], p.GPUs[b]
	if ga.NUMA != gb.NUMA {
		return 50
	}
	pa, pb := p.pciPath(a), p.pciPath(b)
	shared := 0
	for shared < len(pa) && shared < len(pb) && pa[shared] == pb[shared] {
		shared++
	}
	switch {
	case shared == 0:
		return 40
	case shared == 1:
		return 30
	case shared == len(pa) && shared == len(pb):
		return 10
	default:
		return 20
	}
}

func (p *profile) pciPath(g int) []string {
	if len(p.GPUs[g].PCIPath) > 0 {
		return p.GPUs[g].PCIPath
	}
	return []string{"hostbridge-" + strings.ToLower(p.GPUs[g].BusID)}
}

func (p *profile) errorCounter(gpu, link int, counter uint32) uint64 {
	v, _ := p.injectedError(gpu, link, counter)
	return v
}

func (p *profile) fabric(gpu int) *fabricSpec {
	for i := range p.Faults.Fabric {
		if p.Faults.Fabric[i].GPU == gpu {
			f := p.Faults.Fabric[i].fabricSpec
			if f.ClusterUUID == "" && p.Defaults.Fabric != nil {
				f.ClusterUUID = p.Defaults.Fabric.ClusterUUID
			}
			return &f
		}
	}
	return p.Defaults.Fabric
}

func (p *profile) p2pDisabled(a, b int) bool {
	for _, pair := range p.Faults.P2PDisabled {
		if (pair[0] == a && pair[1] == b) || (pair[0] == b && pair[1] == a) {
			return true
		}
	}
	return false
}
