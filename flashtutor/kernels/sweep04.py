from flashtutor.bench.ch04 import *  # moved; notebooks are updated at the next re-execution
