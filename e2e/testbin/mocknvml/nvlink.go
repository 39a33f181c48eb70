package main

// #include "abi.h"
import "C"

import (
	"unsafe"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Field ids and enums from nvml.h.
const (
	fiLinkCount   = 91
	fiLinkSpeed   = 164
	fiLinkState   = 165
	fiLinkVersion = 166
	valueUint     = 1
	remoteGPU     = 0x00
	remoteSwitch  = 0x02
	remoteUnknown = 0xFF
	p2pOK         = 0
	p2pChipset    = 1
	p2pRegkey     = 4
	p2pNotSupp    = 5
	p2pIndexNVL   = 2
	p2pIndexPCI   = 4
)

func link(device C.uintptr_t, l C.uint, fn string) (int, int, C.int) {
	g, r := gpu(device, fn)
	if r != rSuccess || prof.nv != nil {
		return g, int(l), r
	}
	if prof.Defaults.NVLink.Links == 0 {
		return 0, 0, rNotSupported
	}
	if int(l) >= prof.Defaults.NVLink.Links {
		return 0, 0, rInvalidArgument
	}
	return g, int(l), rSuccess
}

//export nvmlDeviceGetNvLinkState
func nvmlDeviceGetNvLinkState(device C.uintptr_t, l C.uint, active *C.uint) C.int {
	g, n, r := link(device, l, "nvmlDeviceGetNvLinkState")
	if r != rSuccess {
		return r
	}
	if d := prof.dev(g); d != nil {
		state, r := call(func() (nvml.EnableState, nvml.Return) { return d.GetNvLinkState(n) })
		if r == rSuccess {
			*active = C.uint(state)
			if prof.linkDown(g, n) {
				*active = 0
			}
		}
		return r
	}
	*active = 0
	if prof.linkActive(g, n) {
		*active = 1
	}
	return rSuccess
}

//export nvmlDeviceGetNvLinkVersion
func nvmlDeviceGetNvLinkVersion(device C.uintptr_t, l C.uint, version *C.uint) C.int {
	g, n, r := link(device, l, "nvmlDeviceGetNvLinkVersion")
	if r != rSuccess {
		return r
	}
	if d := prof.dev(g); d != nil {
		v, r := call(func() (uint32, nvml.Return) { return d.GetNvLinkVersion(n) })
		if r == rSuccess {
			*version = C.uint(v)
		}
		return r
	}
	*version = C.uint(prof.Defaults.NVLink.Version)
	return rSuccess
}

// remote answers the far end of an active link: a GPU's bus id, a visible switch's bus id, or
// "" for a switch the node cannot see (VMs, multi-node NVLink trays).
func remote(g, n int) (kind int, busID string, ok bool) {
	if !prof.linkActive(g, n) {
		return 0, "", false
	}
	end := prof.links[g][n]
	if end.peerGPU >= 0 {
		return remoteGPU, prof.GPUs[end.peerGPU].BusID, true
	}
	if end.switchID < len(prof.Switches) && prof.Switches[end.switchID] != "" {
		return remoteSwitch, prof.Switches[end.switchID], true
	}
	return remoteUnknown, "", true
}

//export nvmlDeviceGetNvLinkRemotePciInfo_v2
func nvmlDeviceGetNvLinkRemotePciInfo_v2(device C.uintptr_t, l C.uint, info *C.pciInfo) C.int {
	g, n, r := link(device, l, "nvmlDeviceGetNvLinkRemotePciInfo_v2")
	if r != rSuccess {
		return r
	}
	if d := prof.dev(g); d != nil {
		p, r := call(func() (nvml.PciInfo, nvml.Return) { return d.GetNvLinkRemotePciInfo(n) })
		if r == rSuccess {
			putPCI(info, p, nil)
		}
		return r
	}
	_, busID, ok := remote(g, n)
	if !ok || busID == "" {
		return rNotSupported
	}
	fillPCI((*C.pciInfo)(unsafe.Pointer(info)), busID)
	return rSuccess
}

//export nvmlDeviceGetNvLinkRemoteDeviceType
func nvmlDeviceGetNvLinkRemoteDeviceType(device C.uintptr_t, l C.uint, kind *C.uint) C.int {
	g, n, r := link(device, l, "nvmlDeviceGetNvLinkRemoteDeviceType")
	if r != rSuccess {
		return r
	}
	if d := prof.dev(g); d != nil {
		k, r := call(func() (nvml.IntNvLinkDeviceType, nvml.Return) { return d.GetNvLinkRemoteDeviceType(n) })
		if r == rSuccess {
			*kind = C.uint(k)
		}
		return r
	}
	k, _, ok := remote(g, n)
	if !ok {
		return rNotSupported
	}
	*kind = C.uint(k)
	return rSuccess
}

//export nvmlDeviceGetNvLinkCapability
func nvmlDeviceGetNvLinkCapability(device C.uintptr_t, l, capability C.uint, result *C.uint) C.int {
	g, n, r := link(device, l, "nvmlDeviceGetNvLinkCapability")
	if r != rSuccess {
		return r
	}
	if d := prof.dev(g); d != nil {
		v, r := call(func() (uint32, nvml.Return) {
			return d.GetNvLinkCapability(n, nvml.NvLinkCapability(capability))
		})
		if r == rSuccess {
			*result = C.uint(v)
		}
		return r
	}
	*result = 0
	if prof.linkActive(g, n) {
		*result = 1
	}
	return rSuccess
}

//export nvmlDeviceGetNvLinkErrorCounter
func nvmlDeviceGetNvLinkErrorCounter(device C.uintptr_t, l, counter C.uint, value *C.ulonglong) C.int {
	g, n, r := link(device, l, "nvmlDeviceGetNvLinkErrorCounter")
	if r != rSuccess {
		return r
	}
	if d := prof.dev(g); d != nil {
		v, r := call(func() (uint64, nvml.Return) {
			return d.GetNvLinkErrorCounter(n, nvml.NvLinkErrorCounter(counter))
		})
		if r == rSuccess {
			if injected, ok := prof.injectedError(g, n, uint32(counter)); ok {
				v = injected
			}
			*value = C.ulonglong(v)
		}
		return r
	}
	*value = C.ulonglong(prof.errorCounter(g, n, uint32(counter)))
	return rSuccess
}

//export nvmlDeviceGetFieldValues
func nvmlDeviceGetFieldValues(device C.uintptr_t, count C.int, values *C.fieldValue) C.int {
	g, r := gpu(device, "nvmlDeviceGetFieldValues")
	if r != rSuccess {
		return r
	}
	if d := prof.dev(g); d != nil {
		return nvFieldValues(g, d, unsafe.Slice(values, int(count)))
	}
	nv := prof.Defaults.NVLink
	for i := range unsafe.Slice(values, int(count)) {
		v := &unsafe.Slice(values, int(count))[i]
		v.valueType, v.nvmlReturn = valueUint, rSuccess
		l := int(v.scopeId)
		inRange := l < nv.Links
		var out uint32
		switch {
		case nv.Links == 0:
			v.nvmlReturn = rNotSupported
		case v.fieldId == fiLinkCount:
			out = uint32(nv.Links)
		case v.fieldId == fiLinkSpeed && inRange:
			if prof.linkActive(g, l) {
				out = nv.SpeedMBps
			}
		case v.fieldId == fiLinkState && inRange:
			if prof.linkActive(g, l) {
				out = 1
			}
		case v.fieldId == fiLinkVersion && inRange:
			out = nv.Version
		default:
			v.nvmlReturn = rNotSupported
		}
		*(*C.uint)(unsafe.Pointer(&v.value)) = C.uint(out)
	}
	return rSuccess
}

//export nvmlDeviceGetTopologyCommonAncestor
func nvmlDeviceGetTopologyCommonAncestor(d1, d2 C.uintptr_t, level *C.uint) C.int {
	a, r := gpu(d1, "nvmlDeviceGetTopologyCommonAncestor")
	if r != rSuccess {
		return r
	}
	b, r := gpu(d2, "nvmlDeviceGetTopologyCommonAncestor")
	if r != rSuccess {
		return r
	}
	if da, db := prof.dev(a), prof.dev(b); da != nil {
		lv, r := call(func() (nvml.GpuTopologyLevel, nvml.Return) { return da.GetTopologyCommonAncestor(db) })
		if r == rSuccess {
			*level = C.uint(lv)
		}
		return r
	}
	*level = C.uint(prof.commonAncestor(a, b))
	return rSuccess
}

//export nvmlDeviceGetP2PStatus
func nvmlDeviceGetP2PStatus(d1, d2 C.uintptr_t, index C.uint, status *C.uint) C.int {
	a, r := gpu(d1, "nvmlDeviceGetP2PStatus")
	if r != rSuccess {
		return r
	}
	b, r := gpu(d2, "nvmlDeviceGetP2PStatus")
	if r != rSuccess {
		return r
	}
	if da, db := prof.dev(a), prof.dev(b); da != nil {
		st, r := call(func() (nvml.GpuP2PStatus, nvml.Return) {
			return da.GetP2PStatus(db, nvml.GpuP2PCapsIndex(index))
		})
		if r == rSuccess {
			*status = C.uint(st)
			if a != b && prof.p2pDisabled(a, b) {
				*status = p2pRegkey
			}
		}
		return r
	}
	nvlinked := prof.Defaults.NVLink.Links > 0 && prof.nvlinkCount(a, b) > 0
	pcieOK := prof.commonAncestor(a, b) <= 30 // P2P over PCIe stops at the host bridge
	switch {
	case a == b:
		*status = p2pOK
	case prof.p2pDisabled(a, b):
		*status = p2pRegkey
	case index == p2pIndexNVL && nvlinked:
		*status = p2pOK
	case index == p2pIndexNVL:
		*status = p2pNotSupp
	case index == p2pIndexPCI && pcieOK:
		*status = p2pOK
	case nvlinked || pcieOK:
		*status = p2pOK
	default:
		*status = p2pChipset
	}
	return rSuccess
}

// nvFieldValues passes a field-value request to go-nvml's mock; an injected link fault then
// zeroes the state and speed fields of that link.
func nvFieldValues(g int, d nvml.Device, vals []C.fieldValue) C.int {
	in := make([]nvml.FieldValue, len(vals))
	for i := range vals {
		in[i].FieldId, in[i].ScopeId = uint32(vals[i].fieldId), uint32(vals[i].scopeId)
	}
	if r := call0(func() nvml.Return { return d.GetFieldValues(in) }); r != rSuccess {
		return r
	}
	for i := range vals {
		v := &vals[i]
		v.timestamp, v.latencyUsec = C.longlong(in[i].Timestamp), C.longlong(in[i].LatencyUsec)
		v.valueType, v.nvmlReturn = C.uint(in[i].ValueType), C.uint(in[i].NvmlReturn)
		*(*[8]byte)(unsafe.Pointer(&v.value)) = in[i].Value
		down := prof.linkDown(g, int(in[i].ScopeId))
		if down && in[i].NvmlReturn == rSuccess && (in[i].FieldId == fiLinkState || in[i].FieldId == fiLinkSpeed) {
			*(*[8]byte)(unsafe.Pointer(&v.value)) = [8]byte{}
		}
	}
	return rSuccess
}
