from flashtutor.bench.ch05 import *  # moved; notebooks are updated at the next re-execution
