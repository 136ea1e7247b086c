"""tessera-cuda: a Tessera backend for NVIDIA GPUs (TIR -> CUDA C -> NVRTC cubin, launched
through NVIDIA's cuda-bindings). See README.md."""

__version__ = "0.1.0"
