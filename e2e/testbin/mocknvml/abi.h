// The NVML structs this mock fills, laid out as in nvml.h (and pynvml's ctypes mirrors).
#ifndef MOCKNVML_ABI_H
#define MOCKNVML_ABI_H
#include <stdint.h>
#include <string.h>

typedef struct {
	char busIdLegacy[16];
	unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
	char busId[32];
} pciInfo;

typedef struct { unsigned long long total, free, used; } memInfo;

typedef union { double d; unsigned int ui; unsigned long ul; unsigned long long ull; } fieldValueUnion;

typedef struct {
	unsigned int fieldId, scopeId;
	long long timestamp, latencyUsec;
	unsigned int valueType, nvmlReturn;
	fieldValueUnion value;
} fieldValue;

typedef struct {
	unsigned int version;
	unsigned char clusterUuid[16];
	unsigned int status, cliqueId, state, healthMask;
} fabricInfoV2;

typedef struct {
	unsigned char clusterUuid[16];
	unsigned int status, cliqueId, state;
} fabricInfoV1;
#endif
