package main

// NVIDIA's own mock machines: a profile that says `nvidia-mock: dgxh100` is answered by the mock
// server of github.com/NVIDIA/go-nvml (pkg/nvml/mock/dgx*), through its nvml.Interface and
// nvml.Device methods. What go-nvml's mock does not implement answers NOT_SUPPORTED, as a driver
// does for a call a GPU cannot serve. Injected faults wrap the mock's answers (see checkFaults).

// #include "abi.h"
import "C"

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"unsafe"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxb200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// nvidiaServers are the machines go-nvml ships, by the name a profile gives in `nvidia-mock`.
var nvidiaServers = map[string]func() nvml.Interface{
	"dgxa100": func() nvml.Interface { return dgxa100.New() },
	"dgxh100": func() nvml.Interface { return dgxh100.New() },
	"dgxh200": func() nvml.Interface { return dgxh200.New() },
	"dgxb200": func() nvml.Interface { return dgxb200.New() },
}

const nvMigHandleBase = 0xC0000 // MIG devices handed out by a go-nvml mock, by registration order

type nvidiaMock struct {
	name string
	srv  nvml.Interface
	devs []nvml.Device // visible GPUs, by index
	migs []nvml.Device // MIG device handles given out so far
}

// call runs one go-nvml mock method. The mocks are moq-generated: a method whose XxxFunc the
// mock server leaves nil panics with "method is nil"; that becomes NOT_SUPPORTED.
func call[T any](fn func() (T, nvml.Return)) (v T, r C.int) {
	defer func() {
		if e := recover(); e != nil {
			if s, ok := e.(string); ok && strings.Contains(s, "method is nil") {
				r = rNotSupported
				return
			}
			panic(e)
		}
	}()
	v, ret := fn()
	return v, C.int(ret)
}

func call0(fn func() nvml.Return) C.int {
	_, r := call(func() (struct{}, nvml.Return) { return struct{}{}, fn() })
	return r
}

func newNvidiaMock(name string, f *faults) (*nvidiaMock, error) {
	mk, ok := nvidiaServers[name]
	if !ok {
		return nil, fmt.Errorf("nvidia-mock %q: go-nvml ships %s", name,
			strings.Join(slices.Sorted(maps.Keys(nvidiaServers)), ", "))
	}
	m := &nvidiaMock{name: name, srv: mk()}
	if r := call0(m.srv.Init); r != rSuccess {
		return nil, fmt.Errorf("nvidia-mock %s: Init returned %d", name, r)
	}
	n, r := call(m.srv.DeviceGetCount)
	if r != rSuccess {
		return nil, fmt.Errorf("nvidia-mock %s: DeviceGetCount returned %d", name, r)
	}
	for i := range n {
		d, r := call(func() (nvml.Device, nvml.Return) { return m.srv.DeviceGetHandleByIndex(i) })
		if r != rSuccess {
			return nil, fmt.Errorf("nvidia-mock %s: DeviceGetHandleByIndex(%d) returned %d", name, i, r)
		}
		m.devs = append(m.devs, d)
	}
	if f.Hidden > 0 && f.Hidden <= len(m.devs) {
		m.devs = m.devs[:len(m.devs)-f.Hidden]
	}
	return m, m.checkFaults(f)
}

// checkFaults refuses a fault that has nothing to act on: a fault wraps an answer of the
// NVIDIA mock (a link state, a counter, a P2P status, fabric info), so the mock must give one.
// A test that injects a link fault into a mock without NVLink fails at nvmlInit, not silently.
func (m *nvidiaMock) checkFaults(f *faults) error {
	dev := func(g int) (nvml.Device, error) {
		if g < 0 || g >= len(m.devs) {
			return nil, fmt.Errorf("nvidia-mock %s has no GPU%d", m.name, g)
		}
		return m.devs[g], nil
	}
	refuse := func(what, fn string, r C.int) error {
		return fmt.Errorf("fault %s: go-nvml's %s mock answers %s with %s, nothing to inject into",
			what, m.name, fn, errText[int(r)])
	}
	for _, lf := range f.NVLinkDown {
		d, err := dev(lf.GPU)
		if err != nil {
			return err
		}
		if _, r := call(func() (nvml.EnableState, nvml.Return) { return d.GetNvLinkState(lf.Link) }); r != rSuccess {
			return refuse(fmt.Sprintf("nvlink_down GPU%d link %d", lf.GPU, lf.Link), "nvmlDeviceGetNvLinkState", r)
		}
	}
	for _, lf := range f.LinkErrors {
		d, err := dev(lf.GPU)
		if err != nil {
			return err
		}
		if _, r := call(func() (uint64, nvml.Return) {
			return d.GetNvLinkErrorCounter(lf.Link, nvml.NvLinkErrorCounter(lf.Counter))
		}); r != rSuccess {
			return refuse(fmt.Sprintf("nvlink_errors GPU%d link %d", lf.GPU, lf.Link), "nvmlDeviceGetNvLinkErrorCounter", r)
		}
	}
	for _, pair := range f.P2PDisabled {
		a, err := dev(pair[0])
		if err != nil {
			return err
		}
		b, err := dev(pair[1])
		if err != nil {
			return err
		}
		if _, r := call(func() (nvml.GpuP2PStatus, nvml.Return) { return a.GetP2PStatus(b, p2pIndexNVL) }); r != rSuccess {
			return refuse(fmt.Sprintf("p2p_disabled GPU%d-GPU%d", pair[0], pair[1]), "nvmlDeviceGetP2PStatus", r)
		}
	}
	for _, ff := range f.Fabric {
		d, err := dev(ff.GPU)
		if err != nil {
			return err
		}
		if _, r := call(d.GetGpuFabricInfo); r != rSuccess {
			return refuse(fmt.Sprintf("fabric GPU%d", ff.GPU), "nvmlDeviceGetGpuFabricInfo", r)
		}
	}
	return m.checkHealthFaults(f, refuse)
}

// dev is the go-nvml device behind GPU g, or nil for a YAML profile.
func (p *profile) dev(g int) nvml.Device {
	if p.nv == nil {
		return nil
	}
	return p.nv.devs[g]
}

func (m *nvidiaMock) migHandle(d nvml.Device) C.uintptr_t {
	m.migs = append(m.migs, d)
	return C.uintptr_t(nvMigHandleBase + len(m.migs) - 1)
}

func (m *nvidiaMock) mig(device C.uintptr_t) nvml.Device {
	i := int(device) - nvMigHandleBase
	if i < 0 || i >= len(m.migs) {
		return nil
	}
	return m.migs[i]
}

// putPCI copies go-nvml's PciInfo into the C struct. go-nvml's mock Device fills only
// pciDeviceId; its bus id lives in the Device's PciBusID field (what the mock's
// DeviceGetHandleByPciBusId matches), so an empty busId is filled from there.
func putPCI(info *C.pciInfo, p nvml.PciInfo, d nvml.Device) {
	C.memset(unsafe.Pointer(info), 0, C.sizeof_pciInfo)
	if sd, ok := d.(*server.Device); ok && p.BusId[0] == 0 && sd.PciBusID != "" {
		fillPCI(info, sd.PciBusID)
	} else {
		for i, c := range p.BusIdLegacy {
			info.busIdLegacy[i] = C.char(c)
		}
		for i, c := range p.BusId {
			info.busId[i] = C.char(c)
		}
		info.domain, info.bus, info.device = C.uint(p.Domain), C.uint(p.Bus), C.uint(p.Device)
	}
	info.pciDeviceId, info.pciSubSystemId = C.uint(p.PciDeviceId), C.uint(p.PciSubSystemId)
}

// injectedError is the injected value of a link error counter, if one is injected.
func (p *profile) injectedError(gpu, link int, counter uint32) (uint64, bool) {
	for _, f := range p.Faults.LinkErrors {
		if f.GPU == gpu && f.Link == link && f.Counter == counter {
			n := f.reads.Add(1) - 1
			return f.Value + f.Step*n, true
		}
	}
	return 0, false
}

func (p *profile) linkDown(gpu, link int) bool {
	for _, f := range p.Faults.NVLinkDown {
		if f.GPU == gpu && f.Link == link {
			return true
		}
	}
	return false
}

func (p *profile) fabricFault(gpu int) *fabricSpec {
	for i := range p.Faults.Fabric {
		if p.Faults.Fabric[i].GPU == gpu {
			return &p.Faults.Fabric[i].fabricSpec
		}
	}
	return nil
}
