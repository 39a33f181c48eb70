// Command mocknvml is a stand-in libnvidia-ml.so.1 for tests: it implements the part of the NVML
// C ABI that hwprobe reads. MOCK_NVML_CONFIG names a YAML profile: either a machine of our own
// (profile.go), or `nvidia-mock: <name>`, one of the mock machines NVIDIA ships in
// github.com/NVIDIA/go-nvml, whose nvml.Interface then answers every call (nvidia.go). Faults
// apply to both. Build with -buildmode=c-shared; build.sh sets the soname and stubs the rest of
// the NVML API.
package main

// #include "abi.h"
import "C"

import (
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"unsafe"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// nvmlReturn_t values (nvml.h).
const (
	rSuccess         = 0
	rUninitialized   = 1
	rInvalidArgument = 2
	rNotSupported    = 3
	rNotFound        = 6
	rInsufficient    = 7
	rGPUIsLost       = 15
	rUnknown         = 999
	rVersionMismatch = 25
	fabricInfoV2Ver  = 0x02000024 // nvmlGpuFabricInfo_v2: sizeof | 2<<24
	handleBase       = 0xA0000    // handles are opaque integers, never Go pointers
	migHandleBase    = 0xB0000
)

var (
	mu      sync.Mutex
	prof    *profile
	refs    int
	cstrs   = map[int]*C.char{}
	errText = map[int]string{
		rSuccess: "Success", rUninitialized: "Uninitialized", rInvalidArgument: "Invalid Argument",
		rNotSupported: "Not Supported", rNotFound: "Not Found", rInsufficient: "Insufficient Size",
		rGPUIsLost: "GPU is lost", rVersionMismatch: "Argument version mismatch",
	}
)

func main() {}

//export nvmlInitWithFlags
func nvmlInitWithFlags(flags C.uint) C.int {
	mu.Lock()
	defer mu.Unlock()
	if prof == nil {
		p, err := loadProfile()
		if err != nil {
			fmt.Fprintf(os.Stderr, "mock NVML: %v\n", err)
			return rUnknown
		}
		prof = p
	}
	refs++
	return rSuccess
}

//export nvmlInit_v2
func nvmlInit_v2() C.int { return nvmlInitWithFlags(0) }

//export nvmlShutdown
func nvmlShutdown() C.int {
	mu.Lock()
	defer mu.Unlock()
	if refs == 0 {
		return rUninitialized
	}
	// The profile stays loaded: like a GPU's error counters, injected counters keep counting
	// across init/shutdown cycles (the environment cannot change under a running process).
	refs--
	return rSuccess
}

//export nvmlErrorString
func nvmlErrorString(r C.int) *C.char {
	mu.Lock()
	defer mu.Unlock()
	if s, ok := cstrs[int(r)]; ok {
		return s
	}
	text, ok := errText[int(r)]
	if !ok {
		text = "Unknown Error"
	}
	cstrs[int(r)] = C.CString(text)
	return cstrs[int(r)]
}

func putString(dst *C.char, size C.uint, s string) C.int {
	if dst == nil {
		return rInvalidArgument
	}
	if len(s)+1 > int(size) {
		return rInsufficient
	}
	buf := unsafe.Slice((*byte)(unsafe.Pointer(dst)), int(size))
	copy(buf, s)
	buf[len(s)] = 0
	return rSuccess
}

//export nvmlSystemGetDriverVersion
func nvmlSystemGetDriverVersion(version *C.char, size C.uint) C.int {
	if refs == 0 {
		return rUninitialized
	}
	if prof.nv != nil {
		v, r := call(prof.nv.srv.SystemGetDriverVersion)
		if r != rSuccess {
			return r
		}
		return putString(version, size, v)
	}
	return putString(version, size, prof.Driver)
}

//export nvmlDeviceGetCount_v2
func nvmlDeviceGetCount_v2(count *C.uint) C.int {
	if refs == 0 {
		return rUninitialized
	}
	*count = C.uint(prof.count())
	return rSuccess
}

//export nvmlDeviceGetHandleByIndex_v2
func nvmlDeviceGetHandleByIndex_v2(index C.uint, device *C.uintptr_t) C.int {
	if refs == 0 {
		return rUninitialized
	}
	if int(index) >= prof.count() {
		return rInvalidArgument
	}
	if prof.lost(int(index)) {
		return rGPUIsLost
	}
	*device = C.uintptr_t(handleBase + int(index))
	return rSuccess
}

// gpu resolves a handle, answering the error NVML would give for a bad or lost device.
func gpu(device C.uintptr_t, fn string) (int, C.int) {
	if refs == 0 {
		return 0, rUninitialized
	}
	g := int(device) - handleBase
	if g < 0 || g >= prof.count() {
		return 0, rInvalidArgument
	}
	if prof.lost(g) {
		return 0, rGPUIsLost
	}
	if prof.unsupported(fn) {
		return 0, rNotSupported
	}
	return g, rSuccess
}

func uuid(g int) string {
	return fmt.Sprintf("GPU-%s-%04x-%012x", prof.UUIDPrefix, g, g)
}

//export nvmlDeviceGetUUID
func nvmlDeviceGetUUID(device C.uintptr_t, out *C.char, size C.uint) C.int {
	if m := int(device) - migHandleBase; refs > 0 && m >= 0 && m < 1<<12 {
		return putString(out, size, fmt.Sprintf("MIG-%s-%04x-%012x", prof.UUIDPrefix, m>>4, m&15))
	}
	if prof != nil && prof.nv != nil && refs > 0 {
		if d := prof.nv.mig(device); d != nil {
			return putNv(d.GetUUID, out, size)
		}
	}
	g, r := gpu(device, "nvmlDeviceGetUUID")
	if r != rSuccess {
		return r
	}
	if d := prof.dev(g); d != nil {
		return putNv(d.GetUUID, out, size)
	}
	return putString(out, size, uuid(g))
}

//export nvmlDeviceGetName
func nvmlDeviceGetName(device C.uintptr_t, out *C.char, size C.uint) C.int {
	g, r := gpu(device, "nvmlDeviceGetName")
	if r != rSuccess {
		return r
	}
	if d := prof.dev(g); d != nil {
		return putNv(d.GetName, out, size)
	}
	return putString(out, size, prof.Defaults.Name)
}

func fillPCI(info *C.pciInfo, busID string) {
	var domain, bus, dev, fn uint
	fmt.Sscanf(strings.ReplaceAll(busID, ".", ":"), "%x:%x:%x:%x", &domain, &bus, &dev, &fn)
	C.memset(unsafe.Pointer(info), 0, C.sizeof_pciInfo)
	full := fmt.Sprintf("%08X:%02X:%02X.%X", domain, bus, dev, fn)
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&info.busId[0])), 31), full)
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&info.busIdLegacy[0])), 15), full[4:])
	info.domain, info.bus, info.device = C.uint(domain), C.uint(bus), C.uint(dev)
}

//export nvmlDeviceGetPciInfo_v3
func nvmlDeviceGetPciInfo_v3(device C.uintptr_t, info *C.pciInfo) C.int {
	g, r := gpu(device, "nvmlDeviceGetPciInfo_v3")
	if r != rSuccess {
		return r
	}
	if d := prof.dev(g); d != nil {
		p, r := call(d.GetPciInfo)
		if r == rSuccess {
			putPCI(info, p, d)
		}
		return r
	}
	fillPCI(info, prof.GPUs[g].BusID)
	return rSuccess
}

//export nvmlDeviceGetMemoryInfo
func nvmlDeviceGetMemoryInfo(device C.uintptr_t, mem *C.memInfo) C.int {
	g, r := gpu(device, "nvmlDeviceGetMemoryInfo")
	if r != rSuccess {
		return r
	}
	if d := prof.dev(g); d != nil {
		m, r := call(d.GetMemoryInfo)
		if r == rSuccess {
			mem.total, mem.free, mem.used = C.ulonglong(m.Total), C.ulonglong(m.Free), C.ulonglong(m.Used)
		}
		return r
	}
	total := C.ulonglong(prof.Defaults.MemoryMiB << 20)
	mem.total, mem.free, mem.used = total, total, 0
	return rSuccess
}

//export nvmlDeviceGetArchitecture
func nvmlDeviceGetArchitecture(device C.uintptr_t, arch *C.uint) C.int {
	g, r := gpu(device, "nvmlDeviceGetArchitecture")
	if r != rSuccess {
		return r
	}
	if d := prof.dev(g); d != nil {
		a, r := call(d.GetArchitecture)
		if r == rSuccess {
			*arch = C.uint(a)
		}
		return r
	}
	*arch = C.uint(prof.Defaults.Arch)
	return rSuccess
}

//export nvmlDeviceGetCudaComputeCapability
func nvmlDeviceGetCudaComputeCapability(device C.uintptr_t, major, minor *C.int) C.int {
	g, r := gpu(device, "nvmlDeviceGetCudaComputeCapability")
	if r != rSuccess {
		return r
	}
	if d := prof.dev(g); d != nil {
		cc, r := call(func() ([2]int, nvml.Return) {
			major, minor, r := d.GetCudaComputeCapability()
			return [2]int{major, minor}, r
		})
		if r == rSuccess {
			*major, *minor = C.int(cc[0]), C.int(cc[1])
		}
		return r
	}
	*major, *minor = C.int(prof.Defaults.CC[0]), C.int(prof.Defaults.CC[1])
	return rSuccess
}

//export nvmlDeviceGetMigMode
func nvmlDeviceGetMigMode(device C.uintptr_t, current, pending *C.uint) C.int {
	g, r := gpu(device, "nvmlDeviceGetMigMode")
	if r != rSuccess {
		return r
	}
	if d := prof.dev(g); d != nil {
		mode, r := call(func() ([2]int, nvml.Return) {
			c, p, r := d.GetMigMode()
			return [2]int{c, p}, r
		})
		if r == rSuccess {
			*current, *pending = C.uint(mode[0]), C.uint(mode[1])
		}
		return r
	}
	switch prof.Defaults.MIG {
	case "enabled":
		*current, *pending = 1, 1
	case "disabled":
		*current, *pending = 0, 0
	default:
		return rNotSupported
	}
	return rSuccess
}

//export nvmlDeviceGetMaxMigDeviceCount
func nvmlDeviceGetMaxMigDeviceCount(device C.uintptr_t, count *C.uint) C.int {
	g, r := gpu(device, "nvmlDeviceGetMaxMigDeviceCount")
	if r != rSuccess {
		return r
	}
	if d := prof.dev(g); d != nil {
		n, r := call(d.GetMaxMigDeviceCount)
		if r == rSuccess {
			*count = C.uint(n)
		}
		return r
	}
	if prof.Defaults.MIG != "enabled" {
		*count = 0
		return rSuccess
	}
	*count = 7
	return rSuccess
}

//export nvmlDeviceGetMigDeviceHandleByIndex
func nvmlDeviceGetMigDeviceHandleByIndex(device C.uintptr_t, index C.uint, mig *C.uintptr_t) C.int {
	g, r := gpu(device, "nvmlDeviceGetMigDeviceHandleByIndex")
	if r != rSuccess {
		return r
	}
	if d := prof.dev(g); d != nil {
		m, r := call(func() (nvml.Device, nvml.Return) { return d.GetMigDeviceHandleByIndex(int(index)) })
		if r == rSuccess {
			*mig = prof.nv.migHandle(m)
		}
		return r
	}
	if prof.Defaults.MIG != "enabled" || int(index) >= prof.Defaults.MIGDevices {
		return rNotFound
	}
	*mig = C.uintptr_t(migHandleBase + g<<4 + int(index))
	return rSuccess
}

//export nvmlDeviceGetCpuAffinity
func nvmlDeviceGetCpuAffinity(device C.uintptr_t, size C.uint, set *C.ulong) C.int {
	g, r := gpu(device, "nvmlDeviceGetCpuAffinity")
	if r != rSuccess {
		return r
	}
	words := unsafe.Slice((*uint64)(unsafe.Pointer(set)), int(size))
	if d := prof.dev(g); d != nil {
		got, r := call(func() ([]uint, nvml.Return) { return d.GetCpuAffinity(int(size)) })
		if r == rSuccess {
			clear(words)
			for i := 0; i < len(got) && i < len(words); i++ {
				words[i] = uint64(got[i])
			}
		}
		return r
	}
	clear(words)
	lo, hi := prof.GPUs[g].CPUs[0], prof.GPUs[g].CPUs[1]
	for cpu := lo; cpu <= hi && cpu/64 < len(words); cpu++ {
		words[cpu/64] |= 1 << (cpu % 64)
	}
	return rSuccess
}

//export nvmlDeviceGetNumaNodeId
func nvmlDeviceGetNumaNodeId(device C.uintptr_t, node *C.uint) C.int {
	g, r := gpu(device, "nvmlDeviceGetNumaNodeId")
	if r != rSuccess {
		return r
	}
	if d := prof.dev(g); d != nil {
		n, r := call(d.GetNumaNodeId)
		if r == rSuccess {
			*node = C.uint(n)
		}
		return r
	}
	if prof.GPUs[g].GPUNUMA == nil {
		return rNotSupported
	}
	*node = C.uint(*prof.GPUs[g].GPUNUMA)
	return rSuccess
}

func fabricUUID(dst *[16]C.uchar, text string) {
	raw, _ := hex.DecodeString(strings.ReplaceAll(text, "-", ""))
	for i := 0; i < 16 && i < len(raw); i++ {
		dst[i] = C.uchar(raw[i])
	}
}

//export nvmlDeviceGetGpuFabricInfoV
func nvmlDeviceGetGpuFabricInfoV(device C.uintptr_t, info *C.fabricInfoV2) C.int {
	g, r := gpu(device, "nvmlDeviceGetGpuFabricInfoV")
	if r != rSuccess {
		return r
	}
	if info.version != fabricInfoV2Ver {
		return rVersionMismatch
	}
	f, r := fabricOf(g)
	if r != rSuccess {
		return r
	}
	if f == nil {
		return rNotSupported
	}
	info.clusterUuid = [16]C.uchar{}
	fabricUUID(&info.clusterUuid, f.ClusterUUID)
	info.status, info.cliqueId, info.state, info.healthMask = C.uint(f.Status), C.uint(f.CliqueID), C.uint(f.State), 0
	return rSuccess
}

//export nvmlDeviceGetGpuFabricInfo
func nvmlDeviceGetGpuFabricInfo(device C.uintptr_t, info *C.fabricInfoV1) C.int {
	g, r := gpu(device, "nvmlDeviceGetGpuFabricInfo")
	if r != rSuccess {
		return r
	}
	f, r := fabricOf(g)
	if r != rSuccess {
		return r
	}
	if f == nil {
		return rNotSupported
	}
	info.clusterUuid = [16]C.uchar{}
	fabricUUID(&info.clusterUuid, f.ClusterUUID)
	info.status, info.cliqueId, info.state = C.uint(f.Status), C.uint(f.CliqueID), C.uint(f.State)
	return rSuccess
}

// fabricOf answers a GPU's fabric info: from the profile, or from go-nvml's mock (its v1 call),
// with an injected fabric fault replacing what the mock said.
func fabricOf(g int) (*fabricSpec, C.int) {
	d := prof.dev(g)
	if d == nil {
		return prof.fabric(g), rSuccess
	}
	info, r := call(d.GetGpuFabricInfo)
	if r != rSuccess {
		return nil, r
	}
	if f := prof.fabricFault(g); f != nil {
		return f, rSuccess
	}
	return &fabricSpec{State: uint32(info.State), Status: info.Status, CliqueID: info.CliqueId,
		ClusterUUID: hex.EncodeToString(info.ClusterUuid[:])}, rSuccess
}

// putNv writes the string a go-nvml mock method answers.
func putNv(fn func() (string, nvml.Return), out *C.char, size C.uint) C.int {
	v, r := call(fn)
	if r != rSuccess {
		return r
	}
	return putString(out, size, v)
}
