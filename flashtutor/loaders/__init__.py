"""Loaders turn a learner's source file into something callable on torch tensors."""
from .nvrtc import CompileError, CudaModule, default_arch, load_cuda

__all__ = ["CompileError", "CudaModule", "default_arch", "load_cuda"]
