"""flashtutor: reference kernels, loaders and an autograder for the fast-attention course."""
from .api import check_inputs, output_like
from .grading import grade
from .loaders import CompileError, load_cuda
from .problems import SHAPE_SETS, Problem, reference, sdpa, shape_set

__version__ = "0.1.0"


__all__ = ["CompileError", "Problem", "SHAPE_SETS", "check_inputs", "grade", "load_cuda", "output_like",
           "reference", "sdpa", "shape_set"]
