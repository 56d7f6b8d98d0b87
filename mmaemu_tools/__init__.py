"""mmaemu's GPU tools: the programs that record and check the hardware data mmaemu is built on.

Each is run as a module from the repository root (`python -m mmaemu_tools.record_goldens ...`);
scripts/h200_ground_truth.sh and scripts/h200_cuda_check.sh run them on a GPU machine
(docs/hardware_validation.md). They share the data-format helpers of _hwcommon.py, load
mmaemu_tools/cublaslt.py (the cuBLASLt heuristic query) from the library, and compare the hardware
with mmaemu itself and with the independent exact model of exactmodel.py (which the tests also
compare with the C model, and whose alternatives the probes score).

  record_heuristics        cuBLASLt's split-K choices -> tables/splitk (a GPU, or --dry-run)
  record_goldens           GEMM goldens: bits of torch._scaled_mm on the GPU
  probe_hopper             probes P0-P10 of the tensor-core arithmetic
  ingest_h200              one ground-truth run's files into the repository
  build_splitk_tables      the shipped split-K tables from the recorded rows
  vendor_tensor_core_vectors  the published tensor-core test vectors into test/data
  _rawmma                  raw mma.sync / wgmma through NVRTC (probe_hopper's instruction path)
  exactmodel               the exact model in pure Python (exact integers), with the probes'
                           alternatives
  splitk_infer_eval        held-out accuracy of splitk="infer" (mmaemu/planning/splitk_infer.py), per
                           profile, region and rule
  splitk_coverage          how public models' linear-layer shapes are decided, per profile
"""
