"""Kernel profiling harness: measures GEMM, attention, elementwise, norm, optimizer and collective kernels."""
