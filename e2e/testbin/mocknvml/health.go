package main

// NUMA affinity and the GPU health counters hwprobe cross-checks with DCGM: ECC double-bit
// errors, row remapping and PCIe replays. Our profiles answer zero unless a fault injects a
// value; NVIDIA's go-nvml mocks answer what their servers implement (none of these counters, so
// NOT_SUPPORTED), and a profile may carry the NUMA node of each of their GPUs (`numa_nodes`).

// #include "abi.h"
import "C"

import (
	"unsafe"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// nvmlMemoryErrorType_t and nvmlEccCounterType_t (nvml.h).
const (
	eccUncorrected = 1
	eccVolatile    = 0
	eccAggregate   = 1
)

type eccFault struct {
	GPU     int    `yaml:"gpu"`
	Type    uint32 `yaml:"type"`    // NVML_MEMORY_ERROR_TYPE_*: 0 corrected (SBE), 1 uncorrected (DBE)
	Counter uint32 `yaml:"counter"` // NVML_*_ECC: 0 volatile, 1 aggregate
	Value   uint64 `yaml:"value"`
}

type remapFault struct {
	GPU           int  `yaml:"gpu"`
	Correctable   uint `yaml:"correctable"`
	Uncorrectable uint `yaml:"uncorrectable"`
	Pending       bool `yaml:"pending"`
	Failure       bool `yaml:"failure"`
}

type replayFault struct {
	GPU   int  `yaml:"gpu"`
	Value uint `yaml:"value"`
}

//export nvmlDeviceGetMemoryAffinity
func nvmlDeviceGetMemoryAffinity(device C.uintptr_t, size C.uint, set *C.ulong, scope C.uint) C.int {
	g, r := gpu(device, "nvmlDeviceGetMemoryAffinity")
	if r != rSuccess {
		return r
	}
	words := unsafe.Slice((*uint64)(unsafe.Pointer(set)), int(size))
	node := -1
	if d := prof.dev(g); d != nil {
		if g >= len(prof.NUMANodes) {
			got, r := call(func() ([]uint, nvml.Return) {
				return d.GetMemoryAffinity(int(size), nvml.AffinityScope(scope))
			})
			if r == rSuccess {
				clear(words)
				for i := 0; i < len(got) && i < len(words); i++ {
					words[i] = uint64(got[i])
				}
			}
			return r
		}
		node = prof.NUMANodes[g]
	} else {
		node = prof.GPUs[g].NUMA
	}
	if node < 0 || node/64 >= len(words) {
		return rInsufficient
	}
	clear(words)
	words[node/64] |= 1 << (node % 64)
	return rSuccess
}

//export nvmlDeviceGetTotalEccErrors
func nvmlDeviceGetTotalEccErrors(device C.uintptr_t, kind, counter C.uint, count *C.ulonglong) C.int {
	g, r := gpu(device, "nvmlDeviceGetTotalEccErrors")
	if r != rSuccess {
		return r
	}
	if kind > eccUncorrected || counter > eccAggregate {
		return rInvalidArgument
	}
	if d := prof.dev(g); d != nil {
		v, r := call(func() (uint64, nvml.Return) {
			return d.GetTotalEccErrors(nvml.MemoryErrorType(kind), nvml.EccCounterType(counter))
		})
		if r == rSuccess {
			*count = C.ulonglong(v)
		}
		return r
	}
	*count = 0
	for _, f := range prof.Faults.ECC {
		if f.GPU == g && f.Type == uint32(kind) && f.Counter == uint32(counter) {
			*count = C.ulonglong(f.Value)
		}
	}
	return rSuccess
}

//export nvmlDeviceGetRemappedRows
func nvmlDeviceGetRemappedRows(device C.uintptr_t, corr, unc, pending, failure *C.uint) C.int {
	g, r := gpu(device, "nvmlDeviceGetRemappedRows")
	if r != rSuccess {
		return r
	}
	f := remapFault{}
	if d := prof.dev(g); d != nil {
		var c, u int
		var p, x bool
		_, r := call(func() (struct{}, nvml.Return) {
			var ret nvml.Return
			c, u, p, x, ret = d.GetRemappedRows()
			return struct{}{}, ret
		})
		if r != rSuccess {
			return r
		}
		f = remapFault{Correctable: uint(c), Uncorrectable: uint(u), Pending: p, Failure: x}
	} else {
		for _, rf := range prof.Faults.RemappedRows {
			if rf.GPU == g {
				f = rf
			}
		}
	}
	*corr, *unc = C.uint(f.Correctable), C.uint(f.Uncorrectable)
	*pending, *failure = cbool(f.Pending), cbool(f.Failure)
	return rSuccess
}

//export nvmlDeviceGetPcieReplayCounter
func nvmlDeviceGetPcieReplayCounter(device C.uintptr_t, value *C.uint) C.int {
	g, r := gpu(device, "nvmlDeviceGetPcieReplayCounter")
	if r != rSuccess {
		return r
	}
	if d := prof.dev(g); d != nil {
		v, r := call(d.GetPcieReplayCounter)
		if r == rSuccess {
			*value = C.uint(v)
		}
		return r
	}
	*value = 0
	for _, f := range prof.Faults.PCIeReplay {
		if f.GPU == g {
			*value = C.uint(f.Value)
		}
	}
	return rSuccess
}

func cbool(b bool) C.uint {
	if b {
		return 1
	}
	return 0
}

// checkHealthFaults refuses health-counter faults on a go-nvml machine whose mock does not
// answer the call: there would be nothing to inject into, and a test would pass vacuously.
func (m *nvidiaMock) checkHealthFaults(f *faults, refuse func(what, fn string, r C.int) error) error {
	probe := map[string]func(d nvml.Device) C.int{
		"nvmlDeviceGetTotalEccErrors": func(d nvml.Device) C.int {
			_, r := call(func() (uint64, nvml.Return) { return d.GetTotalEccErrors(eccUncorrected, eccVolatile) })
			return r
		},
		"nvmlDeviceGetRemappedRows": func(d nvml.Device) C.int {
			return call0(func() nvml.Return { _, _, _, _, r := d.GetRemappedRows(); return r })
		},
		"nvmlDeviceGetPcieReplayCounter": func(d nvml.Device) C.int {
			_, r := call(d.GetPcieReplayCounter)
			return r
		},
	}
	wanted := map[string][]int{}
	for _, x := range f.ECC {
		wanted["nvmlDeviceGetTotalEccErrors"] = append(wanted["nvmlDeviceGetTotalEccErrors"], x.GPU)
	}
	for _, x := range f.RemappedRows {
		wanted["nvmlDeviceGetRemappedRows"] = append(wanted["nvmlDeviceGetRemappedRows"], x.GPU)
	}
	for _, x := range f.PCIeReplay {
		wanted["nvmlDeviceGetPcieReplayCounter"] = append(wanted["nvmlDeviceGetPcieReplayCounter"], x.GPU)
	}
	for fn, gpus := range wanted {
		for _, g := range gpus {
			if g < 0 || g >= len(m.devs) {
				return refuse("health counter", fn, rInvalidArgument)
			}
			if r := probe[fn](m.devs[g]); r != rSuccess {
				return refuse(fn, fn, r)
			}
		}
	}
	return nil
}
