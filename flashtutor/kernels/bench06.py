from flashtutor.bench.ch06 import *  # moved; notebooks are updated at the next re-execution
