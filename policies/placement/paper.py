"""The FGD paper's results, as its simulator's repository ships them: the median over its 10
seeds (42-51) of the GPU allocation ratio at 130 % arrived demand, per trace and policy.

Source: github.com/hkust-adsl/kubernetes-scheduler-simulator @8f3d641,
experiments/analysis/expected_results/analysis_allo_discrete.csv (Apache-2.0), column "130",
median of the 10 seed rows of each (workload, sc_policy). 17 traces: default, the CPU-heavy
cpuNNN, gpushareNN (share of GPU-sharing pods), gpuspecNN (GPU-model constraints) and
multigpuNN (share of multi-GPU pods). The traces that ask for more than 130 % of the cluster
(multigpu30, 40, 50) are thinned by the protocol (``protocol.arrivals``).
"""

from __future__ import annotations

PAPER_MEDIAN_130: dict[str, dict[str, float]] = {
    "openb_pod_list_cpu050.csv": {
        "Random": 91.16, "DotProd": 93.29, "GpuClustering": 93.79, "GpuPacking": 93.79,
        "BestFit": 93.82, "FGD": 95.20},
    "openb_pod_list_cpu100.csv": {
        "Random": 89.17, "DotProd": 92.02, "GpuClustering": 92.81, "GpuPacking": 92.81,
        "BestFit": 93.47, "FGD": 95.34},
    "openb_pod_list_cpu200.csv": {
        "Random": 83.70, "DotProd": 88.00, "GpuClustering": 90.02, "GpuPacking": 90.38,
        "BestFit": 92.42, "FGD": 95.08},
    "openb_pod_list_cpu250.csv": {
        "Random": 80.31, "DotProd": 84.04, "GpuClustering": 87.74, "GpuPacking": 88.31,
        "BestFit": 91.50, "FGD": 93.41},
    "openb_pod_list_default.csv": {
        "Random": 87.38, "DotProd": 90.80, "GpuClustering": 91.79, "GpuPacking": 92.06,
        "BestFit": 93.11, "FGD": 95.40},
    "openb_pod_list_gpushare100.csv": {
        "Random": 79.47, "DotProd": 82.47, "GpuClustering": 82.70, "GpuPacking": 82.64,
        "BestFit": 85.00, "FGD": 86.91},
    "openb_pod_list_gpushare40.csv": {
        "Random": 86.03, "DotProd": 89.58, "GpuClustering": 90.06, "GpuPacking": 90.07,
        "BestFit": 91.73, "FGD": 94.14},
    "openb_pod_list_gpushare60.csv": {
        "Random": 83.65, "DotProd": 87.17, "GpuClustering": 87.23, "GpuPacking": 87.52,
        "BestFit": 89.35, "FGD": 91.41},
    "openb_pod_list_gpushare80.csv": {
        "Random": 81.25, "DotProd": 84.47, "GpuClustering": 84.92, "GpuPacking": 85.06,
        "BestFit": 87.06, "FGD": 89.31},
    "openb_pod_list_gpuspec10.csv": {
        "Random": 87.51, "DotProd": 90.44, "GpuClustering": 92.19, "GpuPacking": 92.44,
        "BestFit": 93.33, "FGD": 94.94},
    "openb_pod_list_gpuspec20.csv": {
        "Random": 87.40, "DotProd": 89.97, "GpuClustering": 92.22, "GpuPacking": 93.05,
        "BestFit": 93.26, "FGD": 94.86},
    "openb_pod_list_gpuspec25.csv": {
        "Random": 86.88, "DotProd": 89.66, "GpuClustering": 92.00, "GpuPacking": 93.03,
        "BestFit": 93.22, "FGD": 94.81},
    "openb_pod_list_gpuspec33.csv": {
        "Random": 86.43, "DotProd": 89.11, "GpuClustering": 92.03, "GpuPacking": 93.23,
        "BestFit": 93.09, "FGD": 94.56},
    "openb_pod_list_multigpu20.csv": {
        "Random": 88.66, "DotProd": 92.02, "GpuClustering": 93.59, "GpuPacking": 93.75,
        "BestFit": 93.90, "FGD": 95.65},
    "openb_pod_list_multigpu30.csv": {
        "Random": 89.20, "DotProd": 93.23, "GpuClustering": 94.73, "GpuPacking": 94.96,
        "BestFit": 94.64, "FGD": 96.48},
    "openb_pod_list_multigpu40.csv": {
        "Random": 90.02, "DotProd": 94.22, "GpuClustering": 95.63, "GpuPacking": 95.75,
        "BestFit": 95.22, "FGD": 97.00},
    "openb_pod_list_multigpu50.csv": {
        "Random": 90.23, "DotProd": 94.88, "GpuClustering": 95.78, "GpuPacking": 96.19,
        "BestFit": 95.70, "FGD": 97.17},

}
